// The reducers and the layout shared by the reduction kernels (ops layer, CUDA backend; internal to
// reduce_kernels.cu, which runs the rows, and reduce_column_kernels.cu, which runs the columns).
// See Note [Deterministic device reductions] in block_reduce.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/cuda/loops.cuh"
#include "ops/cuda/reduce_kernels.h"

namespace loom::cuda_ops::reduce_detail {

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
  bool contiguous;  // one reduced dim of stride 1 (Note [Vector loads in reductions],
                    // reduce_kernels.cu)
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

template <class R>
__device__ __forceinline__ void finish(const Params<R>& p, int64_t m, int64_t split,
                                       const typename R::acc_t& acc) {
  if (p.splits == 1) {
    p.r.store(p.out0, p.out1, p.kept_out.get(m), acc, p.N);
  } else {
    p.partials[m * p.splits + split] = acc;
  }
}

constexpr int kOuterRows = 16;  // blockDim.y of the outer kernel; blockDim.x is 32

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

// The kernels' parameters for reducer `r` over `a` laid out by `plan`, partials in `workspace`.
template <class R>
Params<R> make_params(const R& r, const ReduceArgs& a, const ReducePlan& plan, void* workspace) {
  return Params<R>{r,
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
}

// The first pass of a reduction over columns (plan.outer; reduce_column_kernels.cu): each output's
// result, or with plan.splits > 1 its partials in `workspace`, for reduce_kernels.cu's finalize
// kernel to combine. Returns the launch's error.
cudaError_t launch_reduce_columns(const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                                  cudaStream_t stream);

}  // namespace loom::cuda_ops::reduce_detail
