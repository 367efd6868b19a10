// CUDA kernels of the reductions over columns (a non-innermost dim: the bias gradient's sum over
// rows): `outer` and its vector form (Note [Vector loads in column reductions]), run with the
// reducers of reduce_common.cuh; split reductions are finished by reduce_kernels.cu's `finalize`.
// See Note [Deterministic device reductions] in block_reduce.cuh.
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/reduce_common.cuh"
#include "ops/cuda/reduce_kernels.h"

namespace loom::cuda_ops::reduce_detail {
namespace {

// Block (32, kOuterRows): column x reduces output blockIdx.x * 32 + x; row y takes every
// kOuterRows-th reduced element of the split; the rows are combined through shared memory.
template <class R>
__global__ void __launch_bounds__(32 * kOuterRows) reduce_outer_kernel(const Params<R> p) {
  using acc_t = typename R::acc_t;
  LOOM_SHARED_ARRAY(acc_t, smem, 32 * kOuterRows);
  const int64_t m = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t split = blockIdx.y;
  const int64_t r0 = split * p.chunk;
  const int64_t r1 = r0 + p.chunk < p.N ? r0 + p.chunk : p.N;
  acc_t acc = p.r.init();
  if (m < p.M) acc = fold(p, p.in + p.kept_in.get(m), r0 + threadIdx.y, r1, kOuterRows);
  const int slot = threadIdx.y * 32 + threadIdx.x;
  smem[slot] = acc;
  __syncthreads();
#pragma unroll
  for (int s = kOuterRows / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.y) < s)
      smem[slot] = p.r.combine(smem[slot], smem[slot + s * 32]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && m < p.M) finish(p, m, split, smem[threadIdx.x]);
}

// Note [Vector loads in column reductions]
//   A column reduction (the bias gradient: a [rows, columns] matrix summed over its rows) reads, in
//   the outer kernel, one element per thread and row: 64 bytes a warp for 16-bit types, a quarter
//   of what the memory system moves per request. When the columns are one dense dim (stride 1), the
//   rows one reduced dim and both 16-byte aligned, each thread instead owns kV adjacent columns and
//   reads them as one 16-byte vector. Every column still folds its rows in exactly the scalar
//   kernel's order (rows ty, ty + 16, ... of the split into four accumulators combined as
//   (a0 + a1) + (a2 + a3), then the same tree over ty), with the same splits, so both kernels give
//   the same bits and the choice between them (alignment) never shows in a result.
template <class R, int kV>
__global__ void __launch_bounds__(32 * kOuterRows) reduce_outer_vec_kernel(const Params<R> p) {
  using acc_t = typename R::acc_t;
  using T = typename R::in_t;
  LOOM_SHARED_ARRAY(acc_t, smem, 32 * kOuterRows * kV);
  const int64_t m0 = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * kV;
  const int64_t split = blockIdx.y;
  const int64_t r0 = split * p.chunk;
  const int64_t r1 = r0 + p.chunk < p.N ? r0 + p.chunk : p.N;
  const int64_t row_stride = p.red.strides[0];
  acc_t acc[4][kV];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int c = 0; c < kV; ++c) acc[j][c] = p.r.init();
  if (m0 < p.M) {
    const T* base = p.in + m0;
    int64_t r = r0 + threadIdx.y;
    constexpr int64_t step = kOuterRows;
    for (; r + 3 * step < r1; r += 4 * step) {
      AlignedVector<T, kV> x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        x[j] = *reinterpret_cast<const AlignedVector<T, kV>*>(base + (r + j * step) * row_stride);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < kV; ++c)
          acc[j][c] = p.r.step(acc[j][c], convert<opmath_t<T>>(x[j].val[c]), r + j * step);
    }
    for (; r < r1; r += step) {
      const AlignedVector<T, kV> x =
          *reinterpret_cast<const AlignedVector<T, kV>*>(base + r * row_stride);
#pragma unroll
      for (int c = 0; c < kV; ++c)
        acc[0][c] = p.r.step(acc[0][c], convert<opmath_t<T>>(x.val[c]), r);
    }
  }
  const int slot = threadIdx.y * 32 + threadIdx.x;
#pragma unroll
  for (int c = 0; c < kV; ++c)
    smem[c * 32 * kOuterRows + slot] =
        p.r.combine(p.r.combine(acc[0][c], acc[1][c]), p.r.combine(acc[2][c], acc[3][c]));
  __syncthreads();
#pragma unroll
  for (int s = kOuterRows / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.y) < s) {
#pragma unroll
      for (int c = 0; c < kV; ++c) {
        acc_t* e = smem + c * 32 * kOuterRows + slot;
        *e = p.r.combine(*e, e[s * 32]);
      }
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && m0 < p.M) {
#pragma unroll
    for (int c = 0; c < kV; ++c) finish(p, m0 + c, split, smem[c * 32 * kOuterRows + threadIdx.x]);
  }
}

// Whether the outer reduction can take reduce_outer_vec_kernel with kV columns a thread.
template <class R, int kV>
bool outer_vec_fits(const ReduceArgs& a) {
  using T = typename R::in_t;
  return a.red_ndim == 1 && a.kept_ndim == 1 && a.kept_in_strides[0] == 1 &&
         a.num_outputs % kV == 0 && a.red_strides[0] % kV == 0 &&
         reinterpret_cast<uintptr_t>(a.in) % (sizeof(T) * kV) == 0;
}

// Launches reduce_outer_vec_kernel when the reduction fits it: kV columns a thread, where the
// partials of a block fit in 32 KiB of shared memory. Returns whether it launched.
template <class R>
bool launch_outer_vec(const ReduceArgs& a, const ReducePlan& plan, const Params<R>& p,
                      cudaStream_t stream) {
  constexpr int kV0 = 16 / static_cast<int>(sizeof(typename R::in_t));
  constexpr int kV = kV0 * sizeof(typename R::acc_t) * 32 * kOuterRows <= 32768 ? kV0 : 1;
  if constexpr (kV > 1) {
    if (!outer_vec_fits<R, kV>(a)) return false;
    const dim3 grid(static_cast<unsigned>((a.num_outputs / kV + 31) / 32),
                    static_cast<unsigned>(plan.splits));
    reduce_outer_vec_kernel<R, kV><<<grid, dim3(32, kOuterRows), 0, stream>>>(p);
    return true;
  } else {
    return false;
  }
}

}  // namespace

cudaError_t launch_reduce_columns(const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                                  cudaStream_t stream) {
  return with_reducer(a, [&](const auto& r) {
    using R = std::decay_t<decltype(r)>;
    const Params<R> p = make_params(r, a, plan, workspace);
    if (launch_outer_vec(a, plan, p, stream)) {
      // launched (Note [Vector loads in column reductions])
    } else {
      const dim3 grid(static_cast<unsigned>(plan.blocks_x), static_cast<unsigned>(plan.splits));
      reduce_outer_kernel<R><<<grid, dim3(32, kOuterRows), 0, stream>>>(p);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops::reduce_detail
