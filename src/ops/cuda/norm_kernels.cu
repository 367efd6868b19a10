// CUDA kernels of native_layer_norm and its backward.
//
// Note [Device layer norm]
//   Forward: threadIdx.x of a block row walks one row (a warp for rows of up to 1024 elements,
//   8 rows per block; 128 or 512 threads for longer ones): a pass for the mean, a pass for the sum
//   of squared deviations (no E[x^2] - E[x]^2 cancellation), a pass that writes; the passes after
//   the first read the row from cache. Backward: the same row layout for grad_input (the two sums
//   of Note [Layer norm backward] in cpu/nn_kernels.cpp), and column sums for grad_weight and
//   grad_bias: 32 columns per block, 16 thread rows, the rows of the tensor split across a grid
//   whose partials a second kernel adds in a fixed order (Note [Deterministic device reductions]).
//   16-bit floats compute in float; sums accumulate in float (double for float64).
//   Rows of up to 1024 elements take the persistent path (as softmax's, Note [Device softmax]):
//   one warp a row, the row in registers, read once; the forward's mean and squared deviations
//   and the backward's two sums meet by butterfly shuffles in a fixed order.
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/norm_kernels.h"

namespace loom::cuda_ops {
namespace {

template <class T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Sum of v over the row's threads, returned to every thread of the row. smem: 32 + blockDim.y.
template <class V>
__device__ __forceinline__ V row_sum(V v, V* smem) {
  v = block_reduce_x(
      v, [](V a, V b) { return a + b; }, V(0), smem);
  if (threadIdx.x == 0) smem[32 + threadIdx.y] = v;
  __syncthreads();
  v = smem[32 + threadIdx.y];
  __syncthreads();
  return v;
}

template <class T>
__global__ void __launch_bounds__(512)
    layer_norm_kernel(const T* x, const opmath_t<T>* w, const opmath_t<T>* b, T* y, T* mean,
                      T* rstd, int64_t rows, int64_t cols, double eps) {
  using M = opmath_t<T>;
  using A = acc_of<T>;
  LOOM_SHARED_ARRAY(A, smem, 32 + 8);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const T* xr = x + (valid ? row : 0) * cols;
  A s = 0;
  if (valid) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += static_cast<A>(convert<M>(xr[j]));
  }
  const A mu = cols > 0 ? row_sum(s, smem) / static_cast<A>(cols) : A(0);
  A q = 0;
  if (valid) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const A d = static_cast<A>(convert<M>(xr[j])) - mu;
      q += d * d;
    }
  }
  const A var = cols > 0 ? row_sum(q, smem) / static_cast<A>(cols) : A(0);
  if (!valid) return;
  const M m = static_cast<M>(mu);
  const M rs = static_cast<M>(1.0 / sqrt(static_cast<double>(var) + eps));
  T* yr = y + row * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    M v = (convert<M>(xr[j]) - m) * rs;
    if (w != nullptr) v *= w[j];
    if (b != nullptr) v += b[j];
    yr[j] = convert<T>(v);
  }
  if (threadIdx.x == 0) {
    mean[row] = convert<T>(m);
    rstd[row] = convert<T>(rs);
  }
}

template <class T>
__global__ void __launch_bounds__(512)
    layer_norm_backward_input_kernel(const T* g, const T* x, const T* mean, const T* rstd,
                                     const opmath_t<T>* w, T* gi, int64_t rows, int64_t cols) {
  using M = opmath_t<T>;
  using A = acc_of<T>;
  LOOM_SHARED_ARRAY(A, smem, 32 + 8);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const int64_t off = (valid ? row : 0) * cols;
  const M m = convert<M>(mean[valid ? row : 0]), rs = convert<M>(rstd[valid ? row : 0]);
  A s1 = 0, s2 = 0;
  if (valid) {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      M gw = convert<M>(g[off + j]);
      if (w != nullptr) gw *= w[j];
      const M xh = (convert<M>(x[off + j]) - m) * rs;
      s1 += static_cast<A>(gw);
      s2 += static_cast<A>(gw) * static_cast<A>(xh);
    }
  }
  s1 = row_sum(s1, smem);
  s2 = row_sum(s2, smem);
  if (!valid) return;
  const M m1 = static_cast<M>(s1 / static_cast<A>(cols));
  const M m2 = static_cast<M>(s2 / static_cast<A>(cols));
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    M gw = convert<M>(g[off + j]);
    if (w != nullptr) gw *= w[j];
    const M xh = (convert<M>(x[off + j]) - m) * rs;
    gi[off + j] = convert<T>(rs * (gw - m1 - xh * m2));
  }
}

constexpr int kWarpRows = 4;  // warps (rows) per block of the persistent path

