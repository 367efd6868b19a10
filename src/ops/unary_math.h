// Vectorisable float32 math for the unary kernels (internal to the ops layer).
//
// Each function is branch-free straight-line code on one float: selects compile to blends and bit
// casts to register moves, so a plain `for (i) y[i] = exp_f32(x[i])` loop auto-vectorises (-O3, to
// AVX-512 on this machine) the way SLEEF's hand-written vector code does. std::exp and friends are
// library calls that never vectorise, which made them ~10x slower than libtorch on large tensors.
// Worst errors against double over a sweep of every 7th float (tests/ops/unary_test.cpp checks
// a similar sweep): exp 0.9 ulp, log 0.8, log1p 2.5, tanh 1.4, sigmoid 2.8, erf 1.0, subnormal
// results included; ±inf and NaN give what std:: gives.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "loom/export.h"

// GCC keeps auto-vectorised loops to 256-bit vectors on Intel by default (to avoid AVX-512
// down-clocking on old Xeons); on this machine (Sapphire Rapids) 512-bit vectors run the exp loop
// 1.6x faster. Loops over the functions below are marked with this; it is only a preference, so
// targets without AVX-512 are unaffected.
#if defined(__GNUC__) && !defined(__clang__)
#define LOOM_WIDE_VECTOR_LOOP __attribute__((target("prefer-vector-width=512")))
#else
#define LOOM_WIDE_VECTOR_LOOP
#endif

namespace loom::fastmath {

// a * b + c, fused when the target has FMA. GCC does not contract a*b+c itself in ISO C++ mode
// (-std=c++20 implies -ffp-contract=off), and std::fma without hardware FMA is a slow library call.
LOOM_ALWAYS_INLINE float fmadd(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// 2^n for n in [-126, 127], built from the exponent bits.
LOOM_ALWAYS_INLINE float pow2i(int32_t n) {
  return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
}

// Note [Fast float exp]: n = round(x * log2(e)) by the 1.5 * 2^23 trick (no float->int conversion,
// which is undefined for NaN in C++), r = x - n * ln2 in two steps (Cody-Waite: ln2_hi has few bits
// so n * ln2_hi is exact), exp(r) on [-ln2/2, ln2/2] by Cephes' degree-7 polynomial in Horner form,
// then scaled by 2^n as 2^(n/2) * 2^(n - n/2): both factors are normal floats for every n in
// [-252, 254], so results near overflow (x up to 88.72) and subnormal results (x down to -103.97)
// are rounded once and correctly, and |x| up to ~174 overflows to inf or underflows to 0 by itself.
// Beyond that the shift trick breaks, so |x| > 160 (and ±inf) is selected at the end; NaN flows
// through the arithmetic. No clamp up front: compare-and-select pairs are costly in vector code
// because GCC cannot turn them into min/max under -ftrapping-math.
LOOM_ALWAYS_INLINE float exp_f32(float x) {
  const float shift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const float t = fmadd(x, 1.44269504088896341f, shift);
  const float n = t - shift;
  const int32_t ni =
      static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(shift));
  float r = fmadd(n, -0.693359375f, x);
  r = fmadd(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmadd(p, r, 1.3981999507e-3f);
  p = fmadd(p, r, 8.3334519073e-3f);
  p = fmadd(p, r, 4.1665795894e-2f);
  p = fmadd(p, r, 1.6666665459e-1f);
  p = fmadd(p, r, 5.0000001201e-1f);
  p = fmadd(p, r, 1.0f);
  p = fmadd(p, r, 1.0f);
  const int32_t n1 = ni >> 1;
  float y = p * pow2i(n1) * pow2i(ni - n1);
  y = x > 160.0f ? std::numeric_limits<float>::infinity() : y;
  y = x < -160.0f ? 0.0f : y;
  return y;
}

// Natural log: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' logf polynomial in
// m - 1, and e * ln2 added in two parts. Subnormal inputs are scaled by 2^23 first. Special cases
// (0 -> -inf, negative -> NaN, inf -> inf, NaN -> NaN) are selected at the end.
LOOM_ALWAYS_INLINE float log_f32(float x) {
  const bool tiny = x < 1.17549435e-38f;
  const float xs = tiny ? x * 8388608.0f : x;
  const uint32_t bits = std::bit_cast<uint32_t>(xs);
  // Exponent and mantissa with the mantissa in [sqrt(1/2), sqrt(2)): add (1 - sqrt(1/2)) worth of
  // mantissa bits so the exponent field rounds up exactly when m >= sqrt(2).
  const uint32_t adj = bits + (0x3f800000u - 0x3f3504f3u);
  const int32_t e = static_cast<int32_t>(adj >> 23) - 127 - (tiny ? 23 : 0);
  const float m = std::bit_cast<float>((adj & 0x007fffffu) + 0x3f3504f3u);
  const float f = m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = fmadd(p, f, -1.1514610310e-1f);
  p = fmadd(p, f, 1.1676998740e-1f);
  p = fmadd(p, f, -1.2420140846e-1f);
  p = fmadd(p, f, 1.4249322787e-1f);
  p = fmadd(p, f, -1.6668057665e-1f);
  p = fmadd(p, f, 2.0000714765e-1f);
  p = fmadd(p, f, -2.4999993993e-1f);
  p = fmadd(p, f, 3.3333331174e-1f);
  const float fe = static_cast<float>(e);
  float y = p * f * z;
  y = fmadd(fe, -2.12194440e-4f, y);
  y = fmadd(z, -0.5f, y);
  float r = f + y;
  r = fmadd(fe, 0.693359375f, r);
  const float inf = std::numeric_limits<float>::infinity();
  r = x == inf ? inf : r;
  r = x == 0.0f ? -inf : r;
  r = x < 0.0f || x != x ? std::numeric_limits<float>::quiet_NaN() : r;
  return r;
}

// log1p(x) = log(u) * x / (u - 1) with u = 1 + x rounded: the rounding error of u cancels between
// log(u) and u - 1 (Goldberg's trick). When u rounds to 1, log1p(x) is x to float precision.
LOOM_ALWAYS_INLINE float log1p_f32(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  float r = log_f32(u) * (x / d);
  r = d == 0.0f ? x : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;  // inf / inf above
  return r;
}

// tanh: Cephes' odd polynomial for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1) with x's sign (no
// cancellation there since the result is >= 0.55). exp overflows to inf for large |x|, giving 1.
LOOM_ALWAYS_INLINE float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = fmadd(p, z, 2.06390887954e-2f);
  p = fmadd(p, z, -5.37397155531e-2f);
  p = fmadd(p, z, 1.33314422036e-1f);
  p = fmadd(p, z, -3.33332819422e-1f);
  const float small = fmadd(p * z, x, x);
  const float big = std::copysign(1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f), x);
  return ax < 0.625f || x != x ? small : big;
}

