// The JSON parser: recursive descent over the text, one pass, no copies beyond the values it
// builds. Strict RFC 8259 (UTF-8 checked, no trailing commas, no comments) plus Python's NaN /
// Infinity.
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "base/json_parse.h"
#include "loom/error.h"

namespace loom::io::detail {
namespace {

// Deeper documents are rejected rather than risking the stack; checkpoints nest a few levels.
constexpr int kMaxDepth = 256;
// Objects with more members than this check duplicate keys with a hash set instead of a scan.
constexpr size_t kLinearDuplicateScan = 16;

struct ParseFailure {
  size_t offset;
  std::string reason;
};

class Parser {
 public:
  explicit Parser(std::string_view text)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()) {}

  void document(Json* out) {
    skip_ws();
    value(out, 0);
    skip_ws();
    if (p_ != end_) fail("unexpected data after the JSON value");
  }

 private:
  [[noreturn]] void fail_at(const char* where, std::string reason) {
    throw ParseFailure{static_cast<size_t>(where - begin_), std::move(reason)};
  }
  [[noreturn]] void fail(std::string reason) { fail_at(p_, std::move(reason)); }

  [[noreturn]] void unexpected(const char* expected) {
    if (p_ == end_) fail(std::string("unexpected end of input; expected ") + expected);
    unsigned char c = static_cast<unsigned char>(*p_);
    std::string got = c >= 0x20 && c < 0x7f ? std::string("'") + *p_ + "'" : str_cat_hex(c);
    fail("unexpected " + got + "; expected " + expected);
  }
  static std::string str_cat_hex(unsigned char c) {
    static const char* hex = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 0xf];
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      return false;
    p_ += word.size();
    return true;
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  void value(Json* out, int depth) {
    if (p_ == end_) unexpected("a value");
    const char c = *p_;
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '-' || is_digit(c)) return number(out);
    if (c == '"') {
      *out = Json(string());
    } else if (literal("true")) {
      *out = Json(true);
    } else if (literal("false")) {
      *out = Json(false);
    } else if (literal("null")) {
      *out = Json();
    } else if (literal("NaN")) {
      *out = Json(std::numeric_limits<double>::quiet_NaN());
    } else if (literal("Infinity")) {
      *out = Json(HUGE_VAL);
    } else {
      unexpected("a value");
    }
  }

