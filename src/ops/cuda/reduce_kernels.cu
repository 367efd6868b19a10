// CUDA kernels of the reductions, dot, equal and allclose. One reducer per operator (the device
// twin of the CPU reducers in cpu/reduce_kernels.cpp), run by three kernels: `inner` (threads of a
// block row share one output; for rows, whole-tensor sums and any other layout), `outer` (each
// thread owns one output column, rows split across threadIdx.y; for reductions over a non-inner
// dim), and `finalize` (combines the partials when the reduced elements of one output are split
// across blocks). See Note [Deterministic device reductions] in block_reduce.cuh.
#include <limits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/reduce_kernels.h"

namespace loom::cuda_ops {
namespace {

template <class T>
constexpr bool is_float_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                            std::is_same_v<T, float> || std::is_same_v<T, double>;
// Float accumulation: double for double, float otherwise.
template <class T>
using facc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__device__ __forceinline__ opmath_t<T> load_value(const T* p) {
  return convert<opmath_t<T>>(*p);
}

template <class V>
__device__ __forceinline__ V nan_max(V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    return (x > a || x != x) ? x : a;
  } else {
    return x > a ? x : a;
  }
}
template <class V>
__device__ __forceinline__ V nan_min(V a, V x) {
  if constexpr (std::is_floating_point_v<V>) {
    return (x < a || x != x) ? x : a;
  } else {
    return x < a ? x : a;
  }
}

template <class Out, class V>
__device__ __forceinline__ void put(char* out, int64_t off, V v) {
  reinterpret_cast<Out*>(out)[off] = convert<Out>(v);
}

// ---- reducers: init, step (one element; its flat index in the reduced dims), combine, store ----

template <class T>
struct SumR {
  using in_t = T;
  static constexpr bool kFloat = is_float_v<T>;
  using acc_t = std::conditional_t<kFloat, facc_t<T>, int64_t>;
  using out_t = std::conditional_t<kFloat, T, int64_t>;
  bool mean = false;
  __device__ acc_t init() const { return acc_t(0); }
  __device__ acc_t step(acc_t a, opmath_t<T> x, int64_t) const { return a + static_cast<acc_t>(x); }
  __device__ acc_t combine(acc_t a, acc_t b) const { return a + b; }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t n) const {
    if constexpr (kFloat) {
      if (mean) {
        put<out_t>(o0, off, static_cast<double>(a) / static_cast<double>(n));
        return;
      }
    }
    put<out_t>(o0, off, a);
  }
};

template <class T>
struct ProdR {
  using in_t = T;
  static constexpr bool kFloat = is_float_v<T>;
  using acc_t = std::conditional_t<kFloat, opmath_t<T>, int64_t>;
  using out_t = std::conditional_t<kFloat, T, int64_t>;
  __device__ acc_t init() const { return acc_t(1); }
  __device__ acc_t step(acc_t a, opmath_t<T> x, int64_t) const { return a * static_cast<acc_t>(x); }
  __device__ acc_t combine(acc_t a, acc_t b) const { return a * b; }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t) const {
    put<out_t>(o0, off, a);
  }
};

// max / min of the values; NaN propagates.
template <class T>
struct ExtremeR {
  using in_t = T;
  using acc_t = opmath_t<T>;
  bool is_max = true;
  __device__ acc_t init() const {
    if constexpr (std::is_same_v<acc_t, bool>) {
      return !is_max;
    } else if constexpr (std::is_floating_point_v<acc_t>) {
      return is_max ? -std::numeric_limits<acc_t>::infinity()
                    : std::numeric_limits<acc_t>::infinity();
    } else {
      return is_max ? std::numeric_limits<acc_t>::lowest() : std::numeric_limits<acc_t>::max();
    }
  }
  __device__ acc_t step(acc_t a, acc_t x, int64_t) const {
    return is_max ? nan_max(a, x) : nan_min(a, x);
  }
  __device__ acc_t combine(acc_t a, acc_t b) const { return step(a, b, 0); }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t) const {
    put<T>(o0, off, a);
  }
};

