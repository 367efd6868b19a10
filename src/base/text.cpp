// Text for people and documents: see loom/text.h.
#include "loom/text.h"

#include <cmath>
#include <cstdio>

namespace loom {

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double scaled = bytes;
  while (u + 1 < 6 && std::abs(scaled) >= 1024) {
    scaled /= 1024;
    ++u;
  }
  char buf[48];
  if (scaled == std::floor(scaled) && std::abs(scaled) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%lld %s", static_cast<long long>(scaled), kUnits[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g %s", scaled, kUnits[u]);
  }
  return buf;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace loom