  void object(Json* out, int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    ++p_;  // '{'
    Json::Object members;
    std::unordered_set<std::string> seen;  // filled only for large objects
    skip_ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      *out = Json(std::move(members));
      return;
    }
    while (true) {
      skip_ws();
      if (p_ == end_ || *p_ != '"') unexpected("a string key");
      const char* key_at = p_;
      std::string key = string();
      bool duplicate = false;
      if (members.size() < kLinearDuplicateScan) {
        for (const auto& m : members) duplicate |= m.first == key;
      } else {
        if (seen.empty()) {
          for (const auto& m : members) seen.insert(m.first);
        }
        duplicate = !seen.insert(key).second;
      }
      if (duplicate) fail_at(key_at, "duplicate key \"" + key + "\"");
      skip_ws();
      if (p_ == end_ || *p_ != ':') unexpected("':' after an object key");
      ++p_;
      skip_ws();
      members.emplace_back(std::move(key), Json());
      value(&members.back().second, depth + 1);
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        break;
      }
      unexpected("',' or '}' after an object member");
    }
    *out = Json(std::move(members));
  }

  void array(Json* out, int depth) {
    if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    ++p_;  // '['
    Json::Array items;
    skip_ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      *out = Json(std::move(items));
      return;
    }
    while (true) {
      skip_ws();
      items.emplace_back();
      value(&items.back(), depth + 1);
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        break;
      }
      unexpected("',' or ']' after an array element");
    }
    *out = Json(std::move(items));
  }

  void number(Json* out) {
    const char* start = p_;
    if (*p_ == '-') {
      ++p_;
      if (literal("Infinity")) {
        *out = Json(-HUGE_VAL);
        return;
      }
    }
    if (p_ == end_ || !is_digit(*p_)) unexpected("a digit");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    bool integral = true;
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) unexpected("a digit after '.'");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) unexpected("a digit in the exponent");
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (integral) {
      int64_t i = 0;
      auto [ptr, ec] = std::from_chars(start, p_, i);
      if (ec == std::errc()) {
        *out = Json(i);
        return;
      }
      // Beyond int64: keep it as the nearest double, as most JSON readers do.
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(start, p_, d);
    if (ec != std::errc()) fail_at(start, "number out of the range of a double");
    *out = Json(d);
  }

  // Length of the valid UTF-8 sequence at p (non-ASCII lead byte), or 0.
  size_t utf8_sequence() const {
    auto byte = [&](size_t k) -> unsigned {
      return p_ + k < end_ ? static_cast<unsigned char>(p_[k]) : 0x100;
    };
    auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
      return byte(k) >= lo && byte(k) <= hi;
    };
    unsigned c = byte(0);
    if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
    if (c == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
    if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;  // no UTF-16 surrogates
    if (c >= 0xe1 && c <= 0xef) return cont(1) && cont(2) ? 3 : 0;
    if (c == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
    return 0;
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int k = 0; k < 4; ++k, ++p_) {
      if (p_ == end_) unexpected("4 hex digits after \\u");
      char c = *p_;
      unsigned d = is_digit(c)                              ? c - '0'
                   : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                            : 16;
      if (d == 16) unexpected("4 hex digits after \\u");
      v = v * 16 + d;
    }
    return v;
  }

  static void append_utf8(unsigned cp, std::string& s) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  void escape(std::string& s) {
    const char* at = p_;
    ++p_;  // '\'
    if (p_ == end_) unexpected("an escape character");
    char c = *p_++;
    switch (c) {
      case '"':
        s += '"';
        return;
      case '\\':
        s += '\\';
        return;
      case '/':
        s += '/';
        return;
      case 'b':
        s += '\b';
        return;
      case 'f':
        s += '\f';
        return;
      case 'n':
        s += '\n';
        return;
      case 'r':
        s += '\r';
        return;
      case 't':
        s += '\t';
        return;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff)
          fail_at(at, "unpaired UTF-16 low surrogate in \\u escape");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (!literal("\\u")) fail_at(at, "unpaired UTF-16 high surrogate in \\u escape");
          unsigned lo = hex4();
          if (lo < 0xdc00 || lo > 0xdfff)
            fail_at(at, "unpaired UTF-16 high surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        append_utf8(cp, s);
        return;
      }
      default:
        --p_;
        unexpected("a valid escape character (one of \"\\/bfnrtu)");
    }
  }

  std::string string() {
    const char* start = p_;
    ++p_;  // opening quote
    std::string s;
    while (true) {
      const char* run = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20 &&
             static_cast<unsigned char>(*p_) < 0x80) {
        ++p_;
      }
      s.append(run, p_);
      if (p_ == end_) fail_at(start, "unterminated string");
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return s;
      }
      if (c == '\\') {
        escape(s);
      } else if (c < 0x20) {
        fail("unescaped control character " + str_cat_hex(c) + " in a string");
      } else {
        size_t n = utf8_sequence();
        if (n == 0) fail("invalid UTF-8 in a string");
        s.append(p_, n);
        p_ += n;
      }
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
};

}  // namespace

bool parse_json(std::string_view text, Json* out, JsonParseError* err) {
  try {
    Parser(text).document(out);
    return true;
  } catch (ParseFailure& f) {
    err->offset = f.offset;
    err->reason = std::move(f.reason);
    return false;
  }
}

}  // namespace loom::io::detail

namespace loom {

Json Json::parse(std::string_view text, const std::string& what) {
  Json out;
  io::detail::JsonParseError err;
  if (!io::detail::parse_json(text, &out, &err)) {
    LOOM_THROW(DataError, "[json] ", what, ": ", err.reason, " at byte offset ", err.offset);
  }
  return out;
}

}  // namespace loom
