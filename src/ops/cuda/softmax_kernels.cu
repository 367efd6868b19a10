// CUDA kernels of softmax, log_softmax and their backwards along one dim of a contiguous
// [outer, d, inner] tensor.
//
// Note [Device softmax]
//   Rows (inner == 1): threadIdx.x of a block row walks one row of d elements keeping an online
//   (max, sum of exp(x - max)) pair, rescaling the sum when the max grows; the pairs are combined
//   across the row's threads (warp shuffles, then shared memory), and a second pass writes
//   exp(x - max) / sum (softmax) or (x - max) - log(sum) (log_softmax). Rows of more than 1024
//   elements take 128 or 512 threads.
//   Rows of up to 1024 elements take the persistent path instead: one warp a row, 4 rows a block,
//   the row held in registers (lane l keeps elements l, l + 32, ...), so that it is read once and
//   written once (the two-pass loop above reads it twice, and a 4 KB row does not stay in cache
//   across a block of rows). Max and sum meet by butterfly shuffles (warp_allreduce), in a fixed
//   order; the special values come out as above (a NaN or +inf element makes the sum NaN, a row of
//   -inf gives exp(-inf + inf) = NaN). The backward keeps g and y in registers the same way.
//   Columns (inner > 1): each block owns 32 adjacent columns, its 16 thread rows share the d
//   elements of each column, and the pairs meet in shared memory in a fixed order. Here a thread
//   walks d / 16 elements in sequence (3141 for a 50257-long dim), so float inputs keep their
//   (max, sum) pairs in double: in float the sequential sum and its rescalings drift by ~1e-4
//   relative, against the CPU's double accumulation.
//   The CPU's special values are kept: a NaN, or a +inf, anywhere in a row makes the row NaN, and a
//   row whose max is -inf gives NaN. 16-bit floats compute in float.
#include <limits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/softmax_kernels.h"

namespace loom::cuda_ops {
namespace {

template <class V>
struct MaxSum {
  V m, s;
};

template <class V>
__device__ __forceinline__ V inf_v() {
  return std::numeric_limits<V>::infinity();
}

template <class V>
__device__ __forceinline__ MaxSum<V> online_step(MaxSum<V> a, V x) {
  if (x == -inf_v<V>()) return a;  // exp(-inf - max) adds nothing
  if (x > a.m) return {x, a.s * exp(a.m - x) + V(1)};
  a.s += exp(x - a.m);  // NaN x makes the sum NaN
  return a;
}

template <class V>
__device__ __forceinline__ MaxSum<V> online_combine(MaxSum<V> a, MaxSum<V> b) {
  if (b.m == -inf_v<V>()) return a;
  if (a.m == -inf_v<V>()) return b;
  if (a.m >= b.m) return {a.m, a.s + b.s * exp(b.m - a.m)};
  return {b.m, b.s + a.s * exp(a.m - b.m)};
}

// The per-row constants of the output pass: y = exp(x - m) * inv_s, or (x - m) - log_s.
template <class V>
__device__ __forceinline__ MaxSum<V> finish_stats(MaxSum<V> a, bool log) {
  // +inf anywhere: exp(inf - inf) is NaN on the CPU, so the whole row is NaN.
  if (a.m == inf_v<V>()) a.s = std::numeric_limits<V>::quiet_NaN();
  return {a.m, log ? V(::log(a.s)) : V(1) / a.s};
}

template <class T, class V>
__device__ __forceinline__ T softmax_value(V x, const MaxSum<V>& st, bool log) {
  return convert<T>(log ? (x - st.m) - st.s : exp(x - st.m) * st.s);
}

template <class T>
__global__ void __launch_bounds__(512)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t d, bool log) {
  using V = opmath_t<T>;
  LOOM_SHARED_ARRAY(MaxSum<V>, smem, 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const T* xr = x + (row < rows ? row : 0) * d;
  MaxSum<V> st{-inf_v<V>(), V(0)};
  if (row < rows) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      st = online_step(st, convert<V>(xr[j]));
    }
  }
  const auto combine = [](const MaxSum<V>& a, const MaxSum<V>& b) { return online_combine(a, b); };
  st = block_reduce_x(st, combine, MaxSum<V>{-inf_v<V>(), V(0)}, smem);
  // Thread 0 of each row holds the row's pair: hand it to the others.
  if (threadIdx.x == 0) smem[threadIdx.y] = finish_stats(st, log);
  __syncthreads();
  if (row >= rows) return;
  const MaxSum<V> fin = smem[threadIdx.y];
  T* yr = y + row * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    yr[j] = softmax_value<T>(convert<V>(xr[j]), fin, log);
  }
}

