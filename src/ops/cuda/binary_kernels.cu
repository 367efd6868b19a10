// CUDA loops of the binary family. Each functor mirrors the CPU's (cpu/binary_kernels.cpp,
// cpu/index_kernels.cpp for masked_fill): computed in M = opmath_t<T>, the result cast to T.
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/cuda/binary_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

template <class M>
__device__ __forceinline__ bool is_nan(M x) {
  if constexpr (std::is_floating_point_v<M>) {
    return x != x;
  } else {
    return false;
  }
}

// alpha * b rounded on its own, so that a + alpha * b is two roundings as on the CPU (nvcc would
// fuse it into one multiply-add).
template <class M>
__device__ __forceinline__ M mul_rn(M a, M b) {
  if constexpr (std::is_same_v<M, float>) {
    return __fmul_rn(a, b);
  } else if constexpr (std::is_same_v<M, double>) {
    return __dmul_rn(a, b);
  } else {
    return a * b;
  }
}

template <class T>
struct Arith {
  using M = opmath_t<T>;
  BinaryOp op;
  M alpha;
  __device__ __forceinline__ T operator()(T x, T y) const {
    const M a = convert<M>(x), b = convert<M>(y);
    if constexpr (std::is_same_v<T, bool>) {
      switch (op) {
        case BinaryOp::Add:
          return a || (b && alpha);
        case BinaryOp::Mul:
          return a && b;
        case BinaryOp::Maximum:
          return a > b ? a : b;
        case BinaryOp::Minimum:
          return a < b ? a : b;
        default:  // sub and div of bools are refused (div promotes) on the host
          return a;
      }
    } else {
      M r;
      switch (op) {
        case BinaryOp::Add:
          r = a + mul_rn(alpha, b);
          break;
        case BinaryOp::Sub:
          r = a - mul_rn(alpha, b);
          break;
        case BinaryOp::Mul:
          r = a * b;
          break;
        case BinaryOp::Div:
          if constexpr (std::is_floating_point_v<M>) {
            r = a / b;
          } else {
            r = a;  // div promotes integers to the default float dtype on the host
          }
          break;
        case BinaryOp::Maximum:
          r = (is_nan(a) || is_nan(b)) ? std::numeric_limits<M>::quiet_NaN() : (a > b ? a : b);
          break;
        case BinaryOp::Minimum:
          r = (is_nan(a) || is_nan(b)) ? std::numeric_limits<M>::quiet_NaN() : (a < b ? a : b);
          break;
        default:
          r = a;
          break;
      }
      return convert<T>(r);
    }
  }
};

template <class T>
struct Compare {
  using M = opmath_t<T>;
  CompareOp op;
  __device__ __forceinline__ bool operator()(T x, T y) const {
    const M a = convert<M>(x), b = convert<M>(y);
    switch (op) {
      case CompareOp::Eq:
        return a == b;
      case CompareOp::Ne:
        return a != b;
      case CompareOp::Lt:
        return a < b;
      case CompareOp::Le:
        return a <= b;
      case CompareOp::Gt:
        return a > b;
      case CompareOp::Ge:
        return a >= b;
      case CompareOp::LogicalAnd:
        return (a != M(0)) && (b != M(0));
      case CompareOp::LogicalOr:
        return (a != M(0)) || (b != M(0));
      case CompareOp::LogicalXor:
        return (a != M(0)) != (b != M(0));
    }
    return false;
  }
};

template <class T, class C>
struct Where {
  __device__ __forceinline__ T operator()(C c, T x, T y) const { return c ? x : y; }
};

template <class T>
struct MaskedFill {
  T value;
  __device__ __forceinline__ T operator()(T x, bool m) const { return m ? value : x; }
};

template <class M>
M from_bits(uint64_t bits) {
  M v;
  std::memcpy(&v, &bits, sizeof(M));
  return v;
}

struct PairTest {
  PairPredicate pred;
  double rtol, atol;
  bool equal_nan;
  template <class M>
  __device__ __forceinline__ bool operator()(M a, M b) const {
    if (pred == PairPredicate::Equal) return a == b;
    const double x = static_cast<double>(a), y = static_cast<double>(b);
    if (x == y) return true;
    if (x != x || y != y) return equal_nan && x != x && y != y;
    if (isinf(x) || isinf(y)) return false;
    return ::fabs(x - y) <= __dadd_rn(atol, __dmul_rn(rtol, ::fabs(y)));
  }
};

template <class T, class Index>
__global__ void __launch_bounds__(kThreads)
    all_pairs_kernel(int64_t n, OffsetCalc<2, Index> calc, Operands<2> ops, PairTest test,
                     int* flag) {
  using M = opmath_t<T>;
  int64_t idx = static_cast<int64_t>(blockIdx.x) * kBlockWork + threadIdx.x;
  bool ok = true;
#pragma unroll
  for (int k = 0; k < kThreadWork; ++k, idx += kThreads) {
    if (idx >= n) break;
    Index off[2];
    calc.get(static_cast<Index>(idx), off);
    ok = ok && test(convert<M>(ops.template load<T>(0, off[0])),
                    convert<M>(ops.template load<T>(1, off[1])));
  }
  if (!ok) *flag = 0;  // every writer stores the same value: no atomic needed
}

}  // namespace

cudaError_t launch_all_pairs(PairPredicate pred, const IterArgs& a, double rtol, double atol,
                             bool equal_nan, int* flag, cudaStream_t stream) {
  if (a.numel == 0) return cudaSuccess;
  const PairTest test{pred, rtol, atol, equal_nan};
  const Operands<2> ops(a);
  const dim3 grid(static_cast<unsigned>((a.numel + kBlockWork - 1) / kBlockWork));
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[0], [&] {
    if (a.can_use_32bit_indexing()) {
      all_pairs_kernel<scalar_t, uint32_t>
          <<<grid, kThreads, 0, stream>>>(a.numel, OffsetCalc<2, uint32_t>(a), ops, test, flag);
    } else {
      all_pairs_kernel<scalar_t, int64_t>
          <<<grid, kThreads, 0, stream>>>(a.numel, OffsetCalc<2, int64_t>(a), ops, test, flag);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_binary(BinaryOp op, const IterArgs& a, uint64_t alpha_bits,
                          cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[1], [&] {
    using M = opmath_t<scalar_t>;
    const Arith<scalar_t> f{op, from_bits<M>(alpha_bits)};
    return gpu_elementwise<scalar_t, scalar_t, scalar_t>(a, f, stream);
  });
}

cudaError_t launch_compare(CompareOp op, const IterArgs& a, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[1], [&] {
    return gpu_elementwise<bool, scalar_t, scalar_t>(a, Compare<scalar_t>{op}, stream);
  });
}

cudaError_t launch_where(const IterArgs& a, cudaStream_t stream) {
  const bool byte_cond = a.dtype[1] == ScalarCode::UInt8;
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[0], [&] {
    if (byte_cond) {
      return gpu_elementwise<scalar_t, uint8_t, scalar_t, scalar_t>(a, Where<scalar_t, uint8_t>{},
                                                                    stream);
    }
    return gpu_elementwise<scalar_t, bool, scalar_t, scalar_t>(a, Where<scalar_t, bool>{}, stream);
  });
}

cudaError_t launch_masked_fill(const IterArgs& a, uint64_t value_bits, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[0], [&] {
    const MaskedFill<scalar_t> f{from_bits<scalar_t>(value_bits)};
    return gpu_elementwise<scalar_t, scalar_t, bool>(a, f, stream);
  });
}

}  // namespace loom::cuda_ops
