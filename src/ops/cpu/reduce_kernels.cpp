// CPU kernels of the reductions: one reducer per operator (the interface is in
// src/ops/reduce_engine.h), run by the reduction engine into outputs the shape functions sized.
#include <cmath>
#include <limits>

#include "ops/op_call.h"
#include "ops/reduce_engine.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using reduce::load;

template <class T>
using compute_t = decltype(load(T{}));  // float for 16-bit floats, T otherwise
template <class T>
constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

// Sums accumulate in double for floating types (see Note [Accurate float sums]) and in int64 for
// integers and bool, whose sums are int64 as in PyTorch.
template <class T>
using sum_acc_t = std::conditional_t<is_float_v<T>, double, int64_t>;
template <class T>
using sum_out_t = std::conditional_t<is_float_v<T>, T, int64_t>;

template <class Out, class V>
inline void put(void* const* outs, int64_t off, V v, int k = 0) {
  static_cast<Out*>(outs[k])[off] = convert<Out>(v);
}

// n values folded into 16 independent lanes (vectorisable), then combined.
template <class A, class T, class F>
inline A lane_sum(const T* x, int64_t n, F f) {
  constexpr int kLanes = 16;
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) lanes[j] += f(load(x[i + j]));
  }
  for (int j = 0; i + j < n; ++j) lanes[j] += f(load(x[i + j]));
  A s = 0;
  for (int j = 0; j < kLanes; ++j) s += lanes[j];
  return s;
}

// ---- reducers (see reduce_engine.h for the interface) ----

template <class T>
struct SumR {
  using in_t = T;
  using acc_t = sum_acc_t<T>;
  static constexpr bool kIndexed = false;
  static acc_t init() { return 0; }
  static acc_t step(acc_t a, compute_t<T> x) { return a + static_cast<acc_t>(x); }
  static acc_t combine(acc_t a, acc_t b) { return a + b; }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) {
    put<sum_out_t<T>>(outs, off, a);
  }
};
struct SumF32 : SumR<float> {
  static double reduce_contig(const float* x, int64_t n, int64_t) {
    return reduce::sum_contig_f32(x, n);
  }
  static void accumulate_rows(double* acc, const float* x, int64_t rows, int64_t stride,
                              int64_t width, int64_t) {
    reduce::sum_rows_f32(acc, x, rows, stride, width);
  }
};
template <class T>
struct SumFor {
  using type = SumR<T>;
};
template <>
struct SumFor<float> {
  using type = SumF32;
};

template <class Base>
struct MeanR : Base {
  static void store(void* const* outs, int64_t off, typename Base::acc_t a, int64_t n) {
    put<typename Base::in_t>(outs, off, static_cast<double>(a) / static_cast<double>(n));
  }
};

template <class T>
struct ProdR {
  using in_t = T;
  using acc_t = std::conditional_t<is_float_v<T>, compute_t<T>, int64_t>;
  static constexpr bool kIndexed = false;
  static acc_t init() { return 1; }
  static acc_t step(acc_t a, compute_t<T> x) { return a * static_cast<acc_t>(x); }
  static acc_t combine(acc_t a, acc_t b) { return a * b; }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) {
    put<sum_out_t<T>>(outs, off, a);
  }
};
template <class T>
struct ProdFor {
  using type = ProdR<T>;
};

// max/min of values; NaN wins (it propagates).
template <class T, bool kMax>
struct ExtremeR {
  using in_t = T;
  using acc_t = compute_t<T>;
  static constexpr bool kIndexed = false;
  static acc_t init() {
    if constexpr (std::is_same_v<acc_t, bool>) {
      return !kMax;
    } else if constexpr (std::is_floating_point_v<acc_t>) {
      return kMax ? -std::numeric_limits<acc_t>::infinity()
                  : std::numeric_limits<acc_t>::infinity();
    } else {
      return kMax ? std::numeric_limits<acc_t>::lowest() : std::numeric_limits<acc_t>::max();
    }
  }
  static acc_t step(acc_t a, acc_t x) {
    if constexpr (std::is_floating_point_v<acc_t>) {
      return ((kMax ? x > a : x < a) || x != x) ? x : a;
    } else {
      return (kMax ? x > a : x < a) ? x : a;
    }
  }
  static acc_t combine(acc_t a, acc_t b) { return step(a, b); }
  static acc_t reduce_contig(const T* x, int64_t n, int64_t) requires std::is_same_v<T, float> {
    return kMax ? reduce::max_contig_f32(x, n) : reduce::min_contig_f32(x, n);
  }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) { put<T>(outs, off, a); }
};

