// Text for people and documents (base layer): byte counts and escaping for XML and HTML. Every
// function is pure and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "loom/export.h"

namespace loom {

// A byte count in the largest binary unit it reaches: whole multiples exactly ("64 KiB", "3 MiB",
// "100 B"), others to four significant digits ("1.5 MiB", "32.77 KiB").
LOOM_API std::string format_bytes(double bytes);

// `s` with & < > " ' replaced by their entities: safe in XML and HTML text and attribute values.
LOOM_API std::string xml_escape(std::string_view s);

}  // namespace loom