template <class T, int kPer>
__global__ void __launch_bounds__(32 * kWarpRows)
    layer_norm_warp_kernel(const T* x, const opmath_t<T>* w, const opmath_t<T>* b, T* y, T* mean,
                           T* rstd, int64_t rows, int cols, double eps) {
  using M = opmath_t<T>;
  using A = acc_of<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.y;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = static_cast<int>(threadIdx.x);
  const T* xr = x + row * cols;
  A v[kPer];
  A s = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    v[k] = j < cols ? static_cast<A>(convert<M>(xr[j])) : A(0);
    s += v[k];
  }
  const auto add = [](A p, A q) { return p + q; };
  const A mu = warp_allreduce(s, add) / static_cast<A>(cols);
  A q = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (lane + 32 * k < cols) q += (v[k] - mu) * (v[k] - mu);
  }
  const A var = warp_allreduce(q, add) / static_cast<A>(cols);
  const M m = static_cast<M>(mu);
  const M rs = static_cast<M>(1.0 / sqrt(static_cast<double>(var) + eps));
  T* yr = y + row * cols;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    if (j >= cols) continue;
    M o = (static_cast<M>(v[k]) - m) * rs;
    if (w != nullptr) o *= w[j];
    if (b != nullptr) o += b[j];
    yr[j] = convert<T>(o);
  }
  if (lane == 0) {
    mean[row] = convert<T>(m);
    rstd[row] = convert<T>(rs);
  }
}

template <class T, int kPer>
__global__ void __launch_bounds__(32 * kWarpRows)
    layer_norm_backward_input_warp_kernel(const T* g, const T* x, const T* mean, const T* rstd,
                                          const opmath_t<T>* w, T* gi, int64_t rows, int cols) {
  using M = opmath_t<T>;
  using A = acc_of<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.y;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t off = row * cols;
  const M m = convert<M>(mean[row]), rs = convert<M>(rstd[row]);
  M gw[kPer], xh[kPer];
  A s1 = 0, s2 = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    gw[k] = 0;
    xh[k] = 0;
    if (j < cols) {
      gw[k] = convert<M>(g[off + j]);
      if (w != nullptr) gw[k] *= w[j];
      xh[k] = (convert<M>(x[off + j]) - m) * rs;
    }
    s1 += static_cast<A>(gw[k]);
    s2 += static_cast<A>(gw[k]) * static_cast<A>(xh[k]);
  }
  const auto add = [](A p, A q) { return p + q; };
  const M m1 = static_cast<M>(warp_allreduce(s1, add) / static_cast<A>(cols));
  const M m2 = static_cast<M>(warp_allreduce(s2, add) / static_cast<A>(cols));
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = lane + 32 * k;
    if (j < cols) gi[off + j] = convert<T>(rs * (gw[k] - m1 - xh[k] * m2));
  }
}

template <class T>
struct ForwardWarp {
  template <int kPer>
  struct L {
    template <class... Args>
    static cudaError_t run(dim3 grid, dim3 block, cudaStream_t stream, Args... a) {
      layer_norm_warp_kernel<T, kPer><<<grid, block, 0, stream>>>(a...);
      return cudaGetLastError();
    }
  };
};

template <class T>
struct BackwardInputWarp {
  template <int kPer>
  struct L {
    template <class... Args>
    static cudaError_t run(dim3 grid, dim3 block, cudaStream_t stream, Args... a) {
      layer_norm_backward_input_warp_kernel<T, kPer><<<grid, block, 0, stream>>>(a...);
      return cudaGetLastError();
    }
  };
};

constexpr int kColRows = 16;
constexpr int64_t kTargetBlocks = 1024;  // a constant: the split depends on the shape only

// Rows [split * chunk, ...) of 32 columns: partial sums of g * xhat and g per column, into
// ws[(split * 2 + which) * cols + j].
template <class T>
__global__ void __launch_bounds__(32 * kColRows)
    layer_norm_params_kernel(const T* g, const T* x, const T* mean, const T* rstd, int64_t rows,
                             int64_t cols, int64_t chunk, acc_of<T>* ws) {
  using M = opmath_t<T>;
  using A = acc_of<T>;
  LOOM_SHARED_ARRAY(A, smem, 2 * 32 * kColRows);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  A sw = 0, sb = 0;
  if (j < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) {
      const M gv = convert<M>(g[r * cols + j]);
      const M xh = (convert<M>(x[r * cols + j]) - convert<M>(mean[r])) * convert<M>(rstd[r]);
      sw += static_cast<A>(gv * xh);
      sb += static_cast<A>(gv);
    }
  }
  const int slot = threadIdx.y * 32 + threadIdx.x;
  A* sm_w = smem;
  A* sm_b = smem + 32 * kColRows;
  sm_w[slot] = sw;
  sm_b[slot] = sb;
  __syncthreads();
