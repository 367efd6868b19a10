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

// Note [Vectorised cross-entropy rows]
//   A row of logits is read as 16-byte vectors (8 bfloat16): a scalar head up to the first 16-byte
//   boundary, the vectors, a scalar tail. Each vector is folded at once: its maximum rescales the
//   running sum at most once, then its exponentials are added. Element loads of 2 bytes kept the
//   forward and backward at a quarter of the memory's bandwidth on GPT-2's 50304-wide rows.
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

struct RowSpan {
  int64_t head;     // elements before the first 16-byte boundary
  int64_t vectors;  // whole vectors after them
  int64_t tail;     // the first element after the vectors
};

template <class T>
__device__ __forceinline__ RowSpan row_span(const T* row, int64_t v) {
  const int64_t mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) % 16);
  int64_t head = mis == 0 ? 0 : (16 - mis) / static_cast<int64_t>(sizeof(T));
  if (mis % static_cast<int64_t>(sizeof(T)) != 0 || head > v) head = v;  // never aligned: scalar
  const int64_t vectors = (v - head) / kVec<T>;
  return RowSpan{head, vectors, head + vectors * kVec<T>};
}

// Folds n logits into the running (max, sum of exp, sum): the sum is rescaled at most once, to the
// largest of them; -inf adds nothing and a NaN makes the sum NaN.
template <class A, class T>
__device__ __forceinline__ void absorb(RowStats<A>& st, const T* x, int n) {
  A xs[kVec<T>];
  A mx = -INFINITY;
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e) {
    if (e < n) {
      xs[e] = convert<A>(x[e]);
      st.sx += xs[e];
      mx = xs[e] > mx ? xs[e] : mx;
    }
  }
  if (mx > st.m) {
    st.s = rescaled(st, mx);
    st.m = mx;
  }
  if (st.m == A(-INFINITY)) {
    // Nothing finite yet: only a NaN can still count.
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e)
      if (e < n && xs[e] != xs[e]) st.s += xs[e];
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec<T>; ++e)
    if (e < n) st.s += exp_of(xs[e] - st.m);
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
  const RowSpan span = row_span(row, v);
  for (int64_t c = threadIdx.x; c < span.head; c += blockDim.x) absorb<A>(st, &row[c], 1);
  // Note [Vectorised cross-entropy rows]: the body as 16-byte vectors, two in flight a thread.
  using Vec = AlignedVector<T, kVec<T>>;
  const Vec* body = reinterpret_cast<const Vec*>(row + span.head);
  int64_t j = threadIdx.x;
  for (; j + blockDim.x < span.vectors; j += 2 * blockDim.x) {
    const Vec a = body[j], b = body[j + blockDim.x];
    absorb<A>(st, a.val, kVec<T>);
    absorb<A>(st, b.val, kVec<T>);
  }
  for (; j < span.vectors; j += blockDim.x) absorb<A>(st, body[j].val, kVec<T>);
  for (int64_t c = span.tail + threadIdx.x; c < v; c += blockDim.x) absorb<A>(st, &row[c], 1);
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
  const auto grad_at = [&](T xc, int64_t c) {
    const A p = exp_of(convert<A>(xc) - li);
    const A mass = c == t ? on_target + uniform : uniform;
    return convert<T>((p - mass) * scale);
  };
  const RowSpan span = row_span(row, v);
  // Vectors only where the gradient row has the logits row's alignment (else element by element).
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == reinterpret_cast<uintptr_t>(row) % 16;
  const int64_t head = vec ? span.head : v;
  for (int64_t c = threadIdx.x; c < head; c += blockDim.x) out[c] = grad_at(row[c], c);
  if (!vec) return;
  using Vec = AlignedVector<T, kVec<T>>;
  const Vec* body = reinterpret_cast<const Vec*>(row + span.head);
  Vec* gbody = reinterpret_cast<Vec*>(out + span.head);
  for (int64_t j = threadIdx.x; j < span.vectors; j += blockDim.x) {
    const Vec a = body[j];
    Vec g;
    const int64_t c0 = span.head + j * kVec<T>;
#pragma unroll
    for (int e = 0; e < kVec<T>; ++e) g.val[e] = grad_at(a.val[e], c0 + e);
    gbody[j] = g;
  }
  for (int64_t c = span.tail + threadIdx.x; c < v; c += blockDim.x) out[c] = grad_at(row[c], c);
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