// (value, index) of the max/min along the reduced dims: NaN wins, ties pick the first index.
// kValues: outs = {values, indices}; else outs = {indices}.
template <class T, bool kMax, bool kValues>
struct ArgExtremeR {
  using in_t = T;
  using v_t = compute_t<T>;
  struct acc_t {
    v_t v;
    int64_t i;
  };
  static constexpr bool kIndexed = true;
  static acc_t init() { return {v_t(), -1}; }
  static bool better(v_t x, v_t a) {
    if constexpr (std::is_floating_point_v<v_t>) {
      if (a != a) return false;
      if (x != x) return true;
    }
    return kMax ? x > a : x < a;
  }
  static acc_t step(acc_t a, v_t x, int64_t i) {
    return (a.i < 0 || better(x, a.v)) ? acc_t{x, i} : a;
  }
  static acc_t combine(acc_t a, acc_t b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    return b.i < a.i ? b : a;
  }
  // The extreme value with vectorised lanes, then the first element equal to it (or first NaN).
  static acc_t reduce_contig(const T* x, int64_t n, int64_t index0) {
    if (n == 0) return init();
    using Ext = ExtremeR<T, kMax>;
    v_t best = reduce::detail::reduce_contig(Ext{}, x, n, 0);
    const bool find_nan = best != best;
    constexpr int64_t kBlock = 64;
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t i1 = std::min(n, i0 + kBlock);
      bool hit = false;
      for (int64_t i = i0; i < i1; ++i) {
        const v_t v = load(x[i]);
        hit |= find_nan ? v != v : v == best;
      }
      if (!hit) continue;
      for (int64_t i = i0; i < i1; ++i) {
        const v_t v = load(x[i]);
        if (find_nan ? v != v : v == best) return {v, index0 + i};
      }
    }
    return {best, index0};  // not reached
  }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) {
    if constexpr (kValues) {
      put<T>(outs, off, a.v);
      static_cast<int64_t*>(outs[1])[off] = a.i;
    } else {
      static_cast<int64_t*>(outs[0])[off] = a.i;
    }
  }
};

// Variance: count, mean and sum of squared deviations, combined with Chan's formula. Runs are
// reduced two-pass per block (mean, then squared deviations) so that both passes vectorise and the
// second reads from cache.
struct Welford {
  double mean, m2;
  int64_t n;
};
inline Welford chan(const Welford& a, const Welford& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  const int64_t n = a.n + b.n;
  const double delta = b.mean - a.mean;
  const double fb = static_cast<double>(b.n) / static_cast<double>(n);
  return {a.mean + delta * fb, a.m2 + b.m2 + delta * delta * static_cast<double>(a.n) * fb, n};
}

template <class T, bool kStd>
struct VarR {
  using in_t = T;
  using acc_t = Welford;
  static constexpr bool kIndexed = false;
  int64_t correction = 1;
  static acc_t init() { return {0, 0, 0}; }
  static acc_t step(acc_t a, double x) {
    a.n += 1;
    const double d = x - a.mean;
    a.mean += d / static_cast<double>(a.n);
    a.m2 += d * (x - a.mean);
    return a;
  }
  static acc_t combine(acc_t a, acc_t b) { return chan(a, b); }
  static acc_t reduce_contig(const T* x, int64_t n, int64_t) {
    constexpr int64_t kBlock = 2048;
    Welford acc = init();
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = std::min(kBlock, n - i);
      const double mean =
          lane_sum<double>(x + i, len, [](auto v) { return static_cast<double>(v); }) /
          static_cast<double>(len);
      const double m2 = lane_sum<double>(x + i, len, [mean](auto v) {
        const double d = static_cast<double>(v) - mean;
        return d * d;
      });
      acc = chan(acc, Welford{mean, m2, len});
    }
    return acc;
  }
  static void accumulate_rows(acc_t* acc, const T* x, int64_t rows, int64_t stride, int64_t width,
                              int64_t) {
    constexpr int64_t kRows = 64;
    double mean[reduce::detail::kTile], m2[reduce::detail::kTile];
    LOOM_INTERNAL_ASSERT(width <= reduce::detail::kTile);
    for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const int64_t r1 = std::min(rows, r0 + kRows);
      for (int64_t b = 0; b < width; ++b) mean[b] = m2[b] = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < width; ++b) mean[b] += static_cast<double>(load(x[r * stride + b]));
      }
      const double inv = 1.0 / static_cast<double>(r1 - r0);
      for (int64_t b = 0; b < width; ++b) mean[b] *= inv;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < width; ++b) {
          const double d = static_cast<double>(load(x[r * stride + b])) - mean[b];
          m2[b] += d * d;
        }
      }
      for (int64_t b = 0; b < width; ++b) acc[b] = chan(acc[b], Welford{mean[b], m2[b], r1 - r0});
    }
  }
  void store(void* const* outs, int64_t off, acc_t a, int64_t n) const {
    const double denom = static_cast<double>(std::max<int64_t>(0, n - correction));
    const double v = (n == 0 ? std::numeric_limits<double>::quiet_NaN() : a.m2) / denom;
    put<T>(outs, off, kStd ? std::sqrt(v) : v);
  }
};