// (value, index) of the max / min: NaN wins, ties take the smallest index (the CPU's rule, so the
// result does not depend on the combining order).
template <class T>
struct ArgExtremeR {
  using in_t = T;
  using v_t = opmath_t<T>;
  struct acc_t {
    v_t v;
    int64_t i;
  };
  bool is_max = true;
  __device__ bool better(v_t x, v_t a) const {
    if constexpr (std::is_floating_point_v<v_t>) {
      if (a != a) return false;
      if (x != x) return true;
    }
    return is_max ? x > a : x < a;
  }
  __device__ acc_t init() const { return {v_t(), -1}; }
  __device__ acc_t step(acc_t a, v_t x, int64_t i) const {
    return (a.i < 0 || better(x, a.v)) ? acc_t{x, i} : a;
  }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    return b.i < a.i ? b : a;
  }
  // out1 set: out0 = values, out1 = indices (max.dim); else out0 = indices (argmax).
  __device__ void store(char* o0, char* o1, int64_t off, acc_t a, int64_t) const {
    if (o1 != nullptr) {
      put<T>(o0, off, a.v);
      reinterpret_cast<int64_t*>(o1)[off] = a.i;
    } else {
      reinterpret_cast<int64_t*>(o0)[off] = a.i;
    }
  }
};

// Variance: (mean, sum of squared deviations, count), Welford per thread, Chan's formula to
// combine.
template <class T>
struct VarR {
  using in_t = T;
  using A = facc_t<T>;
  struct acc_t {
    A mean, m2;
    int64_t n;
  };
  int64_t correction = 1;
  bool take_sqrt = false;
  __device__ acc_t init() const { return {A(0), A(0), 0}; }
  __device__ acc_t step(acc_t a, opmath_t<T> xv, int64_t) const {
    const A x = static_cast<A>(xv);
    a.n += 1;
    const A d = x - a.mean;
    a.mean += d / static_cast<A>(a.n);
    a.m2 += d * (x - a.mean);
    return a;
  }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A delta = b.mean - a.mean;
    const A fb = static_cast<A>(b.n) / static_cast<A>(n);
    return {a.mean + delta * fb, a.m2 + b.m2 + delta * delta * static_cast<A>(a.n) * fb, n};
  }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t n) const {
    const double denom = static_cast<double>(n - correction > 0 ? n - correction : 0);
    const double v =
        (n == 0 ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(a.m2)) / denom;
    put<T>(o0, off, take_sqrt ? sqrt(v) : v);
  }
};

// log(sum(exp(x))) as a running (max, sum of exp(x - max)).
template <class T>
struct LogSumExpR {
  using in_t = T;
  using V = facc_t<T>;
  struct acc_t {
    V m, s;
  };
  static __device__ V inf() { return std::numeric_limits<V>::infinity(); }
  __device__ acc_t init() const { return {-inf(), V(0)}; }
  __device__ acc_t step(acc_t a, opmath_t<T> xv, int64_t) const {
    const V x = static_cast<V>(xv);
    if (x != x) return {x, x};
    if (x == -inf()) return a;
    if (x > a.m) return {x, a.s * exp(a.m - x) + V(1)};
    if (x == a.m) return {a.m, a.s + V(1)};
    return {a.m, a.s + exp(x - a.m)};
  }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (b.m == -inf()) return a;
    if (a.m == -inf()) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};
    if (a.m > b.m) return {a.m, a.s + b.s * exp(b.m - a.m)};
    return {b.m, b.s + a.s * exp(a.m - b.m)};
  }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t) const {
    put<T>(o0, off, (a.m == inf() || a.m == -inf()) ? a.m : a.m + log(a.s));
  }
};

template <class T>
struct NormR {
  using in_t = T;
  using acc_t = facc_t<T>;
  NormKind kind = NormKind::L2;
  acc_t p = 2;
  __device__ acc_t init() const {
    return kind == NormKind::NegInf ? std::numeric_limits<acc_t>::infinity() : acc_t(0);
  }
  __device__ acc_t step(acc_t a, opmath_t<T> xv, int64_t) const {
    const acc_t x = static_cast<acc_t>(xv);
    const acc_t ax = x < 0 ? -x : x;
    switch (kind) {
      case NormKind::L0:
        return a + (x != 0 ? acc_t(1) : acc_t(0));
      case NormKind::L1:
        return a + ax;
      case NormKind::L2:
        return a + x * x;
      case NormKind::P:
        return a + pow(ax, p);
      default:
        return combine(a, (x != x) ? x : ax);
    }
  }
  __device__ acc_t combine(acc_t a, acc_t b) const {
    if (kind == NormKind::Inf) return nan_max(a, b);
    if (kind == NormKind::NegInf) return nan_min(a, b);
    return a + b;
  }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t) const {
    if (kind == NormKind::L2) {
      put<T>(o0, off, sqrt(a));
    } else if (kind == NormKind::P) {
      put<T>(o0, off, pow(static_cast<double>(a), 1.0 / static_cast<double>(p)));
    } else {
      put<T>(o0, off, a);
    }
  }
};