// 1 / (1 + exp(-x)), computed from e = exp(-|x|) <= 1 so neither tail loses accuracy: for x < 0
// the result is e / (1 + e), which stays accurate down to subnormal results.
LOOM_ALWAYS_INLINE float sigmoid_f32(float x) {
  const float e = exp_f32(-std::fabs(x));
  const float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}

// erf after N. Juffa's erff: an odd polynomial in x for |x| < 0.921875, else 1 - exp(-q(|x|)) with
// q a polynomial, sign restored. Both halves are computed and one is selected.
LOOM_ALWAYS_INLINE float erf_f32(float a) {
  const float t = std::fabs(a);
  const float s = a * a;
  float r = fmadd(1.72948930e-5f, t, -3.83208680e-4f);
  const float u = fmadd(3.88393435e-3f, t, -2.42545605e-2f);
  r = fmadd(r, s, u);
  r = fmadd(r, t, 1.06777847e-1f);
  r = fmadd(r, t, 6.34846687e-1f);
  r = fmadd(r, t, 1.28717512e-1f);
  r = fmadd(r, t, t);
  const float big = std::copysign(1.0f - exp_f32(-r), a);
  float q = -5.99104969e-4f;
  q = fmadd(q, s, 4.99339588e-3f);
  q = fmadd(q, s, -2.67667342e-2f);
  q = fmadd(q, s, 1.12818025e-1f);
  q = fmadd(q, s, -3.76124859e-1f);
  q = fmadd(q, s, 1.28379151e-1f);
  const float small = fmadd(q, a, a);
  return t >= 0.921875f ? big : small;
}

}  // namespace loom::fastmath