// log(sum(exp(x))) as a running (max, sum of exp(x - max)) pair, so nothing overflows.
template <class T>
struct LogSumExpR {
  using in_t = T;
  using v_t = compute_t<T>;
  struct acc_t {
    v_t m, s;
  };
  static constexpr bool kIndexed = false;
  static constexpr v_t kInf = std::numeric_limits<v_t>::infinity();
  static v_t exp_of(v_t v) {
    if constexpr (std::is_same_v<v_t, float>) {
      return reduce::exp_f32(v);
    } else {
      return std::exp(v);
    }
  }
  static acc_t init() { return {-kInf, 0}; }
  static acc_t step(acc_t a, v_t x) {
    if (x != x) return {x, x};
    if (x == -kInf) return a;
    if (x > a.m) return {x, a.s * exp_of(a.m - x) + 1};
    if (x == a.m) return {a.m, a.s + 1};
    return {a.m, a.s + exp_of(x - a.m)};
  }
  static acc_t combine(acc_t a, acc_t b) {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (b.m == -kInf) return a;
    if (a.m == -kInf) return b;
    if (a.m == b.m) return {a.m, a.s + b.s};
    if (a.m > b.m) return {a.m, a.s + b.s * exp_of(b.m - a.m)};
    return {b.m, b.s + a.s * exp_of(a.m - b.m)};
  }
  static acc_t reduce_contig(const T* x, int64_t n, int64_t) {
    constexpr int64_t kBlock = 1024;
    acc_t acc = init();
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = std::min(kBlock, n - i);
      const v_t m = reduce::detail::reduce_contig(ExtremeR<T, true>{}, x + i, len, 0);
      acc_t block;
      if (m != m || m == -kInf) {
        block = {m, m != m ? m : v_t(0)};
      } else if (m == kInf) {
        block = {m, 1};
      } else if constexpr (std::is_same_v<T, float>) {
        block = {m, static_cast<float>(reduce::sum_exp_f32(x + i, len, m, nullptr))};
      } else {
        block = {m, lane_sum<v_t>(x + i, len, [m](v_t v) { return exp_of(v - m); })};
      }
      acc = combine(acc, block);
    }
    return acc;
  }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) {
    put<T>(outs, off, a.m == kInf || a.m == -kInf ? a.m : a.m + std::log(a.s));
  }
};

enum class NormKind { L0, L1, L2, Inf, NegInf, P };

template <class T, NormKind K>
struct NormR {
  using in_t = T;
  using v_t = compute_t<T>;
  static constexpr bool kExtreme = K == NormKind::Inf || K == NormKind::NegInf;
  using acc_t = std::conditional_t<kExtreme, v_t, double>;
  static constexpr bool kIndexed = false;
  double p = 2;
  static acc_t init() { return K == NormKind::NegInf ? std::numeric_limits<acc_t>::infinity() : 0; }
  acc_t step(acc_t a, v_t x) const {
    const v_t ax = std::abs(x);
    if constexpr (K == NormKind::L0) {
      return a + (x != 0 ? 1.0 : 0.0);
    } else if constexpr (K == NormKind::L1) {
      return a + static_cast<double>(ax);
    } else if constexpr (K == NormKind::L2) {
      return a + static_cast<double>(x) * static_cast<double>(x);
    } else if constexpr (K == NormKind::P) {
      return a + std::pow(static_cast<double>(ax), p);
    } else {
      return combine(a, ax);
    }
  }
  static acc_t combine(acc_t a, acc_t b) {
    if constexpr (K == NormKind::Inf) {
      return (b > a || b != b) ? b : a;
    } else if constexpr (K == NormKind::NegInf) {
      return (b < a || b != b) ? b : a;
    } else {
      return a + b;
    }
  }
  void store(void* const* outs, int64_t off, acc_t a, int64_t) const {
    if constexpr (K == NormKind::L2) {
      put<T>(outs, off, std::sqrt(a));
    } else if constexpr (K == NormKind::P) {
      put<T>(outs, off, std::pow(a, 1.0 / p));
    } else {
      put<T>(outs, off, a);
    }
  }
};
struct NormL2F32 : NormR<float, NormKind::L2> {
  static double reduce_contig(const float* x, int64_t n, int64_t) {
    return reduce::sum_squares_contig_f32(x, n);
  }
};

