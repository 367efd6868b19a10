// Element types (core layer): DType, the 16-bit float types, sizes, names and PyTorch's type
// promotion rules. Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

#include "loom/export.h"

namespace loom {

// IEEE 754 half precision, stored as bits; arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float type
  operator float() const { return to_float(bits); }
  static LOOM_API uint16_t from_float(float f);
  static LOOM_API float to_float(uint16_t h);
};

// bfloat16: the top 16 bits of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Order matters: it is the column order of the promotion table and of dtype switches.
enum class DType : int8_t {
  Bool = 0,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
constexpr int kNumDTypes = 10;

constexpr DType kBool = DType::Bool;
constexpr DType kUInt8 = DType::UInt8;
constexpr DType kInt8 = DType::Int8;
constexpr DType kInt16 = DType::Int16;
constexpr DType kInt32 = DType::Int32;
constexpr DType kInt64 = DType::Int64;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;

LOOM_API size_t element_size(DType t);
// "float32", "int64", ... as PyTorch prints them without the "torch." prefix.
LOOM_API const char* dtype_name(DType t);
// Parses "float32", "f32", "float", "int64", "long", ...; throws ValueError otherwise.
LOOM_API DType parse_dtype(const char* name);
LOOM_API std::ostream& operator<<(std::ostream& os, DType t);

constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
constexpr bool is_integral(DType t, bool include_bool) {
  return (t >= DType::UInt8 && t <= DType::Int64) || (include_bool && t == DType::Bool);
}
constexpr bool is_reduced_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

// PyTorch's torch.promote_types: the smallest type both values fit in (u8+i8 -> i16, f16+bf16 ->
// f32, integers+floats -> the float type, bool+x -> x).
LOOM_API DType promote_types(DType a, DType b);

// The default floating type (float32 unless changed); used for factories and int/float promotion.
LOOM_API DType default_dtype();
LOOM_API void set_default_dtype(DType t);

// Maps a C++ element type to its DType.
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::Float64;
};

}  // namespace loom

// Runs the body with `scalar_t` bound to the C++ type of `dtype`. For kernels in .cpp files only.
#define LOOM_DTYPE_CASE(DT, T, ...) \
  case ::loom::DType::DT: {         \
    using scalar_t = T;             \
    __VA_ARGS__();                  \
    break;                          \
  }

#define LOOM_DISPATCH_ALL_TYPES(dtype, opname, ...)            \
  [&] {                                                        \
    switch (dtype) {                                           \
      LOOM_DTYPE_CASE(Bool, bool, __VA_ARGS__)                 \
      LOOM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)             \
      LOOM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)               \
      LOOM_DTYPE_CASE(Int16, int16_t, __VA_ARGS__)             \
      LOOM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)             \
      LOOM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)             \
      LOOM_DTYPE_CASE(Float16, ::loom::Half, __VA_ARGS__)      \
      LOOM_DTYPE_CASE(BFloat16, ::loom::BFloat16, __VA_ARGS__) \
      LOOM_DTYPE_CASE(Float32, float, __VA_ARGS__)             \
      LOOM_DTYPE_CASE(Float64, double, __VA_ARGS__)            \
    }                                                          \
  }()

#define LOOM_DISPATCH_FLOAT_TYPES(dtype, opname, ...)                                      \
  [&] {                                                                                    \
    switch (dtype) {                                                                       \
      LOOM_DTYPE_CASE(Float16, ::loom::Half, __VA_ARGS__)                                  \
      LOOM_DTYPE_CASE(BFloat16, ::loom::BFloat16, __VA_ARGS__)                             \
      LOOM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                         \
      LOOM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                        \
      default:                                                                             \
        LOOM_THROW(::loom::TypeError, "[", opname, "] expected a floating dtype but got ", \
                   ::loom::dtype_name(dtype));                                             \
    }                                                                                      \
  }()
