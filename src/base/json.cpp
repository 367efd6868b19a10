// Json values: construction, typed access and dump. The parser lives in json_parse.cpp.
#include "loom/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "loom/error.h"

namespace loom {

Json::Json(const char* s) : type_(Type::String) {
  v_.s = new std::string(s);
}
Json::Json(std::string_view s) : type_(Type::String) {
  v_.s = new std::string(s);
}
Json::Json(std::string s) : type_(Type::String) {
  v_.s = new std::string(std::move(s));
}
Json::Json(Array a) : type_(Type::Array) {
  v_.a = new Array(std::move(a));
}
Json::Json(Object o) : type_(Type::Object) {
  v_.o = new Object(std::move(o));
}

Json Json::array(std::initializer_list<Json> items) {
  return Json(Array(items));
}
Json Json::object(std::initializer_list<Member> members) {
  Json j = Json(Object());
  for (const Member& m : members) j.set(m.first, m.second);
  return j;
}

Json::Json(const Json& o) : type_(o.type_), v_(o.v_) {
  switch (type_) {
    case Type::String:
      v_.s = new std::string(*o.v_.s);
      break;
    case Type::Array:
      v_.a = new Array(*o.v_.a);
      break;
    case Type::Object:
      v_.o = new Object(*o.v_.o);
      break;
    default:
      break;
  }
}

Json& Json::operator=(const Json& o) {
  if (this != &o) *this = Json(o);
  return *this;
}

Json& Json::operator=(Json&& o) noexcept {
  if (this != &o) {
    destroy();
    type_ = o.type_;
    v_ = o.v_;
    o.type_ = Type::Null;
  }
  return *this;
}

void Json::destroy() noexcept {
  switch (type_) {
    case Type::String:
      delete v_.s;
      break;
    case Type::Array:
      delete v_.a;
      break;
    case Type::Object:
      delete v_.o;
      break;
    default:
      break;
  }
  type_ = Type::Null;
}

const char* Json::type_name() const {
  switch (type_) {
    case Type::Null:
      return "null";
    case Type::Bool:
      return "bool";
    case Type::Int:
      return "integer";
    case Type::Double:
      return "number";
    case Type::String:
      return "string";
    case Type::Array:
      return "array";
    case Type::Object:
      return "object";
  }
  return "?";
}

void Json::type_error(const char* expected) const {
  std::string value;  // scalars are short enough to show
  if (!is_null() && !is_object() && !is_array()) value = dump();
  LOOM_THROW(DataError, "[json] expected ", expected, " but got ", type_name(),
             value.empty() ? "" : " ", value);
}

bool Json::as_bool() const {
  if (type_ != Type::Bool) type_error("bool");
  return v_.b;
}

int64_t Json::as_int() const {
  if (type_ == Type::Int) return v_.i;
  // 2^63 is exactly representable; the valid doubles are [-2^63, 2^63).
  if (type_ == Type::Double && std::trunc(v_.d) == v_.d && v_.d >= -9223372036854775808.0 &&
      v_.d < 9223372036854775808.0) {
    return static_cast<int64_t>(v_.d);
  }
  type_error("an integer");
}

double Json::as_double() const {
  if (type_ == Type::Double) return v_.d;
  if (type_ == Type::Int) return static_cast<double>(v_.i);
  type_error("a number");
}

const std::string& Json::as_string() const {
  if (type_ != Type::String) type_error("a string");
  return *v_.s;
}

const Json::Array& Json::as_array() const {
  if (type_ != Type::Array) type_error("an array");
  return *v_.a;
}
Json::Array& Json::as_array() {
  if (type_ != Type::Array) type_error("an array");
  return *v_.a;
}
const Json::Object& Json::as_object() const {
  if (type_ != Type::Object) type_error("an object");
  return *v_.o;
}
Json::Object& Json::as_object() {
  if (type_ != Type::Object) type_error("an object");
  return *v_.o;
}

size_t Json::size() const {
  if (type_ == Type::Array) return v_.a->size();
  if (type_ == Type::Object) return v_.o->size();
  return 0;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::Object) return nullptr;
  for (const Member& m : *v_.o) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}
Json* Json::find(std::string_view key) {
  return const_cast<Json*>(static_cast<const Json*>(this)->find(key));
}

