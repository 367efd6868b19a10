// CUDA loops of the unary family: the math ops, neg/abs/relu/sign, logical_not, pow and clamp.
// Each functor mirrors its CPU functor (cpu/unary_kernels.cpp) case by case; the ops are runtime
// codes of one functor per dtype class (Note [Op codes instead of instantiations],
// unary_kernels.h).
#include <type_traits>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/unary_kernels.h"

namespace loom::cuda_ops {
namespace {

// Integer negation that wraps (-INT_MIN == INT_MIN) instead of overflowing, as the CPU's.
template <class T>
__device__ __forceinline__ T wrapping_neg(T x) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
}

// The ops of a floating dtype T, computed in M (float for 16-bit floats).
template <class T>
struct FloatUnary {
  UnaryOp op;
  __device__ __forceinline__ T operator()(T in) const {
    using M = opmath_t<T>;
    const M x = convert<M>(in);
    M y;
    switch (op) {
      case UnaryOp::Neg:
        y = -x;
        break;
      case UnaryOp::Abs:
        y = dmath::fabs(x);
        break;
      case UnaryOp::Relu:  // keeps NaN and -0.0
        y = x < M(0) ? M(0) : x;
        break;
      case UnaryOp::Sign:  // sign(NaN) is 0
        y = static_cast<M>((M(0) < x) - (x < M(0)));
        break;
      case UnaryOp::Exp:
        y = dmath::exp(x);
        break;
      case UnaryOp::Log:
        y = dmath::log(x);
        break;
      case UnaryOp::Log1p:
        y = dmath::log1p(x);
        break;
      case UnaryOp::Sqrt:
        y = dmath::sqrt(x);
        break;
      case UnaryOp::Rsqrt:  // 1 / sqrt, correctly rounded steps as the CPU (not rsqrtf's 2 ulp)
        y = M(1) / dmath::sqrt(x);
        break;
      case UnaryOp::Sin:
        y = dmath::sin(x);
        break;
      case UnaryOp::Cos:
        y = dmath::cos(x);
        break;
      case UnaryOp::Tanh:
        y = dmath::tanh(x);
        break;
      case UnaryOp::Sigmoid:
        y = dmath::sigmoid(x);
        break;
      case UnaryOp::Erf:
        y = dmath::erf(x);
        break;
      case UnaryOp::Reciprocal:
        y = M(1) / x;
        break;
      case UnaryOp::Silu:
        if constexpr (std::is_same_v<M, float>) {
          y = x * dmath::sigmoid(x);
        } else {
          y = x / (M(1) + dmath::exp(-x));
        }
        break;
      case UnaryOp::GeluErf:
        y = M(0.5) * x * (M(1) + dmath::erf(x * M(dmath::kSqrtHalf)));
        break;
      case UnaryOp::GeluTanh: {
        const M inner = M(dmath::kGeluBeta) * (x + M(dmath::kGeluKappa) * x * x * x);
        y = M(0.5) * x * (M(1) + dmath::tanh(inner));
        break;
      }
      default:
        y = x;
        break;
    }
    return convert<T>(y);
  }
};

// neg, abs, relu and sign of an integer or bool dtype (the host let only sign through for bool).
template <class T>
struct IntUnary {
  UnaryOp op;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>) {
      switch (op) {
        case UnaryOp::Neg:
          if constexpr (std::is_same_v<T, bool>) {
            return x;
          } else {
            return wrapping_neg(x);
          }
        case UnaryOp::Sign:
          return static_cast<T>(x != T(0));
        default:  // abs and relu of an unsigned value
          return x;
      }
    } else {
      switch (op) {
        case UnaryOp::Neg:
          return wrapping_neg(x);
        case UnaryOp::Abs:  // abs(INT_MIN) stays INT_MIN
          return x < 0 ? wrapping_neg(x) : x;
        case UnaryOp::Relu:
          return x < T(0) ? T(0) : x;
        case UnaryOp::Sign:
          return static_cast<T>((T(0) < x) - (x < T(0)));
        default:
          return x;
      }
    }
  }
};

template <class T>
struct LogicalNot {
  __device__ __forceinline__ bool operator()(T x) const {
    if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
      return static_cast<float>(x) == 0.0f;
    } else {
      return x == T(0);
    }
  }
};

