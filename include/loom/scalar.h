// Scalar (core layer): a number given to an operator (alpha, fill value, clamp bound). It remembers
// whether it was a bool, an integer or a floating value, which decides type promotion the way a
// Python number does in PyTorch. Plain value; thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <type_traits>

#include "loom/dtype.h"
#include "loom/export.h"

namespace loom {

class LOOM_API Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int) {  // NOLINT: implicit, like a Python number
    v_.i = static_cast<int64_t>(v);
  }
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float) {  // NOLINT
    v_.d = static_cast<double>(v);
  }
  Scalar(bool v) : kind_(Kind::Bool) { v_.i = v ? 1 : 0; }                    // NOLINT
  Scalar(Half v) : Scalar(static_cast<double>(static_cast<float>(v))) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<double>(static_cast<float>(v))) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_floating() const { return kind_ == Kind::Float; }

  double to_double() const { return kind_ == Kind::Float ? v_.d : static_cast<double>(v_.i); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(v_.d) : v_.i; }
  bool to_bool() const { return kind_ == Kind::Float ? v_.d != 0.0 : v_.i != 0; }

  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return to_bool();
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(to_int());
    } else {
      return static_cast<T>(static_cast<float>(to_double()));
    }
  }

  // The dtype PyTorch gives a tensor made from this number: bool, int64 or the default float type.
  DType dtype() const;

  bool operator==(const Scalar& o) const;

 private:
  Kind kind_;
  union {
    double d;
    int64_t i;
  } v_;
};

template <>
inline double Scalar::to<double>() const {
  return to_double();
}
template <>
inline float Scalar::to<float>() const {
  return static_cast<float>(to_double());
}

LOOM_API std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace loom