constexpr int kWarpRows = 4;  // warps (rows) per block

// The row's elements held by this lane: v[k] = row[lane + 32 k], `pad` past the end of the row.
template <int kPer, class T, class V>
__device__ __forceinline__ void load_row(const T* row, int d, int lane, V pad, V (&v)[kPer]) {
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    v[k] = j < d ? convert<V>(row[j]) : pad;
  }
}

template <class T, int kPer>
__global__ void __launch_bounds__(32 * kWarpRows)
    softmax_warp_kernel(const T* x, T* y, int64_t rows, int d, bool log) {
  using V = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.y;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x);
  V v[kPer];
  load_row<kPer>(x + row * d, d, lane, -inf_v<V>(), v);
  V m = v[0];
#pragma unroll
  for (int k = 1; k < kPer; ++k) m = fmax(m, v[k]);  // NaNs reach the sum instead
  m = warp_allreduce(m, [](V a, V b) { return fmax(a, b); });
  V s = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (lane + 32 * k < d) s += exp(v[k] - m);
  }
  s = warp_allreduce(s, [](V a, V b) { return a + b; });
  const MaxSum<V> fin{m, log ? V(::log(s)) : V(1) / s};
  T* yr = y + row * d;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    if (j < d) yr[j] = softmax_value<T>(v[k], fin, log);
  }
}

template <class T, int kPer>
__global__ void __launch_bounds__(32 * kWarpRows)
    softmax_backward_warp_kernel(const T* g, const T* y, T* out, int64_t rows, int d, bool log) {
  using V = opmath_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.y;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x);
  V gv[kPer], yv[kPer];
  load_row<kPer>(g + row * d, d, lane, V(0), gv);
  load_row<kPer>(y + row * d, d, lane, V(0), yv);
  V s = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) s += log ? gv[k] : gv[k] * yv[k];  // padding adds 0
  s = warp_allreduce(s, [](V a, V b) { return a + b; });
  T* o = out + row * d;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    if (j < d) o[j] = convert<T>(log ? gv[k] - exp(yv[k]) * s : yv[k] * (gv[k] - s));
  }
}

template <class T>
struct ForwardWarp {
  template <int kPer>
  struct L {
    static cudaError_t run(dim3 grid, dim3 block, cudaStream_t stream, const T* x, T* y,
                           int64_t rows, int d, bool log) {
      softmax_warp_kernel<T, kPer><<<grid, block, 0, stream>>>(x, y, rows, d, log);
      return cudaGetLastError();
    }
  };
};

template <class T>
struct BackwardWarp {
  template <int kPer>
  struct L {
    static cudaError_t run(dim3 grid, dim3 block, cudaStream_t stream, const T* g, const T* y,
                           T* out, int64_t rows, int d, bool log) {
      softmax_backward_warp_kernel<T, kPer><<<grid, block, 0, stream>>>(g, y, out, rows, d, log);
      return cudaGetLastError();
    }
  };
};

constexpr int kColRows = 16;  // thread rows per column block

// Accumulation type of the column kernels (Note [Device softmax]).
template <class T>
using ColAcc = std::conditional_t<std::is_same_v<T, float>, double, opmath_t<T>>;

template <class T>
__global__ void __launch_bounds__(32 * kColRows)
    softmax_cols_kernel(const T* x, T* y, int64_t outer, int64_t d, int64_t inner, bool log) {
  using V = ColAcc<T>;
  LOOM_SHARED_ARRAY(MaxSum<V>, smem, 32 * kColRows);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = col < outer * inner;
  const int64_t base = valid ? (col / inner) * d * inner + col % inner : 0;
  MaxSum<V> st{-inf_v<V>(), V(0)};
  if (valid) {
    for (int64_t k = threadIdx.y; k < d; k += kColRows) {
      st = online_step(st, convert<V>(x[base + k * inner]));
    }
  }
  const int slot = threadIdx.y * 32 + threadIdx.x;
  smem[slot] = st;
  __syncthreads();
#pragma unroll
  for (int s = kColRows / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.y) < s)
      smem[slot] = online_combine(smem[slot], smem[slot + s * 32]);
    __syncthreads();
  }
  if (!valid) return;
  const MaxSum<V> fin = finish_stats(smem[threadIdx.x], log);
  for (int64_t k = threadIdx.y; k < d; k += kColRows) {
    y[base + k * inner] = softmax_value<T>(convert<V>(x[base + k * inner]), fin, log);
  }
}

// ---- backward: s = sum(g * y) (softmax) or sum(g) (log_softmax) along the dim ----

template <class V>
__device__ __forceinline__ V backward_term(V g, V y, bool log) {
  return log ? g : g * y;
}
template <class T, class V>
__device__ __forceinline__ T backward_value(V g, V y, V s, bool log) {
  return convert<T>(log ? g - exp(y) * s : y * (g - s));
}