#pragma unroll
  for (int h = kColRows / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.y) < h) {
      sm_w[slot] += sm_w[slot + h * 32];
      sm_b[slot] += sm_b[slot + h * 32];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < cols) {
    ws[(static_cast<int64_t>(blockIdx.y) * 2) * cols + j] = sm_w[threadIdx.x];
    ws[(static_cast<int64_t>(blockIdx.y) * 2 + 1) * cols + j] = sm_b[threadIdx.x];
  }
}

template <class A>
__global__ void layer_norm_params_finalize_kernel(const A* ws, int64_t splits, int64_t cols, A* gw,
                                                  A* gb) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  A sw = 0, sb = 0;
  for (int64_t s = 0; s < splits; ++s) {
    sw += ws[(s * 2) * cols + j];
    sb += ws[(s * 2 + 1) * cols + j];
  }
  if (gw != nullptr) gw[j] = sw;
  if (gb != nullptr) gb[j] = sb;
}

dim3 row_block(int64_t cols) {
  const int tx = cols <= 1024 ? 32 : (cols <= 4096 ? 128 : 512);
  return dim3(tx, tx == 512 ? 1 : 256 / tx);
}

int64_t param_splits(int64_t rows, int64_t cols) {
  const int64_t blocks_x = (cols + 31) / 32;
  int64_t splits = std::min((kTargetBlocks + blocks_x - 1) / blocks_x,
                            (rows + kColRows * 8 - 1) / (kColRows * 8));
  return std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
}

}  // namespace

cudaError_t launch_layer_norm(ScalarCode dt, const void* x, const void* w, const void* b, void* y,
                              void* mean, void* rstd, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    if (cols > 0 && cols <= kWarpRowMax) {
      return launch_warp_rows<ForwardWarp<T>::template L, kWarpRows>(
          rows, cols, stream, static_cast<const T*>(x), static_cast<const M*>(w),
          static_cast<const M*>(b), static_cast<T*>(y), static_cast<T*>(mean),
          static_cast<T*>(rstd), rows, static_cast<int>(cols), eps);
    }
    const dim3 block = row_block(cols);
    const auto blocks = static_cast<unsigned>((rows + block.y - 1) / block.y);
    layer_norm_kernel<T><<<blocks, block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const M*>(w), static_cast<const M*>(b),
        static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd), rows, cols, eps);
    return cudaGetLastError();
  });
}

cudaError_t launch_layer_norm_backward_input(ScalarCode dt, const void* g, const void* x,
                                             const void* mean, const void* rstd, const void* w,
                                             void* grad_input, int64_t rows, int64_t cols,
                                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    if (cols <= kWarpRowMax) {
      return launch_warp_rows<BackwardInputWarp<T>::template L, kWarpRows>(
          rows, cols, stream, static_cast<const T*>(g), static_cast<const T*>(x),
          static_cast<const T*>(mean), static_cast<const T*>(rstd), static_cast<const M*>(w),
          static_cast<T*>(grad_input), rows, static_cast<int>(cols));
    }
    const dim3 block = row_block(cols);
    const auto blocks = static_cast<unsigned>((rows + block.y - 1) / block.y);
    layer_norm_backward_input_kernel<T><<<blocks, block, 0, stream>>>(
        static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(mean),
        static_cast<const T*>(rstd), static_cast<const M*>(w), static_cast<T*>(grad_input), rows,
        cols);
    return cudaGetLastError();
  });
}

size_t layer_norm_backward_workspace_bytes(ScalarCode dt, int64_t rows, int64_t cols) {
  const size_t acc = dt == ScalarCode::Float64 ? sizeof(double) : sizeof(float);
  return static_cast<size_t>(param_splits(rows, cols) * 2 * cols) * acc;
}

cudaError_t launch_layer_norm_backward_params(ScalarCode dt, const void* g, const void* x,
                                              const void* mean, const void* rstd, void* grad_weight,
                                              void* grad_bias, int64_t rows, int64_t cols,
                                              void* workspace, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    using A = acc_of<T>;
    const int64_t splits = param_splits(rows, cols);
    const int64_t chunk = (rows + splits - 1) / splits;
    A* ws = static_cast<A*>(workspace);
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(splits));
    layer_norm_params_kernel<T><<<grid, dim3(32, kColRows), 0, stream>>>(
        static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(mean),
        static_cast<const T*>(rstd), rows, cols, chunk, ws);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    layer_norm_params_finalize_kernel<A>
        <<<static_cast<unsigned>((cols + 255) / 256), 256, 0, stream>>>(
            ws, splits, cols, static_cast<A*>(grad_weight), static_cast<A*>(grad_bias));
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
