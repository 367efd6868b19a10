#include "loom/dtype.h"

#include <atomic>
#include <cstring>
#include <ostream>
#include <string>

#include "loom/error.h"

namespace loom {

uint16_t Half::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): add the magic number so the FPU rounds to nearest even for us.
    float fa;
    std::memcpy(&fa, &abs, 4);
    fa += 0.5f;
    uint32_t r;
    std::memcpy(&r, &fa, 4);
    return static_cast<uint16_t>(sign | (r - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float Half::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
      std::memcpy(&out, &f, 4);
      out |= sign;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

size_t element_size(DType t) {
  static constexpr size_t sizes[kNumDTypes] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  return sizes[static_cast<int>(t)];
}

const char* dtype_name(DType t) {
  static constexpr const char* names[kNumDTypes] = {"bool",    "uint8",  "int8",    "int16",
                                                    "int32",   "int64",  "float16", "bfloat16",
                                                    "float32", "float64"};
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumDTypes) ? names[i] : "?";
}

DType parse_dtype(const char* name) {
  struct Alias {
    const char* name;
    DType t;
  };
  static constexpr Alias aliases[] = {
      {"bool", kBool},     {"uint8", kUInt8},       {"u8", kUInt8},        {"int8", kInt8},
      {"i8", kInt8},       {"int16", kInt16},       {"short", kInt16},     {"i16", kInt16},
      {"int32", kInt32},   {"int", kInt32},         {"i32", kInt32},       {"int64", kInt64},
      {"long", kInt64},    {"i64", kInt64},         {"float16", kFloat16}, {"half", kFloat16},
      {"f16", kFloat16},   {"bfloat16", kBFloat16}, {"bf16", kBFloat16},   {"float32", kFloat32},
      {"float", kFloat32}, {"f32", kFloat32},       {"float64", kFloat64}, {"double", kFloat64},
      {"f64", kFloat64},
  };
  for (const auto& a : aliases) {
    if (std::strcmp(a.name, name) == 0) return a.t;
  }
  LOOM_THROW(ValueError, "[dtype] unknown dtype '", name, "'");
}

std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

DType promote_types(DType a, DType b) {
  // Rows and columns in DType order: b1 u1 i1 i2 i4 i8 f2 bf f4 f8 (PyTorch's table, less complex).
  constexpr DType b1 = kBool, u1 = kUInt8, i1 = kInt8, i2 = kInt16, i4 = kInt32, i8 = kInt64,
                  f2 = kFloat16, bf = kBFloat16, f4 = kFloat32, f8 = kFloat64;
  static constexpr DType table[kNumDTypes][kNumDTypes] = {
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  static_assert(sizeof(table) / sizeof(table[0]) == kNumDTypes, "promotion table size");
  return table[static_cast<int>(a)][static_cast<int>(b)];
}

namespace {
std::atomic<DType> g_default_dtype{kFloat32};
}

DType default_dtype() {
  return g_default_dtype.load(std::memory_order_relaxed);
}

void set_default_dtype(DType t) {
  LOOM_CHECK_TYPE(t == kFloat32 || t == kFloat64 || t == kFloat16 || t == kBFloat16,
                  "[set_default_dtype] only floating types can be the default but got ",
                  dtype_name(t));
  g_default_dtype.store(t, std::memory_order_relaxed);
}

}  // namespace loom
