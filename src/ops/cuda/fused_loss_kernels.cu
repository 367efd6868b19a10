// CUDA kernels of the fused cross-entropy (Note [Fused cross-entropy] in fused_loss.cpp).
//
// Note [Device fused cross-entropy]
//   One block per row. Each thread folds its strided elements (coalesced across the block) into a
//   running (max, sum of exp(x - max), sum of x), rescaling its sum when the maximum grows; the
//   block combines the threads' triples along the fixed tree of block_reduce.cuh, so lse is the
//   same bits on every run. Per-row losses go to a double scratch that one block then sums in a
//   fixed order with the count of rows not ignored (Note [Deterministic device reductions]); no
//   float atomics. The backward reads each row once and writes (softmax - target mass) * scale in
//   the logits' dtype; the count it divides by comes from a one-block pass, so nothing returns to
//   the host between the kernels.
#include <cmath>

#include <type_traits>
#include "ops/cuda/block_reduce.cuh"

#include "ops/cuda/fused_loss_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

constexpr int kRowThreads = 512;
constexpr int kSumThreads = 512;

template <class A>
struct RowStats {
  A m, s, sx;  // running maximum, sum of exp(x - m), sum of x
};

template <class A>
__device__ __forceinline__ A exp_of(A v) {
  if constexpr (sizeof(A) == 8) {
    return exp(v);
  } else {
    return expf(v);
  }
}

// The sum of exp(x - m) of a partial result rescaled to a larger maximum mm (0 when empty).
template <class A>
__device__ __forceinline__ A rescaled(const RowStats<A>& a, A mm) {
  return a.s == A(0) ? A(0) : a.s * exp_of(a.m - mm);
}

template <class A>
__device__ __forceinline__ RowStats<A> combine_stats(const RowStats<A>& a, const RowStats<A>& b) {
  const A mm = a.m > b.m ? a.m : b.m;
  return RowStats<A>{mm, rescaled(a, mm) + rescaled(b, mm), a.sx + b.sx};
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    ce_forward_rows(const T* x, const int64_t* target, int64_t v, int64_t ignore, double smoothing,
                    float* lse, double* row_loss) {
  using A = opmath_t<T>;
  const int64_t i = blockIdx.x;
  const T* row = x + i * v;
  const A neg_inf = -INFINITY;
  RowStats<A> st{neg_inf, A(0), A(0)};
  for (int64_t c = threadIdx.x; c < v; c += blockDim.x) {
    const A xc = convert<A>(row[c]);
    st.sx += xc;
    if (xc > st.m) {
      st.s = rescaled(st, xc) + A(1);
      st.m = xc;
    } else if (xc != neg_inf) {
      st.s += exp_of(xc - st.m);
    }
  }
  LOOM_SHARED_ARRAY(RowStats<A>, smem, kRowThreads / 32);
  st = block_reduce_x(
      st, [](const RowStats<A>& a, const RowStats<A>& b) { return combine_stats(a, b); },
      RowStats<A>{neg_inf, A(0), A(0)}, smem);
  if (threadIdx.x != 0) return;
  const A l = st.m + log(st.s);
  lse[i] = static_cast<float>(l);
  const int64_t t = target[i];
  double loss = 0.0;
  if (t != ignore) {
    loss = (1.0 - smoothing) * static_cast<double>(l - convert<A>(row[t]));
    if (smoothing > 0.0) {
      const double dv = static_cast<double>(v);
      loss += smoothing / dv * (dv * static_cast<double>(l) - static_cast<double>(st.sx));
    }
  }
  row_loss[i] = loss;
}

struct SumCount {
  double sum;
  int64_t count;
};

// One block: the summed row losses and the rows not ignored, in a fixed order; loss = sum / count.
template <class T>
__global__ void __launch_bounds__(kSumThreads)
    ce_forward_sum(const double* row_loss, const int64_t* target, int64_t n, int64_t ignore,
                   T* loss) {
  SumCount acc{0.0, 0};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    acc.sum += row_loss[i];
    acc.count += target[i] != ignore ? 1 : 0;
  }
  LOOM_SHARED_ARRAY(SumCount, smem, kSumThreads / 32);
  acc = block_reduce_x(
      acc,
      [](const SumCount& a, const SumCount& b) {
        return SumCount{a.sum + b.sum, a.count + b.count};
      },
      SumCount{0.0, 0}, smem);
  if (threadIdx.x == 0) *loss = convert<T>(acc.sum / static_cast<double>(acc.count));
}

__global__ void __launch_bounds__(kSumThreads)
    ce_count_rows(const int64_t* target, int64_t n, int64_t ignore, int64_t* count) {
  int64_t c = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += target[i] != ignore ? 1 : 0;
  LOOM_SHARED_ARRAY(int64_t, smem, kSumThreads / 32);
  c = block_reduce_x(
      c, [](int64_t a, int64_t b) { return a + b; }, int64_t{0}, smem);
  if (threadIdx.x == 0) *count = c;
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    ce_backward_rows(const T* grad, const T* x, const int64_t* target, const float* lse,
                     const int64_t* count, int64_t v, int64_t ignore, double smoothing, T* gx) {
  using A = opmath_t<T>;
  const int64_t i = blockIdx.x;
  T* out = gx + i * v;
  const int64_t t = target[i];
  if (t == ignore) {
    for (int64_t c = threadIdx.x; c < v; c += blockDim.x) out[c] = convert<T>(A(0));
    return;
  }
  const T* row = x + i * v;
  const A scale =
      static_cast<A>(static_cast<double>(convert<A>(*grad)) / static_cast<double>(*count));
  const A on_target = static_cast<A>(1.0 - smoothing);
  const A uniform = static_cast<A>(smoothing / static_cast<double>(v));
  const A li = static_cast<A>(lse[i]);
  for (int64_t c = threadIdx.x; c < v; c += blockDim.x) {
    const A p = exp_of(convert<A>(row[c]) - li);
    const A mass = c == t ? on_target + uniform : uniform;
    out[c] = convert<T>((p - mass) * scale);
  }
}

}  // namespace

cudaError_t launch_fused_cross_entropy(ScalarCode dt, const void* logits, const int64_t* target,
                                       int64_t n, int64_t v, int64_t ignore_index, double smoothing,
                                       float* lse, double* row_loss, void* loss,
                                       cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    ce_forward_rows<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<const T*>(logits), target, v, ignore_index, smoothing, lse, row_loss);
    // 16-bit logits give a float32 loss (Note [Fused cross-entropy]).
    using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
    ce_forward_sum<L>
        <<<1, kSumThreads, 0, stream>>>(row_loss, target, n, ignore_index, static_cast<L*>(loss));
    return cudaGetLastError();
  });
}

cudaError_t launch_fused_cross_entropy_backward(ScalarCode dt, const void* grad, const void* logits,
                                                const int64_t* target, const float* lse, int64_t n,
                                                int64_t v, int64_t ignore_index, double smoothing,
                                                int64_t* count, void* grad_logits,
                                                cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    ce_count_rows<<<1, kSumThreads, 0, stream>>>(target, n, ignore_index, count);
    ce_backward_rows<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(logits), target, lse, count, v,
        ignore_index, smoothing, static_cast<T*>(grad_logits));
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
