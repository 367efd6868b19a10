// Device math shared by the pointwise CUDA families (ops layer, CUDA backend; .cu files only).
//
// Each function takes the compute type M (float or double: 16-bit floats are computed in float, as
// the CPU kernels do) and mirrors the formula of its CPU functor (cpu/unary_kernels.cpp,
// cpu/activation_backward_kernels.cpp); the transcendental parts are CUDA's libdevice functions,
// so float results may differ from the CPU's vectorised versions (unary_math.h) in the last ulps.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace loom::cuda_ops::dmath {

// dmath::exp(x) and friends: the float or double function of libdevice for M.
#define LOOM_DMATH_UNARY(name)                      \
  template <class M>                                \
  __device__ __forceinline__ M name(M x) {          \
    if constexpr (std::is_same_v<M, float>) {       \
      return ::name##f(x);                          \
    } else {                                        \
      return ::name(x);                             \
    }                                               \
  }
LOOM_DMATH_UNARY(exp)
LOOM_DMATH_UNARY(log)
LOOM_DMATH_UNARY(log1p)
LOOM_DMATH_UNARY(sqrt)
LOOM_DMATH_UNARY(sin)
LOOM_DMATH_UNARY(cos)
LOOM_DMATH_UNARY(tanh)
LOOM_DMATH_UNARY(erf)
LOOM_DMATH_UNARY(fabs)
#undef LOOM_DMATH_UNARY

template <class M>
__device__ __forceinline__ M pow(M x, M y) {
  if constexpr (std::is_same_v<M, float>) {
    return ::powf(x, y);
  } else {
    return ::pow(x, y);
  }
}

// 1 / (1 + exp(-x)). float: from e = exp(-|x|) <= 1 so neither tail loses accuracy (the CPU's
// sigmoid_f32 does the same); double: the plain formula, as the CPU's double functor.
template <class M>
__device__ __forceinline__ M sigmoid(M x) {
  if constexpr (std::is_same_v<M, float>) {
    const float e = ::expf(-::fabsf(x));
    const float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
  } else {
    return 1.0 / (1.0 + ::exp(-x));
  }
}

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluBeta = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

}  // namespace loom::cuda_ops::dmath