template <class T>
__global__ void __launch_bounds__(512)
    softmax_backward_rows_kernel(const T* g, const T* y, T* out, int64_t rows, int64_t d,
                                 bool log) {
  using V = opmath_t<T>;
  LOOM_SHARED_ARRAY(V, smem, 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t off = (row < rows ? row : 0) * d;
  V s = 0;
  if (row < rows) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      s += backward_term(convert<V>(g[off + j]), convert<V>(y[off + j]), log);
    }
  }
  s = block_reduce_x(
      s, [](V a, V b) { return a + b; }, V(0), smem);
  if (threadIdx.x == 0) smem[threadIdx.y] = s;
  __syncthreads();
  if (row >= rows) return;
  s = smem[threadIdx.y];
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    out[off + j] = backward_value<T>(convert<V>(g[off + j]), convert<V>(y[off + j]), s, log);
  }
}

template <class T>
__global__ void __launch_bounds__(32 * kColRows)
    softmax_backward_cols_kernel(const T* g, const T* y, T* out, int64_t outer, int64_t d,
                                 int64_t inner, bool log) {
  using V = ColAcc<T>;
  LOOM_SHARED_ARRAY(V, smem, 32 * kColRows);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool valid = col < outer * inner;
  const int64_t base = valid ? (col / inner) * d * inner + col % inner : 0;
  V s = 0;
  if (valid) {
    for (int64_t k = threadIdx.y; k < d; k += kColRows) {
      const int64_t i = base + k * inner;
      s += backward_term(convert<V>(g[i]), convert<V>(y[i]), log);
    }
  }
  const int slot = threadIdx.y * 32 + threadIdx.x;
  smem[slot] = s;
  __syncthreads();
#pragma unroll
  for (int h = kColRows / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.y) < h) smem[slot] += smem[slot + h * 32];
    __syncthreads();
  }
  if (!valid) return;
  s = smem[threadIdx.x];
  for (int64_t k = threadIdx.y; k < d; k += kColRows) {
    const int64_t i = base + k * inner;
    out[i] = backward_value<T>(convert<V>(g[i]), convert<V>(y[i]), s, log);
  }
}

// Block shape for rows of d elements: (threads per row, rows per block).
dim3 row_block(int64_t d) {
  const int tx = d <= 1024 ? 32 : (d <= 4096 ? 128 : 512);
  return dim3(tx, tx == 512 ? 1 : 256 / tx);
}

}  // namespace

cudaError_t launch_softmax(ScalarCode dt, bool log, const void* x, void* y, int64_t outer,
                           int64_t d, int64_t inner, cudaStream_t stream) {
  if (outer * d * inner == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    if (inner == 1 && d <= kWarpRowMax) {
      return launch_warp_rows<ForwardWarp<T>::template L, kWarpRows>(
          outer, d, stream, static_cast<const T*>(x), static_cast<T*>(y), outer,
          static_cast<int>(d), log);
    }
    if (inner == 1) {
      const dim3 block = row_block(d);
      const auto blocks = static_cast<unsigned>((outer + block.y - 1) / block.y);
      softmax_rows_kernel<T><<<blocks, block, 0, stream>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), outer, d, log);
    } else {
      const auto blocks = static_cast<unsigned>((outer * inner + 31) / 32);
      softmax_cols_kernel<T><<<blocks, dim3(32, kColRows), 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, d, inner, log);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_softmax_backward(ScalarCode dt, bool log, const void* g, const void* y,
                                    void* grad_input, int64_t outer, int64_t d, int64_t inner,
                                    cudaStream_t stream) {
  if (outer * d * inner == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    const T* gp = static_cast<const T*>(g);
    const T* yp = static_cast<const T*>(y);
    T* op = static_cast<T*>(grad_input);
    if (inner == 1 && d <= kWarpRowMax) {
      return launch_warp_rows<BackwardWarp<T>::template L, kWarpRows>(
          outer, d, stream, gp, yp, op, outer, static_cast<int>(d), log);
    }
    if (inner == 1) {
      const dim3 block = row_block(d);
      const auto blocks = static_cast<unsigned>((outer + block.y - 1) / block.y);
      softmax_backward_rows_kernel<T><<<blocks, block, 0, stream>>>(gp, yp, op, outer, d, log);
    } else {
      const auto blocks = static_cast<unsigned>((outer * inner + 31) / 32);
      softmax_backward_cols_kernel<T>
          <<<blocks, dim3(32, kColRows), 0, stream>>>(gp, yp, op, outer, d, inner, log);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