// all / any: the result is one byte, 0 or 1 (bool, or uint8 for uint8 inputs).
template <class T>
struct AllAnyR {
  using in_t = T;
  using acc_t = bool;
  bool is_all = true;
  __device__ acc_t init() const { return is_all; }
  __device__ acc_t step(acc_t a, opmath_t<T> x, int64_t) const {
    const bool nz = x != opmath_t<T>(0);
    return is_all ? (a && nz) : (a || nz);
  }
  __device__ acc_t combine(acc_t a, acc_t b) const { return is_all ? (a && b) : (a || b); }
  __device__ void store(char* o0, char*, int64_t off, acc_t a, int64_t) const {
    reinterpret_cast<uint8_t*>(o0)[off] = a ? 1 : 0;
  }
};

// ---- layout ----

// A flat index over `ndim` dims (outermost first) to an element offset; 32-bit division by magic
// numbers when the index space fits.
struct DimCalc {
  int ndim = 0;
  bool fast32 = true;
  int64_t sizes[kMaxReduceDims] = {};
  int64_t strides[kMaxReduceDims] = {};
  IntDivider32 divs[kMaxReduceDims];

  DimCalc(int n, const int64_t* sz, const int64_t* st) : ndim(n) {
    int64_t total = 1;
    for (int d = 0; d < n; ++d) {
      sizes[d] = sz[d];
      strides[d] = st[d];
      total *= sz[d] > 0 ? sz[d] : 1;
    }
    fast32 = total < (int64_t{1} << 31);
    if (fast32) {
      for (int d = 0; d < n; ++d)
        divs[d] = IntDivider32(static_cast<uint32_t>(sz[d] > 0 ? sz[d] : 1));
    }
  }
  __device__ __forceinline__ int64_t get(int64_t i) const {
    if (ndim == 0) return 0;
    if (ndim == 1) return i * strides[0];
    int64_t off = 0;
    if (fast32) {
      uint32_t l = static_cast<uint32_t>(i);
      for (int d = ndim - 1; d >= 0; --d) {
        const uint32_t q = divs[d].div(l);
        off += static_cast<int64_t>(l - q * static_cast<uint32_t>(sizes[d])) * strides[d];
        l = q;
      }
    } else {
      int64_t l = i;
      for (int d = ndim - 1; d >= 0; --d) {
        const int64_t q = l / sizes[d];
        off += (l - q * sizes[d]) * strides[d];
        l = q;
      }
    }
    return off;
  }
};

template <class R>
struct Params {
  R r;
  DimCalc kept_in, kept_out, red;
  const typename R::in_t* in;
  char* out0;
  char* out1;
  int64_t M, N, chunk, splits;
  typename R::acc_t* partials;
  bool contiguous;  // one reduced dim of stride 1 (Note [Vector loads in reductions])
};

// Folds the reduced elements [r, r1) of one output, stepping by `step`, into four independent
// accumulators (so that four loads are in flight), combined in a fixed order.
template <class R>
__device__ __forceinline__ typename R::acc_t fold(const Params<R>& p, const typename R::in_t* base,
                                                  int64_t r, int64_t r1, int64_t step) {
  using acc_t = typename R::acc_t;
  acc_t a0 = p.r.init(), a1 = a0, a2 = a0, a3 = a0;
  for (; r + 3 * step < r1; r += 4 * step) {
    a0 = p.r.step(a0, load_value(base + p.red.get(r)), r);
    a1 = p.r.step(a1, load_value(base + p.red.get(r + step)), r + step);
    a2 = p.r.step(a2, load_value(base + p.red.get(r + 2 * step)), r + 2 * step);
    a3 = p.r.step(a3, load_value(base + p.red.get(r + 3 * step)), r + 3 * step);
  }
  for (; r < r1; r += step) a0 = p.r.step(a0, load_value(base + p.red.get(r)), r);
  return p.r.combine(p.r.combine(a0, a1), p.r.combine(a2, a3));
}

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

