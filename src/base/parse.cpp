// Numbers from text: see parse.h.
#include "loom/parse.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "loom/error.h"

namespace loom {
namespace {

std::string quoted(std::string_view text) {
  std::string q = "'";
  // Keep messages one line and short even for hostile input.
  for (char c : text.substr(0, 64)) q += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 64) q += "...";
  return q + "'";
}

// Whole numbers as integers ("1000000", not "1e+06"); others in their shortest exact form.
std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string describe_range(int64_t min, int64_t max) {
  constexpr int64_t lo = std::numeric_limits<int64_t>::min(),
                    hi = std::numeric_limits<int64_t>::max();
  if (min == lo && max == hi) return "any integer";
  if (max == hi) return "at least " + std::to_string(min);
  if (min == lo) return "at most " + std::to_string(max);
  return "from " + std::to_string(min) + " to " + std::to_string(max);
}

std::string describe_range(double min, double max) {
  constexpr double hi = std::numeric_limits<double>::max();
  if (min == -hi && max == hi) return "any finite number";
  if (max == hi) return "at least " + number_text(min);
  if (min == -hi) return "at most " + number_text(max);
  return "from " + number_text(min) + " to " + number_text(max);
}

int64_t parse_int(std::string_view text, std::string_view what, int64_t min, int64_t max) {
  std::string_view digits = text;
  if (digits.size() > 1 && digits[0] == '+' && digits[1] >= '0' && digits[1] <= '9')
    digits.remove_prefix(1);
  int64_t v = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, v);
  if (digits.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    LOOM_THROW(ValueError, what, " expects an integer (", describe_range(min, max), ") but got ",
               quoted(text));
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    LOOM_THROW(ValueError, what, " must be an integer ", describe_range(min, max), " but got ",
               quoted(text),
               ec == std::errc::result_out_of_range ? " (too large for a 64-bit integer)" : "");
  }
  return v;
}

double parse_double(std::string_view text, std::string_view what, double min, double max) {
  // strtod needs a terminated string and accepts leading spaces, "nan" and hex floats: check first.
  const std::string s(text);
  bool plain = !s.empty();
  for (char c : s) {
    plain = plain &&
            ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-');
  }
  char* end = nullptr;
  errno = 0;
  const double v = plain ? std::strtod(s.c_str(), &end) : 0.0;
  if (!plain || end != s.c_str() + s.size()) {
    LOOM_THROW(ValueError, what, " expects a number (", describe_range(min, max), ") but got ",
               quoted(text));
  }
  if (errno == ERANGE || !std::isfinite(v)) {
    const bool underflow = std::isfinite(v) && std::fabs(v) <= std::numeric_limits<double>::min();
    LOOM_THROW(
        ValueError, what, " must be a number ", describe_range(min, max), " but got ", quoted(text),
        underflow ? " (too small to represent: it would read as 0)" : " (too large to represent)");
  }
  if (v < min || v > max) {
    LOOM_THROW(ValueError, what, " must be a number ", describe_range(min, max), " but got ",
               quoted(text));
  }
  return v;
}

bool parse_bool(std::string_view text, std::string_view what) {
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  LOOM_THROW(ValueError, what, " expects a boolean (1/0, true/false, yes/no, on/off) but got ",
             quoted(text));
}

}  // namespace loom
