// CUDA kernels of the reductions, dot, equal and allclose. One reducer per operator (the device
// twin of the CPU reducers in cpu/reduce_kernels.cpp; reduce_common.cuh), run by three kernels:
// `inner` (threads of a block row share one output; for rows, whole-tensor sums and any other
// layout), `outer` (each thread owns one output column, rows split across threadIdx.y; for
// reductions over a non-inner dim; in reduce_column_kernels.cu), and `finalize` (combines the
// partials when the reduced elements of one output are split across blocks). See Note
// [Deterministic device reductions] in block_reduce.cuh.
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/reduce_common.cuh"
#include "ops/cuda/reduce_kernels.h"

namespace loom::cuda_ops {

using namespace reduce_detail;

namespace {

// Note [Vector loads in reductions]
//   When the reduced elements of every output are contiguous (one reduced dim of stride 1) and the
//   input type is 4 bytes wide, each thread reads 16-byte vectors: two per step into eight
//   accumulators, so that 32 bytes per thread are in flight (scalar loads keep 16, too few to
//   fill HBM). Which thread folds which elements, and the order in which the accumulators and
//   threads combine, depend on the shape only, so the result stays deterministic. The scalar
//   prologue and epilogue handle an output's unaligned head and ragged tail.
template <class R>
__device__ __forceinline__ typename R::acc_t fold_vec4(const Params<R>& p,
                                                       const typename R::in_t* base, int64_t r0,
                                                       int64_t r1, int lane, int width) {
  using T = typename R::in_t;
  using acc_t = typename R::acc_t;
  acc_t a[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) a[k] = p.r.init();
  // Head: elements before the first 16-byte boundary, one per thread.
  const int64_t mis = (reinterpret_cast<uintptr_t>(base + r0) / sizeof(T)) % 4;
  int64_t head = mis == 0 ? 0 : 4 - mis;
  if (head > r1 - r0) head = r1 - r0;
  if (lane < head) a[0] = p.r.step(a[0], load_value(base + r0 + lane), r0 + lane);
  const int64_t v0 = r0 + head;
  const int64_t nvec = (r1 - v0) / 4;
  const auto* vec = reinterpret_cast<const AlignedVector<T, 4>*>(base + v0);
  int64_t i = lane;
  for (; i + width < nvec; i += 2 * static_cast<int64_t>(width)) {
    const AlignedVector<T, 4> x = vec[i], y = vec[i + width];
    const int64_t rx = v0 + 4 * i, ry = v0 + 4 * (i + width);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      a[k] = p.r.step(a[k], convert<opmath_t<T>>(x.val[k]), rx + k);
      a[4 + k] = p.r.step(a[4 + k], convert<opmath_t<T>>(y.val[k]), ry + k);
    }
  }
  for (; i < nvec; i += width) {
    const AlignedVector<T, 4> x = vec[i];
    const int64_t rx = v0 + 4 * i;
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = p.r.step(a[k], convert<opmath_t<T>>(x.val[k]), rx + k);
  }
  // Tail: fewer than four elements after the last whole vector.
  const int64_t t0 = v0 + 4 * nvec;
  if (t0 + lane < r1) a[1] = p.r.step(a[1], load_value(base + t0 + lane), t0 + lane);
#pragma unroll
  for (int k = 0; k < 4; ++k) a[k] = p.r.combine(a[k], a[4 + k]);
  return p.r.combine(p.r.combine(a[0], a[1]), p.r.combine(a[2], a[3]));
}

// Block (tx, ty): row y of the block reduces output blockIdx.x * ty + y over its split.
template <class R>
__global__ void __launch_bounds__(512) reduce_inner_kernel(const Params<R> p) {
  using acc_t = typename R::acc_t;
  LOOM_SHARED_ARRAY(acc_t, smem, 32);
  const int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t split = blockIdx.y;
  const int64_t r0 = split * p.chunk;
  const int64_t r1 = r0 + p.chunk < p.N ? r0 + p.chunk : p.N;
  acc_t acc = p.r.init();
  if (m < p.M) {
    if constexpr (sizeof(typename R::in_t) == 4) {
      if (p.contiguous) {
        acc = fold_vec4(p, p.in + p.kept_in.get(m), r0, r1, static_cast<int>(threadIdx.x),
                        static_cast<int>(blockDim.x));
      } else {
        acc = fold(p, p.in + p.kept_in.get(m), r0 + threadIdx.x, r1, blockDim.x);
      }
    } else {
      acc = fold(p, p.in + p.kept_in.get(m), r0 + threadIdx.x, r1, blockDim.x);
    }
  }
  const auto combine = [&](const acc_t& a, const acc_t& b) { return p.r.combine(a, b); };
  acc = block_reduce_x(acc, combine, p.r.init(), smem);
  if (threadIdx.x == 0 && m < p.M) finish(p, m, split, acc);
}

// Block (32, 8): warp y combines the partials of output blockIdx.x * 8 + y in a fixed order.
template <class R>
__global__ void __launch_bounds__(256) reduce_finalize_kernel(const Params<R> p) {
  using acc_t = typename R::acc_t;
  const int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  acc_t acc = p.r.init();
  if (m < p.M) {
    for (int64_t s = threadIdx.x; s < p.splits; s += 32) {
      acc = p.r.combine(acc, p.partials[m * p.splits + s]);
    }
  }
  acc = warp_reduce(acc, [&](const acc_t& a, const acc_t& b) { return p.r.combine(a, b); });
  if (threadIdx.x == 0 && m < p.M) p.r.store(p.out0, p.out1, p.kept_out.get(m), acc, p.N);
}

// The inner kernel's first pass (for columns, plan.outer, launch_reduce_columns has run it), then,
// when the reduced elements are split, the finalize kernel over the partials.
template <class R>
cudaError_t run_reducer(const R& r, const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                        cudaStream_t stream) {
  const Params<R> p = make_params(r, a, plan, workspace);
  if (!plan.outer) {
    const dim3 grid(static_cast<unsigned>(plan.blocks_x), static_cast<unsigned>(plan.splits));
    reduce_inner_kernel<R><<<grid, dim3(plan.tx, plan.ty), 0, stream>>>(p);
  }
  if (plan.splits > 1) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const unsigned blocks = static_cast<unsigned>((a.num_outputs + 7) / 8);
    reduce_finalize_kernel<R><<<blocks, dim3(32, 8), 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// Enough blocks to fill an H200 (132 SMs) several times over. A constant, not the device's SM
// count, so that a reduction splits the same way (and gives the same bits) on every GPU.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinPerThread = 16;  // reduced elements per thread before splitting pays

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

ReducePlan plan_reduce(const ReduceArgs& a) {
  ReducePlan plan;
  const int64_t M = a.num_outputs, N = a.reduce_size;
  plan.outer = a.outer && N > 0;
  int64_t per_block_rows;  // threads that share one output's elements
  if (plan.outer) {
    plan.tx = 32;
    plan.ty = kOuterRows;
    plan.blocks_x = ceil_div(M, 32);
    per_block_rows = kOuterRows;
  } else {
    plan.tx = N <= 256 ? 32 : (N <= 4096 ? 128 : 512);
    plan.ty = plan.tx == 512 ? 1 : 256 / plan.tx;
    plan.blocks_x = ceil_div(M, plan.ty);
    per_block_rows = plan.tx;
  }
  plan.splits = 1;
  if (N > 0 && plan.blocks_x < kTargetBlocks) {
    plan.splits = std::min(ceil_div(kTargetBlocks, plan.blocks_x),
                           ceil_div(N, per_block_rows * kMinPerThread));
    plan.splits = std::max<int64_t>(1, std::min<int64_t>(plan.splits, 65535));
  }
  plan.chunk = N > 0 ? ceil_div(N, plan.splits) : 0;
  if (N > 0) plan.splits = ceil_div(N, plan.chunk);
  if (plan.splits > 1) {
    const size_t acc_bytes = with_reducer(
        a, [](const auto& r) { return sizeof(typename std::decay_t<decltype(r)>::acc_t); });
    plan.workspace_bytes = static_cast<size_t>(M * plan.splits) * acc_bytes;
  }
  return plan;
}

cudaError_t launch_reduce(const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                          cudaStream_t stream) {
  if (a.num_outputs == 0) return cudaSuccess;
  if (plan.outer) {
    // The columns' first pass (reduce_column_kernels.cu); split, their partials are combined below.
    const cudaError_t e = launch_reduce_columns(a, plan, workspace, stream);
    if (e != cudaSuccess || plan.splits == 1) return e;
  }
  return with_reducer(a, [&](const auto& r) { return run_reducer(r, a, plan, workspace, stream); });
}

// ---- dot ----

namespace {

template <class T>
using dot_acc_t = std::conditional_t<is_float_v<T>, facc_t<T>, int64_t>;

constexpr int kDotThreads = 512;
constexpr int64_t kDotChunk = kDotThreads * 64;  // elements per block

template <class T>
__global__ void __launch_bounds__(kDotThreads)
    dot_kernel(const T* x, int64_t sx, const T* y, int64_t sy, int64_t n, T* out,
               dot_acc_t<T>* partials) {
  using A = dot_acc_t<T>;
  LOOM_SHARED_ARRAY(A, smem, kDotThreads / 32);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kDotChunk;
  const int64_t r1 = r0 + kDotChunk < n ? r0 + kDotChunk : n;
  A acc = 0;
  for (int64_t i = r0 + threadIdx.x; i < r1; i += kDotThreads) {
    acc += static_cast<A>(load_value(x + i * sx)) * static_cast<A>(load_value(y + i * sy));
  }
  acc = block_reduce_x(
      acc, [](A a, A b) { return a + b; }, A(0), smem);
  if (threadIdx.x != 0) return;
  if (gridDim.x == 1) {
    *out = convert<T>(acc);
  } else {
    partials[blockIdx.x] = acc;
  }
}

template <class T>
__global__ void __launch_bounds__(kDotThreads)
    dot_finalize_kernel(const dot_acc_t<T>* partials, int64_t parts, T* out) {
  using A = dot_acc_t<T>;
  LOOM_SHARED_ARRAY(A, smem, kDotThreads / 32);
  A acc = 0;
  for (int64_t s = threadIdx.x; s < parts; s += kDotThreads) acc += partials[s];
  acc = block_reduce_x(
      acc, [](A a, A b) { return a + b; }, A(0), smem);
  if (threadIdx.x == 0) *out = convert<T>(acc);
}

}  // namespace

size_t dot_workspace_bytes(ScalarCode dt, int64_t n) {
  const int64_t blocks = ceil_div(n, kDotChunk);
  if (blocks <= 1) return 0;
  const size_t acc = LOOM_CUDA_DISPATCH_ALL(dt, [&] { return sizeof(dot_acc_t<scalar_t>); });
  return static_cast<size_t>(blocks) * acc;
}

cudaError_t launch_dot(ScalarCode dt, const char* x, int64_t sx, const char* y, int64_t sy,
                       int64_t n, char* out, void* workspace, cudaStream_t stream) {
  const int64_t blocks = std::max<int64_t>(1, ceil_div(n, kDotChunk));
  return LOOM_CUDA_DISPATCH_ALL(dt, [&] {
    using T = scalar_t;
    auto* parts = static_cast<dot_acc_t<T>*>(workspace);
    dot_kernel<T><<<static_cast<unsigned>(blocks), kDotThreads, 0, stream>>>(
        reinterpret_cast<const T*>(x), sx, reinterpret_cast<const T*>(y), sy, n,
        reinterpret_cast<T*>(out), parts);
    if (blocks > 1) {
      const cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) return e;
      dot_finalize_kernel<T>
          <<<1, kDotThreads, 0, stream>>>(parts, blocks, reinterpret_cast<T*>(out));
    }
    return cudaGetLastError();
  });
}

// ---- equal / allclose ----

namespace {

template <class T, class Index>
__global__ void __launch_bounds__(kThreads)
    compare_kernel(int64_t n, OffsetCalc<2, Index> calc, Operands<2> ops, bool close, double rtol,
                   double atol, bool equal_nan, int* mismatch) {
  int64_t idx = static_cast<int64_t>(blockIdx.x) * kBlockWork + threadIdx.x;
  bool bad = false;
#pragma unroll
  for (int k = 0; k < kThreadWork; ++k, idx += kThreads) {
    if (idx >= n) break;
    Index off[2];
    calc.get(static_cast<Index>(idx), off);
    const auto a = load_value(reinterpret_cast<const T*>(ops.data[0] + off[0]));
    const auto b = load_value(reinterpret_cast<const T*>(ops.data[1] + off[1]));
    if (!close) {
      bad |= !(a == b);
    } else {
      const double x = static_cast<double>(a), y = static_cast<double>(b);
      bool ok;
      if (x == y) {
        ok = true;
      } else if (isnan(x) || isnan(y)) {
        ok = equal_nan && isnan(x) && isnan(y);
      } else if (isinf(x) || isinf(y)) {
        ok = false;
      } else {
        ok = fabs(x - y) <= atol + rtol * fabs(y);
      }
      bad |= !ok;
    }
  }
  // Every writer stores the same value, so the result does not depend on the order.
  if (bad) *mismatch = 1;
}

}  // namespace

cudaError_t launch_compare_all(const IterArgs& a, bool close, double rtol, double atol,
                               bool equal_nan, int* mismatch, cudaStream_t stream) {
  if (a.numel == 0) return cudaSuccess;
  const Operands<2> ops(a);
  const dim3 grid(static_cast<unsigned>((a.numel + kBlockWork - 1) / kBlockWork));
  return LOOM_CUDA_DISPATCH_ALL(a.dtype[0], [&] {
    if (a.can_use_32bit_indexing()) {
      compare_kernel<scalar_t, uint32_t><<<grid, kThreads, 0, stream>>>(
          a.numel, OffsetCalc<2, uint32_t>(a), ops, close, rtol, atol, equal_nan, mismatch);
    } else {
      compare_kernel<scalar_t, int64_t><<<grid, kThreads, 0, stream>>>(
          a.numel, OffsetCalc<2, int64_t>(a), ops, close, rtol, atol, equal_nan, mismatch);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
