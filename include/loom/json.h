// JSON values (base layer): a small document type for checkpoint sidecars (optimizer, scheduler,
// RNG and training-loop state), safetensors headers and memory snapshots. It sits in base, not io,
// because layers below io (memory's snapshots and traces) write JSON too.
//
// A Json owns its children by value; copies are deep. Objects keep insertion order. Integers that
// fit in int64 are kept exact; other numbers are doubles. NaN and +-Infinity are written and read
// as Python's json module does ("NaN", "Infinity"). Concurrent reads of one value are thread-safe;
// mutating it while others read is not. Bad input and failed lookups throw loom::DataError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/export.h"

namespace loom {

class LOOM_API Json {
 public:
  enum class Type : uint8_t { Null, Bool, Int, Double, String, Array, Object };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  Json() noexcept { v_.i = 0; }
  Json(std::nullptr_t) noexcept : Json() {}                // NOLINT
  Json(bool b) noexcept : type_(Type::Bool) { v_.b = b; }  // NOLINT
  // Any integer type; an unsigned value above INT64_MAX becomes a double.
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Json(T n) noexcept : type_(Type::Int) {  // NOLINT
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (n > static_cast<uint64_t>(INT64_MAX)) {
        type_ = Type::Double;
        v_.d = static_cast<double>(n);
        return;
      }
    }
    v_.i = static_cast<int64_t>(n);
  }
  Json(double d) noexcept : type_(Type::Double) { v_.d = d; }  // NOLINT
  Json(const char* s);                                         // NOLINT
  Json(std::string_view s);                                    // NOLINT
  Json(std::string s);                                         // NOLINT
  Json(Array a);                                               // NOLINT
  Json(Object o);                                              // NOLINT
  static Json array(std::initializer_list<Json> items = {});
  static Json object(std::initializer_list<Member> members = {});

  Json(const Json& o);
  Json(Json&& o) noexcept : type_(o.type_), v_(o.v_) { o.type_ = Type::Null; }
  Json& operator=(const Json& o);
  Json& operator=(Json&& o) noexcept;
  ~Json() { destroy(); }

  Type type() const { return type_; }
  const char* type_name()
      const;  // "null", "bool", "integer", "number", "string", "array", "object"
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_int() const { return type_ == Type::Int; }
  bool is_number() const { return type_ == Type::Int || type_ == Type::Double; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  // Typed access; a wrong type throws DataError naming both types. as_int accepts a double only
  // when it is a whole number in range; as_double accepts integers.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Number of array elements or object members (0 for anything else).
  size_t size() const;
  // Object member; DataError naming the key (and the keys present) when it is missing.
  const Json& at(std::string_view key) const;
  Json& at(std::string_view key);
  // Array element; DataError naming the index and size when out of range.
  const Json& at(size_t index) const;
  // Null when absent (or when this is not an object).
  const Json* find(std::string_view key) const;
  Json* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Replaces the member named key or appends it (this must be an object, or null: it becomes one).
  Json& set(std::string key, Json value);
  // Appends to an array (this must be an array, or null: it becomes one).
  Json& push_back(Json value);

  // Same type and value, recursively; object members compare in order.
  bool operator==(const Json& o) const;

  // Compact (indent < 0) or pretty-printed with `indent` spaces, as Python's json.dumps formats
  // them. Doubles print in the shortest form that reads back exactly.
  std::string dump(int indent = -1) const;
  // Parses one JSON document (surrounding whitespace allowed). `what` names the source (a file
  // path) in the DataError raised for bad input, together with the byte offset of the problem.
  // Duplicate object keys are rejected.
  static Json parse(std::string_view text, const std::string& what);

 private:
  void destroy() noexcept;
  [[noreturn]] void type_error(const char* expected) const;

  Type type_ = Type::Null;
  union {
    bool b;
    int64_t i;
    double d;
    std::string* s;  // owned, like a and o
    Array* a;
    Object* o;
  } v_;
};

}  // namespace loom
