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

}  // namespace loom::cuda_ops