template <class R>
__device__ __forceinline__ void finish(const Params<R>& p, int64_t m, int64_t split,
                                       const typename R::acc_t& acc) {
  if (p.splits == 1) {
    p.r.store(p.out0, p.out1, p.kept_out.get(m), acc, p.N);
  } else {
    p.partials[m * p.splits + split] = acc;
  }
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

constexpr int kOuterRows = 16;  // blockDim.y of the outer kernel; blockDim.x is 32

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

template <class R>
cudaError_t run_reducer(const R& r, const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                        cudaStream_t stream) {
  Params<R> p{r,
              DimCalc(a.kept_ndim, a.kept_sizes, a.kept_in_strides),
              DimCalc(a.kept_ndim, a.kept_sizes, a.kept_out_strides),
              DimCalc(a.red_ndim, a.red_sizes, a.red_strides),
              reinterpret_cast<const typename R::in_t*>(a.in),
              a.out0,
              a.out1,
              a.num_outputs,
              a.reduce_size,
              plan.chunk,
              plan.splits,
              static_cast<typename R::acc_t*>(workspace),
              a.red_ndim == 1 && a.red_strides[0] == 1};
  const dim3 grid(static_cast<unsigned>(plan.blocks_x), static_cast<unsigned>(plan.splits));
  if (plan.outer && launch_outer_vec(a, plan, p, stream)) {
    // launched (Note [Vector loads in column reductions])
  } else if (plan.outer) {
    reduce_outer_kernel<R><<<grid, dim3(32, kOuterRows), 0, stream>>>(p);
  } else {
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

// Calls f(reducer) with the reducer of a.op for a.in_dtype.
template <class F>
auto with_reducer(const ReduceArgs& a, const F& f) {
  switch (a.op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      return LOOM_CUDA_DISPATCH_ALL(a.in_dtype, [&] {
        SumR<scalar_t> r;
        r.mean = a.op == ReduceOp::Mean;
        return f(r);
      });
    case ReduceOp::Prod:
      return LOOM_CUDA_DISPATCH_ALL(a.in_dtype, [&] { return f(ProdR<scalar_t>{}); });
    case ReduceOp::Max:
    case ReduceOp::Min:
      return LOOM_CUDA_DISPATCH_ALL(a.in_dtype, [&] {
        ExtremeR<scalar_t> r;
        r.is_max = a.op == ReduceOp::Max;
        return f(r);
      });
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      return LOOM_CUDA_DISPATCH_ALL(a.in_dtype, [&] {
        ArgExtremeR<scalar_t> r;
        r.is_max = a.op == ReduceOp::ArgMax;
        return f(r);
      });
    case ReduceOp::Var:
    case ReduceOp::Std:
      return LOOM_CUDA_DISPATCH_FLOAT(a.in_dtype, [&] {
        VarR<scalar_t> r;
        r.correction = a.correction;
        r.take_sqrt = a.op == ReduceOp::Std;
        return f(r);
      });
    case ReduceOp::LogSumExp:
      return LOOM_CUDA_DISPATCH_FLOAT(a.in_dtype, [&] { return f(LogSumExpR<scalar_t>{}); });
    case ReduceOp::Norm:
      return LOOM_CUDA_DISPATCH_FLOAT(a.in_dtype, [&] {
        NormR<scalar_t> r;
        r.kind = a.norm;
        r.p = static_cast<typename NormR<scalar_t>::acc_t>(a.p);
        return f(r);
      });
    case ReduceOp::All:
    case ReduceOp::Any:
      return LOOM_CUDA_DISPATCH_ALL(a.in_dtype, [&] {
        AllAnyR<scalar_t> r;
        r.is_all = a.op == ReduceOp::All;
        return f(r);
      });
  }
  return decltype(f(SumR<float>{}))();
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
