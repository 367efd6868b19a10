// Numbers from text (base layer): the one parser for command-line options, LOOM_* settings and
// text fields of files. Whole text only (no trailing characters), no silent saturation on overflow,
// no NaN or infinities unless asked for, and a range the value must lie in.
//
// Errors throw ValueError whose message starts with `what` (e.g. "[loom train] --lr") and says what
// was expected, the range and the text given. Every function is thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "loom/export.h"

namespace loom {

// A decimal integer (optional sign; no spaces, no "0x"). Out-of-range text (say 10^23) is an error
// naming the range, never a clamp.
LOOM_API int64_t parse_int(std::string_view text, std::string_view what,
                           int64_t min = std::numeric_limits<int64_t>::min(),
                           int64_t max = std::numeric_limits<int64_t>::max());

// A finite decimal number ("0.001", "1e-3", ".5"); "nan", "inf" and overflowing text such as
// "1e400" are errors. Underflow to zero of a nonzero number ("1e-400") is an error too: the user
// asked for something that is not zero.
LOOM_API double parse_double(std::string_view text, std::string_view what,
                             double min = -std::numeric_limits<double>::max(),
                             double max = std::numeric_limits<double>::max());

// "1", "true", "yes", "on" and "0", "false", "no", "off" (any case); anything else is an error.
LOOM_API bool parse_bool(std::string_view text, std::string_view what);

// "from 1 to 100", "at least 0", "at most 8" or "any integer": the wording errors use for a range.
LOOM_API std::string describe_range(int64_t min, int64_t max);
LOOM_API std::string describe_range(double min, double max);

}  // namespace loom
