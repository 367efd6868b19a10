// Warp and block reductions for the CUDA kernels of reductions, softmax and norms (ops layer,
// CUDA backend; included by .cu files only).
//
// Note [Deterministic device reductions]
//   Every reduction on the device combines its values along a fixed tree that depends only on the
//   shape of the problem: each thread folds a strided run of elements in order, a warp combines
//   its lanes with __shfl_down_sync (lane i with lane i + 16, then + 8, ...), a block combines its
//   warps through shared memory in warp order, and work split across blocks writes partial results
//   that a second kernel combines in block order. No atomics touch a float result, and the split
//   depends on the shape, not on the device's SM count, so the same input gives the same bits on
//   every run (and on every GPU of one architecture).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::cuda_ops {

constexpr unsigned kFullMask = 0xffffffffu;

// v from the lane `delta` above (any trivially copyable value, moved as 32-bit words).
template <class T>
__device__ __forceinline__ T shfl_down(T v, int delta) {
  if constexpr (sizeof(T) < 4) {
    int w = 0;
    memcpy(&w, &v, sizeof(T));
    w = __shfl_down_sync(kFullMask, w, delta);
    memcpy(&v, &w, sizeof(T));
    return v;
  } else {
    static_assert(sizeof(T) % 4 == 0, "shfl_down moves whole 32-bit words");
    constexpr int kWords = static_cast<int>(sizeof(T) / 4);
    int w[kWords];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = __shfl_down_sync(kFullMask, w[i], delta);
    memcpy(&v, w, sizeof(T));
    return v;
  }
}

// Combines v over the 32 lanes of a warp; lane 0 gets the result. Every lane must call it.
template <class T, class Combine>
__device__ __forceinline__ T warp_reduce(T v, const Combine& combine) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = combine(v, shfl_down(v, d));
  return v;
}

// Combines v (a float, double or 32/64-bit integer) over the 32 lanes of a warp by a butterfly:
// lane i with lane i ^ 16, then ^ 8, ... Every lane ends with the result, and with the same bits
// when combine is commutative in IEEE arithmetic (a + b, max), since each exchange hands both
// partners the same two operands. Every lane must call it.
template <class T, class Combine>
__device__ __forceinline__ T warp_allreduce(T v, const Combine& combine) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = combine(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

// Combines v over threadIdx.x within each row threadIdx.y of the block (blockDim.x a multiple of
// 32); thread x = 0 of each row gets the result. `smem` holds blockDim.y * blockDim.x / 32 values.
// Every thread of the block must call it.
template <class T, class Combine>
__device__ __forceinline__ T block_reduce_x(T v, const Combine& combine, T identity, T* smem) {
  v = warp_reduce(v, combine);
  const int warps = static_cast<int>(blockDim.x) / 32;
  if (warps == 1) return v;
  const int lane = static_cast<int>(threadIdx.x) % 32, w = static_cast<int>(threadIdx.x) / 32;
  const int row = static_cast<int>(threadIdx.y) * warps;
  if (lane == 0) smem[row + w] = v;
  __syncthreads();
  v = static_cast<int>(threadIdx.x) < warps ? smem[row + threadIdx.x] : identity;
  if (w == 0) v = warp_reduce(v, combine);
  __syncthreads();  // smem may be reused by the caller
  return v;
}

// Shared memory for n values of T (static, so T needs no constructor).
#define LOOM_SHARED_ARRAY(T, name, n)                                 \
  __shared__ __align__(16) unsigned char name##_raw[(n) * sizeof(T)]; \
  T* name = reinterpret_cast<T*>(name##_raw)

// The persistent-row launch of softmax and layer norm (Note [Device softmax]): one warp a row,
// kRowsPerBlock rows a block, lane l holding elements l, l + 32, ... in registers. Calls
// Launch<kPer>::run(grid, block, stream, a...) with the smallest power-of-two kPer (1 to 32) for
// which 32 * kPer >= d; d must be at most 1024.
constexpr int kWarpRowMax = 1024;
template <template <int> class Launch, int kRowsPerBlock, class... Args>
cudaError_t launch_warp_rows(int64_t rows, int64_t d, cudaStream_t stream, Args... a) {
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  const dim3 block(32, kRowsPerBlock);
  if (d <= 32) return Launch<1>::run(grid, block, stream, a...);
  if (d <= 64) return Launch<2>::run(grid, block, stream, a...);
  if (d <= 128) return Launch<4>::run(grid, block, stream, a...);
  if (d <= 256) return Launch<8>::run(grid, block, stream, a...);
  if (d <= 512) return Launch<16>::run(grid, block, stream, a...);
  return Launch<32>::run(grid, block, stream, a...);
}

}  // namespace loom::cuda_ops