template <class T, bool kAll>
struct AllAnyR {
  using in_t = T;
  using acc_t = bool;
  static constexpr bool kIndexed = false;
  static acc_t init() { return kAll; }
  static acc_t step(acc_t a, compute_t<T> x) { return kAll ? (a && x != 0) : (a || x != 0); }
  static acc_t combine(acc_t a, acc_t b) { return kAll ? (a && b) : (a || b); }
  static void store(void* const* outs, int64_t off, acc_t a, int64_t) { put<bool>(outs, off, a); }
};

// ---- CPU loops: outputs are sized by the shape functions ----

Tensor cast_to(const Tensor& t, std::optional<DType> dtype) {
  return dtype && *dtype != t.dtype() ? t.to(*dtype) : t;
}

// Where a loop that accumulates in `acc` writes for the result `out`: out itself, or a temporary
// that finish_acc then casts into out.
Tensor acc_target(const Tensor& out, DType acc) {
  return out.dtype() == acc ? out : empty_tensor(out.sizes(), acc, kCPU);
}
void finish_acc(const Tensor& out, const Tensor& acc) {
  if (acc.impl() != out.impl()) out.copy_(acc);
}

template <template <class> class RFor, bool kMean>
void sum_like_loop(const char* op, const Tensor& out, const Tensor& self,
                   std::optional<IntArrayRef> dim, std::optional<DType> dtype) {
  auto mask = reduce::make_mask(op, self, dim);
  Tensor in = cast_to(self, dtype);
  const Tensor acc = acc_target(out, reduce::sum_acc_dtype(in.dtype()));
  LOOM_DISPATCH_ALL_TYPES(in.dtype(), op, [&] {
    using R = typename RFor<scalar_t>::type;
    if constexpr (kMean) {
      if constexpr (is_float_v<scalar_t>) reduce::run(MeanR<R>{}, in, mask, acc);
    } else {
      reduce::run(R{}, in, mask, acc);
    }
  });
  finish_acc(out, acc);
}

void sum_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
              std::optional<DType> dtype) {
  sum_like_loop<SumFor, false>("sum", out, self, dim, dtype);
}
void prod_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
               std::optional<DType> dtype) {
  sum_like_loop<ProdFor, false>("prod", out, self, dim, dtype);
}
void mean_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
               std::optional<DType> dtype) {
  sum_like_loop<SumFor, true>("mean", out, self, dim, dtype);
}