const Json& Json::at(std::string_view key) const {
  const Object& obj = as_object();
  if (const Json* j = find(key)) return *j;
  std::string keys;
  for (size_t i = 0; i < obj.size() && i < 8; ++i) keys += (i ? ", " : "") + obj[i].first;
  if (obj.size() > 8) keys += ", ...";
  LOOM_THROW(DataError, "[json] missing key \"", key, "\" (the object has ", obj.size(), " keys: {",
             keys, "})");
}
Json& Json::at(std::string_view key) {
  return const_cast<Json&>(static_cast<const Json*>(this)->at(key));
}

const Json& Json::at(size_t index) const {
  const Array& arr = as_array();
  LOOM_CHECK_AS(DataError, index < arr.size(), "[json] index ", index,
                " is out of range for an array of ", arr.size(), " elements");
  return arr[index];
}

Json& Json::set(std::string key, Json value) {
  if (is_null()) *this = Json(Object());
  if (Json* j = find(key)) {
    *j = std::move(value);
  } else {
    as_object().emplace_back(std::move(key), std::move(value));
  }
  return *this;
}

Json& Json::push_back(Json value) {
  if (is_null()) *this = Json(Array());
  as_array().push_back(std::move(value));
  return *this;
}

bool Json::operator==(const Json& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::Null:
      return true;
    case Type::Bool:
      return v_.b == o.v_.b;
    case Type::Int:
      return v_.i == o.v_.i;
    // NaN equals NaN here, so that a dump/parse round trip compares equal.
    case Type::Double:
      return v_.d == o.v_.d || (std::isnan(v_.d) && std::isnan(o.v_.d));
    case Type::String:
      return *v_.s == *o.v_.s;
    case Type::Array:
      return *v_.a == *o.v_.a;
    case Type::Object:
      return *v_.o == *o.v_.o;
  }
  return false;
}

namespace {

void dump_string(const std::string& s, std::string& out) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += hex[(c >> 4) & 0xf];
          out += hex[c & 0xf];
        } else {
          out += c;  // UTF-8 passes through unescaped
        }
    }
  }
  out += '"';
}

void dump_double(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
  } else if (std::isinf(d)) {
    out += d > 0 ? "Infinity" : "-Infinity";
  } else {
    // Shortest digits that read back exactly, in Python's repr style: positional for decimal
    // exponents in [-4, 16), else scientific ("1e+16", "1e-05").
    char buf[40];
    char* end = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific).ptr;
    const char* e = std::find(buf, end, 'e') + 1;
    if (*e == '+') ++e;
    int exponent = 0;
    std::from_chars(e, end, exponent);
    if (exponent >= -4 && exponent < 16) {
      end = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::fixed).ptr;
    }
    std::string_view text(buf, end - buf);
    out += text;
    // Keep it a double when read back: "1" would parse as an integer.
    if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
  }
}

void newline(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<size_t>(indent) * depth, ' ');
}

void dump_value(const Json& j, int indent, int depth, std::string& out) {
  switch (j.type()) {
    case Json::Type::Null:
      out += "null";
      break;
    case Json::Type::Bool:
      out += j.as_bool() ? "true" : "false";
      break;
    case Json::Type::Int: {
      char buf[24];
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), j.as_int());
      out.append(buf, end);
      break;
    }
    case Json::Type::Double:
      dump_double(j.as_double(), out);
      break;
    case Json::Type::String:
      dump_string(j.as_string(), out);
      break;
    case Json::Type::Array: {
      const Json::Array& arr = j.as_array();
      out += '[';
      for (size_t i = 0; i < arr.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        dump_value(arr[i], indent, depth + 1, out);
      }
      if (indent >= 0 && !arr.empty()) newline(out, indent, depth);
      out += ']';
      break;
    }
    case Json::Type::Object: {
      const Json::Object& obj = j.as_object();
      out += '{';
      for (size_t i = 0; i < obj.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        dump_string(obj[i].first, out);
        out += indent >= 0 ? ": " : ":";
        dump_value(obj[i].second, indent, depth + 1, out);
      }
      if (indent >= 0 && !obj.empty()) newline(out, indent, depth);
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string Json::dump(int indent) const {
  std::string out;
  dump_value(*this, indent, 0, out);
  return out;
}

}  // namespace loom