// base^e for integers with wrap-around on overflow; e < 0 gives 0 unless |base| == 1.
template <class T>
__device__ __forceinline__ T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>) {
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    }
    return T(0);
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  while (e != 0) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class T>
struct PowScalar {
  PowKind kind;
  double e;
  int64_t ie;
  __device__ __forceinline__ T operator()(T in) const {
    if constexpr (std::is_integral_v<T>) {
      return int_pow(in, ie);
    } else {
      using M = opmath_t<T>;
      const M x = convert<M>(in);
      M y;
      switch (kind) {
        case PowKind::Zero:
          y = M(1);
          break;
        case PowKind::One:
          y = x;
          break;
        case PowKind::Two:
          y = x * x;
          break;
        case PowKind::Three:
          y = x * x * x;
          break;
        case PowKind::Half:
          y = dmath::sqrt(x);
          break;
        case PowKind::MinusHalf:
          y = M(1) / dmath::sqrt(x);
          break;
        case PowKind::MinusOne:
          y = M(1) / x;
          break;
        case PowKind::MinusTwo:
          y = M(1) / (x * x);
          break;
        default:
          y = dmath::pow(x, static_cast<M>(e));
          break;
      }
      return convert<T>(y);
    }
  }
};

template <class T>
struct PowTensor {
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return int_pow(a, static_cast<int64_t>(b));
    } else {
      using M = opmath_t<T>;
      return convert<T>(dmath::pow(convert<M>(a), convert<M>(b)));
    }
  }
};

template <class T>
struct Clamp {
  using M = opmath_t<T>;
  M lo, hi;
  __device__ __forceinline__ T operator()(T in) const {
    const M x = convert<M>(in);
    M y = x < lo ? lo : x;
    y = y > hi ? hi : y;
    if constexpr (!std::is_integral_v<M>) y = x != x ? x : y;
    return convert<T>(y);
  }
};

}  // namespace

cudaError_t launch_unary(UnaryOp op, const IterArgs& a, cudaStream_t stream) {
  const ScalarCode code = a.dtype[1];
  if (op == UnaryOp::LogicalNot) {
    return LOOM_CUDA_DISPATCH_ALL(
        code, [&] { return gpu_elementwise<bool, scalar_t>(a, LogicalNot<scalar_t>{}, stream); });
  }
  return LOOM_CUDA_DISPATCH_ALL(code, [&] {
    if constexpr (std::is_integral_v<scalar_t>) {
      return gpu_elementwise<scalar_t, scalar_t>(a, IntUnary<scalar_t>{op}, stream);
    } else {
      return gpu_elementwise<scalar_t, scalar_t>(a, FloatUnary<scalar_t>{op}, stream);
    }
  });
}

cudaError_t launch_pow_scalar(const IterArgs& a, PowKind kind, double e, int64_t ie,
                              cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[1], [&] {
    if constexpr (std::is_same_v<scalar_t, bool>) {
      return cudaErrorInvalidValue;  // refused on the host
    } else {
      return gpu_elementwise<scalar_t, scalar_t>(a, PowScalar<scalar_t>{kind, e, ie}, stream);
    }
  });
}

cudaError_t launch_pow_tensor(const IterArgs& a, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[1], [&] {
    if constexpr (std::is_same_v<scalar_t, bool>) {
      return cudaErrorInvalidValue;  // refused on the host
    } else {
      return gpu_elementwise<scalar_t, scalar_t, scalar_t>(a, PowTensor<scalar_t>{}, stream);
    }
  });
}

cudaError_t launch_clamp(const IterArgs& a, double flo, double fhi, int64_t ilo, int64_t ihi,
                         cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[1], [&] {
    if constexpr (std::is_same_v<scalar_t, bool>) {
      return cudaErrorInvalidValue;  // refused on the host
    } else {
      using M = opmath_t<scalar_t>;
      Clamp<scalar_t> op;
      if constexpr (std::is_integral_v<M>) {
        op.lo = static_cast<M>(ilo);
        op.hi = static_cast<M>(ihi);
      } else {
        op.lo = static_cast<M>(flo);
        op.hi = static_cast<M>(fhi);
      }
      return gpu_elementwise<scalar_t, scalar_t>(a, op, stream);
    }
  });
}

}  // namespace loom::cuda_ops