template <bool kMax>
void extreme_loop(const char* op, const Tensor& out, const Tensor& self,
                  std::optional<IntArrayRef> dim) {
  auto mask = reduce::make_mask(op, self, dim);
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op,
                          [&] { reduce::run(ExtremeR<scalar_t, kMax>{}, self, mask, out); });
}
void amax_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  extreme_loop<true>("amax", out, self, dim);
}
void amin_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  extreme_loop<false>("amin", out, self, dim);
}
template <bool kMax>
void extreme_all_loop(const Tensor& out, const Tensor& self) {
  extreme_loop<kMax>(kMax ? "max" : "min", out, self, std::nullopt);
}
template <bool kMax>
void extreme_dim_loop(const std::array<Tensor, 2>& outs, const Tensor& self, int64_t dim, bool) {
  const char* op = kMax ? "max" : "min";
  auto mask = reduce::make_mask_one(op, self, dim);
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] {
    reduce::run(ArgExtremeR<scalar_t, kMax, true>{}, self, mask, outs[0], outs[1]);
  });
}
template <bool kMax>
void arg_extreme_loop(const Tensor& out, const Tensor& self, std::optional<int64_t> dim, bool) {
  const char* op = kMax ? "argmax" : "argmin";
  const std::vector<bool> mask =
      dim ? reduce::make_mask_one(op, self, *dim) : reduce::make_mask(op, self, std::nullopt);
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] {
    reduce::run(ArgExtremeR<scalar_t, kMax, false>{}, self, mask, out);
  });
}
template <bool kStd>
void var_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim,
              int64_t correction, bool) {
  const char* op = kStd ? "std" : "var";
  auto mask = reduce::make_mask(op, self, dim);
  LOOM_DISPATCH_FLOAT_TYPES(self.dtype(), op, [&] {
    VarR<scalar_t, kStd> r;
    r.correction = correction;
    reduce::run(r, self, mask, out);
  });
}
void logsumexp_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  auto mask = reduce::make_mask("logsumexp", self, dim);
  const Tensor in = is_floating(self.dtype()) ? self : self.to(default_dtype());
  LOOM_DISPATCH_FLOAT_TYPES(in.dtype(), "logsumexp",
                            [&] { reduce::run(LogSumExpR<scalar_t>{}, in, mask, out); });
}
void norm_loop(const Tensor& out, const Tensor& self, const Scalar& p,
               std::optional<IntArrayRef> dim, bool) {
  auto mask = reduce::make_mask("norm", self, dim);
  const double pv = p.to<double>();
  LOOM_DISPATCH_FLOAT_TYPES(self.dtype(), "norm", [&] {
    using T = scalar_t;
    if (pv == 2.0) {
      if constexpr (std::is_same_v<T, float>) {
        reduce::run(NormL2F32{}, self, mask, out);
      } else {
        reduce::run(NormR<T, NormKind::L2>{}, self, mask, out);
      }
    } else if (pv == 1.0) {
      reduce::run(NormR<T, NormKind::L1>{}, self, mask, out);
    } else if (pv == 0.0) {
      reduce::run(NormR<T, NormKind::L0>{}, self, mask, out);
    } else if (std::isinf(pv)) {
      if (pv > 0) {
        reduce::run(NormR<T, NormKind::Inf>{}, self, mask, out);
      } else {
        reduce::run(NormR<T, NormKind::NegInf>{}, self, mask, out);
      }
    } else {
      NormR<T, NormKind::P> r;
      r.p = pv;
      reduce::run(r, self, mask, out);
    }
  });
}

template <bool kAll>
void all_any_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool) {
  const char* op = kAll ? "all" : "any";
  auto mask = reduce::make_mask(op, self, dim);
  const Tensor acc = acc_target(out, kBool);
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op,
                          [&] { reduce::run(AllAnyR<scalar_t, kAll>{}, self, mask, acc); });
  finish_acc(out, acc);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&sum_shape, &sum_loop>::register_cpu(m, "sum");
  Structured<&mean_shape, &mean_loop>::register_cpu(m, "mean");
  Structured<&prod_shape, &prod_loop>::register_cpu(m, "prod");
  Structured<&amax_shape, &amax_loop>::register_cpu(m, "amax");
  Structured<&amin_shape, &amin_loop>::register_cpu(m, "amin");
  Structured<&extreme_all_shape<true>, &extreme_all_loop<true>>::register_cpu(m, "max");
  Structured<&extreme_all_shape<false>, &extreme_all_loop<false>>::register_cpu(m, "min");
  Structured<&extreme_dim_shape<true>, &extreme_dim_loop<true>>::register_cpu(m, "max.dim");
  Structured<&extreme_dim_shape<false>, &extreme_dim_loop<false>>::register_cpu(m, "min.dim");
  Structured<&arg_extreme_shape<true>, &arg_extreme_loop<true>>::register_cpu(m, "argmax");
  Structured<&arg_extreme_shape<false>, &arg_extreme_loop<false>>::register_cpu(m, "argmin");
  Structured<&var_shape<false>, &var_loop<false>>::register_cpu(m, "var");
  Structured<&var_shape<true>, &var_loop<true>>::register_cpu(m, "std");
  Structured<&logsumexp_shape, &logsumexp_loop>::register_cpu(m, "logsumexp");
  Structured<&norm_shape, &norm_loop>::register_cpu(m, "norm");
  Structured<&all_any_shape<true>, &all_any_loop<true>>::register_cpu(m, "all");
  Structured<&all_any_shape<false>, &all_any_loop<false>>::register_cpu(m, "any");
}

}  // namespace loom
