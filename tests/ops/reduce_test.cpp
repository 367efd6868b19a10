// Reductions and softmax: table entries against float64 references, plus edge cases (empty dims,
// NaN, ties), dtype rules, errors, accuracy of long float sums and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "loom/parallel.h"
#include "ops/op_table.h"

namespace loom::testing {
namespace {

using Values = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref_sum(const Values& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}
double ref_mean(const Values& v) {
  return v.empty() ? kNaN : ref_sum(v) / double(v.size());
}
double ref_prod(const Values& v) {
  double p = 1;
  for (double x : v) p *= x;
  return p;
}
double ref_max(const Values& v) {
  return *std::max_element(v.begin(), v.end());
}
double ref_min(const Values& v) {
  return *std::min_element(v.begin(), v.end());
}
double ref_argmax(const Values& v) {
  return double(std::max_element(v.begin(), v.end()) - v.begin());
}
double ref_argmin(const Values& v) {
  return double(std::min_element(v.begin(), v.end()) - v.begin());
}
double ref_var(const Values& v, int64_t correction) {
  const double m = ref_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(std::max<int64_t>(0, int64_t(v.size()) - correction));
}
double ref_lse(const Values& v) {
  const double m = ref_max(v);
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
double ref_norm(const Values& v, double p) {
  if (std::isinf(p)) {
    double r = p > 0 ? 0 : kInf;
    for (double x : v) r = p > 0 ? std::max(r, std::abs(x)) : std::min(r, std::abs(x));
    return r;
  }
  double s = 0;
  for (double x : v) s += p == 0 ? double(x != 0) : std::pow(std::abs(x), p);
  return p == 0 ? s : std::pow(s, 1 / p);
}

// A reduction case: op(x) against ref_reduce(x, dims, keepdim, f).
OpCase reduce_case(const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> dims,
                   bool keepdim, std::function<Tensor(const Tensor&)> op,
                   std::function<double(const Values&)> f,
                   std::vector<DType> dtypes = {kFloat32, kFloat64}) {
  OpCase c;
  c.name = name;
  c.shapes = {std::move(shape)};
  c.dtypes = std::move(dtypes);
  c.run = [op](const std::vector<Tensor>& in) { return one(op(in[0])); };
  c.ref = [dims, keepdim, f](const std::vector<Ref>& in) {
    return one(ref_reduce(in[0], dims, keepdim, f));
  };
  return c;
}

// softmax / log_softmax along `dim` of a Ref.
Ref ref_softmax(const Ref& a, int64_t dim, bool log) {
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  Ref r = a;
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto c = a.coords(i);
    double m = -kInf, s = 0;
    for (int64_t k = 0; k < a.shape[size_t(d)]; ++k) {
      c[size_t(d)] = k;
      m = std::max(m, a.at(c));
    }
    for (int64_t k = 0; k < a.shape[size_t(d)]; ++k) {
      c[size_t(d)] = k;
      s += std::exp(a.at(c) - m);
    }
    const double x = a.v[size_t(i)];
    r.v[size_t(i)] = log ? x - m - std::log(s) : std::exp(x - m) / s;
  }
  return r;
}

OpCase softmax_case(const std::string& name, std::vector<int64_t> shape, int64_t dim, bool log,
                    std::vector<DType> dtypes = {kFloat32, kFloat64}) {
  OpCase c;
  c.name = name;
  c.shapes = {std::move(shape)};
  c.dtypes = std::move(dtypes);
  c.lo = -5;
  c.hi = 5;
  c.run = [dim, log](const std::vector<Tensor>& in) {
    return one(log ? log_softmax(in[0], dim) : softmax(in[0], dim));
  };
  c.ref = [dim, log](const std::vector<Ref>& in) { return one(ref_softmax(in[0], dim, log)); };
  return c;
}

// max/min along a dim: (values, indices), indices compared exactly.
OpCase max_dim_case(const std::string& name, std::vector<int64_t> shape, int64_t dim, bool keepdim,
                    bool is_max, std::vector<DType> dtypes = {kFloat32, kFloat64}) {
  OpCase c;
  c.name = name;
  c.shapes = {std::move(shape)};
  c.dtypes = std::move(dtypes);
  c.exact_outputs = {1};
  c.run = [dim, keepdim, is_max](const std::vector<Tensor>& in) {
    auto [v, i] = is_max ? max(in[0], dim, keepdim) : min(in[0], dim, keepdim);
    return std::vector<Tensor>{v, i};
  };
  c.ref = [dim, keepdim, is_max](const std::vector<Ref>& in) {
    return std::vector<Ref>{ref_reduce(in[0], {dim}, keepdim, is_max ? ref_max : ref_min),
                            ref_reduce(in[0], {dim}, keepdim, is_max ? ref_argmax : ref_argmin)};
  };
  return c;
}

const std::vector<DType> kInts = {kInt32, kInt64, kInt8};
const std::vector<DType> kHalfs = {kFloat16, kBFloat16};

OpCase with_range(OpCase c, double lo, double hi, bool integer = false) {
  c.lo = lo;
  c.hi = hi;
  c.integer_values = integer;
  return c;
}
OpCase exact(OpCase c) {
  c.exact_outputs = {0};
  return c;
}

const RegisterOpCases kReduceCases({
    reduce_case(
        "sum/all", {3, 4, 5}, {}, false, [](const Tensor& x) { return sum(x); }, ref_sum),
    reduce_case(
        "sum/dim1", {3, 4, 5}, {1}, false, [](const Tensor& x) { return sum(x, IntArrayRef{1}); },
        ref_sum),
    reduce_case(
        "sum/dims02_keepdim", {3, 4, 5}, {0, 2}, true,
        [](const Tensor& x) {
          return sum(x, IntArrayRef{0, 2}, true);
        },
        ref_sum),
    reduce_case(
        "sum/negative_dim", {3, 4, 5}, {-1}, false,
        [](const Tensor& x) { return sum(x, IntArrayRef{-1}); }, ref_sum),
    reduce_case(
        "sum/columns", {67, 33}, {0}, false, [](const Tensor& x) { return sum(x, IntArrayRef{0}); },
        ref_sum),
    reduce_case(
        "sum/rows", {33, 1029}, {1}, false, [](const Tensor& x) { return sum(x, IntArrayRef{1}); },
        ref_sum),
    reduce_case(
        "sum/wide_columns", {5, 1500}, {0}, true,
        [](const Tensor& x) { return sum(x, IntArrayRef{0}, true); }, ref_sum),
    reduce_case(
        "sum/long_rows_split", {2, 140000}, {1}, false,
        [](const Tensor& x) { return sum(x, IntArrayRef{1}); }, ref_sum),
    reduce_case(
        "sum/many_rows_split", {40000, 3}, {0}, false,
        [](const Tensor& x) { return sum(x, IntArrayRef{0}); }, ref_sum),
    reduce_case(
        "sum/half", {6, 37}, {1}, false, [](const Tensor& x) { return sum(x, IntArrayRef{1}); },
        ref_sum, kHalfs),
    exact(reduce_case(
        "sum/int", {4, 6}, {0}, false, [](const Tensor& x) { return sum(x, IntArrayRef{0}); },
        ref_sum, kInts)),
    exact(reduce_case("sum/int_all", {4, 6}, {}, false, [](const Tensor& x) { return sum(x); },
                      ref_sum, {kInt32, kBool, kUInt8})),
    reduce_case("sum/dtype_float64", {4, 6}, {1}, false,
                [](const Tensor& x) { return sum(x, IntArrayRef{1}, false, kFloat64); }, ref_sum,
                {kFloat32, kFloat16, kInt32}),
    reduce_case(
        "mean/all", {3, 4, 5}, {}, false, [](const Tensor& x) { return mean(x); }, ref_mean),
    reduce_case(
        "mean/dims02_keepdim", {3, 4, 5}, {0, 2}, true,
        [](const Tensor& x) {
          return mean(x, IntArrayRef{0, 2}, true);
        },
        ref_mean),
    reduce_case(
        "mean/half", {4, 40}, {-1}, false, [](const Tensor& x) { return mean(x, IntArrayRef{-1}); },
        ref_mean, kHalfs),
    reduce_case(
        "mean/int_with_dtype", {4, 6}, {0}, false,
        [](const Tensor& x) { return mean(x, IntArrayRef{0}, false, kFloat64); }, ref_mean, kInts),
    with_range(reduce_case(
                   "prod/dim1", {3, 7}, {1}, false,
                   [](const Tensor& x) { return prod(x, IntArrayRef{1}); }, ref_prod),
               0.5, 1.5),
    with_range(reduce_case(
                   "prod/all_keepdim", {2, 3, 2}, {}, true,
                   [](const Tensor& x) { return prod(x, std::nullopt, true); }, ref_prod),
               0.5, 1.5),
    exact(with_range(reduce_case(
                         "prod/int", {3, 5}, {1}, false,
                         [](const Tensor& x) { return prod(x, IntArrayRef{1}); }, ref_prod, kInts),
                     -3, 3)),
    reduce_case(
        "amax/dim1", {3, 4, 5}, {1}, false, [](const Tensor& x) { return amax(x, {1}); }, ref_max),
    reduce_case(
        "amax/dims02_keepdim", {3, 4, 5}, {0, 2}, true,
        [](const Tensor& x) {
          return amax(x, {0, 2}, true);
        },
        ref_max),
    reduce_case(
        "amin/columns", {40, 9}, {0}, false, [](const Tensor& x) { return amin(x, {0}); }, ref_min),
    exact(reduce_case(
        "amax/int", {5, 6}, {1}, false, [](const Tensor& x) { return amax(x, {1}); }, ref_max,
        kInts)),
    reduce_case(
        "amin/half", {5, 40}, {1}, false, [](const Tensor& x) { return amin(x, {1}); }, ref_min,
        kHalfs),
    reduce_case(
        "max/all", {7, 9}, {}, false, [](const Tensor& x) { return max(x); }, ref_max),
    reduce_case(
        "min/all", {7, 9}, {}, false, [](const Tensor& x) { return min(x); }, ref_min),
    max_dim_case("max/dim1", {6, 11}, 1, false, true),
    max_dim_case("max/dim0_keepdim", {6, 11}, 0, true, true),
    max_dim_case("min/dim_negative", {4, 5, 6}, -2, false, false),
    // Integer values in [-2, 2]: many ties, which must pick the first index.
    with_range(max_dim_case("max/ties", {6, 20}, 1, false, true, {kFloat32, kInt32}), -2, 2, true),
    with_range(max_dim_case("min/ties_columns", {20, 6}, 0, false, false, {kFloat64, kInt64}), -2,
               2, true),
    exact(reduce_case(
        "argmax/dim1", {6, 13}, {1}, false, [](const Tensor& x) { return argmax(x, 1); },
        ref_argmax)),
    exact(reduce_case(
        "argmax/all", {6, 13}, {}, false, [](const Tensor& x) { return argmax(x); }, ref_argmax)),
    exact(reduce_case(
        "argmax/all_keepdim", {3, 4}, {}, true,
        [](const Tensor& x) { return argmax(x, std::nullopt, true); }, ref_argmax)),
    exact(reduce_case(
        "argmin/dim0_keepdim", {6, 13}, {0}, true,
        [](const Tensor& x) { return argmin(x, 0, true); }, ref_argmin)),
    exact(with_range(reduce_case("argmax/ties", {5, 30}, {1}, false,
                                 [](const Tensor& x) { return argmax(x, -1); }, ref_argmax,
                                 {kFloat32, kInt32, kFloat16}),
                     -2, 2, true)),
    exact(reduce_case(
        "argmax/half", {5, 300}, {1}, false, [](const Tensor& x) { return argmax(x, 1); },
        ref_argmax, kHalfs)),
    reduce_case(
        "var/all", {4, 5, 6}, {}, false, [](const Tensor& x) { return var(x); },
        [](const Values& v) { return ref_var(v, 1); }),
    reduce_case(
        "var/dim1_correction0", {4, 5, 6}, {1}, false,
        [](const Tensor& x) { return var(x, IntArrayRef{1}, 0); },
        [](const Values& v) { return ref_var(v, 0); }),
    reduce_case(
        "var/columns", {300, 7}, {0}, true,
        [](const Tensor& x) { return var(x, IntArrayRef{0}, 1, true); },
        [](const Values& v) { return ref_var(v, 1); }),
    reduce_case(
        "var/long_rows", {3, 5000}, {1}, false,
        [](const Tensor& x) { return var(x, IntArrayRef{1}); },
        [](const Values& v) { return ref_var(v, 1); }),
    reduce_case(
        "std/dims02", {4, 5, 6}, {0, 2}, false,
        [](const Tensor& x) {
          return loom::std(x, IntArrayRef{0, 2});
        },
        [](const Values& v) { return std::sqrt(ref_var(v, 1)); }),
    reduce_case(
        "std/half", {4, 50}, {1}, false,
        [](const Tensor& x) { return loom::std(x, IntArrayRef{1}); },
        [](const Values& v) { return std::sqrt(ref_var(v, 1)); }, kHalfs),
    reduce_case(
        "logsumexp/dim1", {3, 4, 5}, {1}, false, [](const Tensor& x) { return logsumexp(x, {1}); },
        ref_lse),
    reduce_case(
        "logsumexp/dims02_keepdim", {3, 4, 5}, {0, 2}, true,
        [](const Tensor& x) { return logsumexp(x, {0, 2}, true); }, ref_lse),
    with_range(reduce_case(
                   "logsumexp/long", {2, 3000}, {1}, false,
                   [](const Tensor& x) { return logsumexp(x, {1}); }, ref_lse),
               -50, 50),
    reduce_case(
        "logsumexp/columns", {50, 8}, {0}, false, [](const Tensor& x) { return logsumexp(x, {0}); },
        ref_lse),
    reduce_case(
        "norm/2", {4, 9}, {1}, false, [](const Tensor& x) { return norm(x, 2, IntArrayRef{1}); },
        [](const Values& v) { return ref_norm(v, 2); }),
    reduce_case(
        "norm/2_all", {4, 9}, {}, false, [](const Tensor& x) { return norm(x); },
        [](const Values& v) { return ref_norm(v, 2); }),
    reduce_case(
        "norm/1", {4, 9}, {0}, true,
        [](const Tensor& x) { return norm(x, 1, IntArrayRef{0}, true); },
        [](const Values& v) { return ref_norm(v, 1); }),
    reduce_case(
        "norm/inf", {4, 9}, {1}, false,
        [](const Tensor& x) { return norm(x, kInf, IntArrayRef{1}); },
        [](const Values& v) { return ref_norm(v, kInf); }),
    reduce_case(
        "norm/neg_inf", {4, 9}, {1}, false,
        [](const Tensor& x) { return norm(x, -kInf, IntArrayRef{1}); },
        [](const Values& v) { return ref_norm(v, -kInf); }),
    with_range(reduce_case(
                   "norm/0", {4, 9}, {1}, false,
                   [](const Tensor& x) { return norm(x, 0, IntArrayRef{1}); },
                   [](const Values& v) { return ref_norm(v, 0); }),
               -1, 1, true),
    reduce_case(
        "norm/3", {4, 9}, {1}, false, [](const Tensor& x) { return norm(x, 3, IntArrayRef{1}); },
        [](const Values& v) { return ref_norm(v, 3); }),
    reduce_case(
        "norm/half", {4, 30}, {1}, false,
        [](const Tensor& x) { return norm(x, 2, IntArrayRef{1}); },
        [](const Values& v) { return ref_norm(v, 2); }, kHalfs),
    with_range(reduce_case(
                   "all/dim1", {5, 4}, {1}, false,
                   [](const Tensor& x) { return all(x, IntArrayRef{1}); },
                   [](const Values& v) {
                     return double(
                         std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }));
                   },
                   {kBool, kFloat32, kInt32}),
               -0.2, 3, true),
    with_range(reduce_case(
                   "any/all_keepdim", {5, 4}, {}, true,
                   [](const Tensor& x) { return any(x, std::nullopt, true); },
                   [](const Values& v) {
                     return double(
                         std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }));
                   },
                   {kBool, kFloat32, kUInt8}),
               -0.3, 0.3, true),
    softmax_case("softmax/last", {4, 7}, -1, false),
    softmax_case("softmax/dim0", {4, 7}, 0, false),
    softmax_case("softmax/dim0_wide", {3, 700}, 0, false),  // several column tiles
    softmax_case("softmax/middle", {3, 5, 4}, 1, false),
    softmax_case("softmax/long_rows", {2, 3000}, 1, false),
    softmax_case("softmax/half", {3, 40}, 1, false, kHalfs),
    softmax_case("log_softmax/last", {4, 7}, -1, true),
    softmax_case("log_softmax/middle", {3, 5, 4}, 1, true),
    softmax_case("log_softmax/half", {3, 5, 4}, 0, true, kHalfs),
});

// ---- edge cases ----

template <class F>
std::string error_message(F f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.kind()) + ": " + e.what();
  }
  return "no error";
}

void expect_mentions(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks " << p;
}

TEST(Reduce, ZeroSizeReductionsUseTheIdentity) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(to_vector<float>(sum(e, IntArrayRef{0})), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(to_vector<float>(prod(e, IntArrayRef{0})), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(sum(e, IntArrayRef{1}).sizes().vec(), (std::vector<int64_t>{0}));
  for (float v : to_vector<float>(mean(e, IntArrayRef{0}))) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(sum(e).item<double>(), 0.0);
  EXPECT_EQ(to_vector<bool>(all(e, IntArrayRef{0})), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(to_vector<bool>(any(e, IntArrayRef{0})), (std::vector<bool>{false, false, false}));
  for (float v : to_vector<float>(var(e, IntArrayRef{0}))) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(to_vector<float>(logsumexp(zeros({2, 0}), {1})),
            (std::vector<float>{-INFINITY, -INFINITY}));
  // Reductions over non-empty dims of an empty tensor are just empty.
  auto [v, i] = max(e, 1);
  EXPECT_EQ(v.sizes().vec(), (std::vector<int64_t>{0}));
  EXPECT_EQ(i.dtype(), kInt64);
}

TEST(Reduce, ExtremaOfNothingAreErrors) {
  Tensor e = zeros({0, 3});
  expect_mentions(error_message([&] { max(e, 0); }), {"IndexError", "[max]", "dim 0", "[0, 3]"});
  expect_mentions(error_message([&] { argmin(e, 0); }), {"IndexError", "[argmin]", "[0, 3]"});
  expect_mentions(error_message([&] { amax(e, {0}); }), {"IndexError", "[amax]", "[0, 3]"});
  expect_mentions(error_message([&] { max(e); }), {"ValueError", "[max]", "[0, 3]"});
  expect_mentions(error_message([&] { argmax(e); }), {"IndexError", "[argmax]", "[0, 3]"});
  EXPECT_THROW(min(zeros({0})), ValueError);
}

TEST(Reduce, NaNPropagatesAndWinsArgmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({1, nan, 5, nan, 2, 7}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 1);
  auto [v, i] = max(x, 1);
  auto vv = to_vector<float>(v);
  EXPECT_TRUE(std::isnan(vv[0]) && std::isnan(vv[1]));
  EXPECT_EQ(to_vector<int64_t>(i), (std::vector<int64_t>{1, 0}));
  auto am = to_vector<float>(amax(x, {0}));
  EXPECT_TRUE(std::isnan(am[0]) && std::isnan(am[1]));
  EXPECT_EQ(am[2], 7.0f);
  EXPECT_TRUE(std::isnan(sum(x).item<float>()));
  EXPECT_TRUE(std::isnan(logsumexp(x, {1}).to(kFloat64).data_ptr<double>()[0]));
  // NaN late in a long row (the vectorised search).
  Tensor big = zeros({1000});
  big.data_ptr<float>()[777] = nan;
  big.data_ptr<float>()[900] = nan;
  EXPECT_EQ(argmax(big).item<int64_t>(), 777);
  EXPECT_EQ(argmin(big).item<int64_t>(), 777);
}

TEST(Reduce, TiesPickTheFirstIndex) {
  Tensor x = from_vector<float>({1, 3, 3, 2, 0, 0}, {6});
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 4);
  Tensor big = full({5000}, 1.0);
  big.data_ptr<float>()[4000] = 2;
  big.data_ptr<float>()[4500] = 2;
  EXPECT_EQ(argmax(big).item<int64_t>(), 4000);
  EXPECT_EQ(argmin(big).item<int64_t>(), 0);
  Tensor cols = from_vector<int32_t>({5, 1, 5, 1, 2, 1}, {3, 2});
  auto [v, i] = max(cols, 0);
  EXPECT_EQ(to_vector<int64_t>(i), (std::vector<int64_t>{0, 0}));
  auto [v2, i2] = min(cols, 0);
  EXPECT_EQ(to_vector<int64_t>(i2), (std::vector<int64_t>{2, 0}));
}

TEST(Reduce, DtypeRules) {
  EXPECT_EQ(sum(from_vector<int8_t>({100, 100}, {2})).dtype(), kInt64);
  EXPECT_EQ(sum(from_vector<int8_t>({100, 100}, {2})).item<int64_t>(), 200);
  EXPECT_EQ(sum(from_vector<bool>({true, true, false}, {3})).item<int64_t>(), 2);
  EXPECT_EQ(prod(from_vector<int32_t>({1 << 20, 1 << 20}, {2})).item<int64_t>(), int64_t(1) << 40);
  EXPECT_EQ(sum(zeros({3}, kFloat16)).dtype(), kFloat16);
  EXPECT_EQ(sum(zeros({3}, kFloat16), std::nullopt, false, kFloat32).dtype(), kFloat32);
  EXPECT_EQ(sum(from_vector<int32_t>({1, 2}, {2}), std::nullopt, false, kInt32).dtype(), kInt32);
  EXPECT_EQ(mean(from_vector<int32_t>({1, 2}, {2}), std::nullopt, false, kFloat32).item<float>(),
            1.5f);
  EXPECT_EQ(argmax(zeros({3}, kInt16)).dtype(), kInt64);
  EXPECT_EQ(all(from_vector<uint8_t>({1, 2}, {2})).dtype(), kUInt8);
  EXPECT_EQ(any(zeros({2})).dtype(), kBool);
  EXPECT_EQ(logsumexp(from_vector<int64_t>({1, 2}, {2}), {0}).dtype(), kFloat32);
  EXPECT_EQ(amax(from_vector<bool>({false, true}, {2})).item<bool>(), true);
  EXPECT_EQ(softmax(zeros({2, 3}), 1, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(softmax(from_vector<int64_t>({1, 2}, {2}), 0, kFloat32).dtype(), kFloat32);
}

TEST(Reduce, ErrorsAreTypedAndNameTheOp) {
  Tensor x = zeros({2, 3});
  expect_mentions(error_message([&] {
                    sum(x, IntArrayRef{0, -2});
                  }),
                  {"ValueError", "[sum]", "multiple times", "[2, 3]"});
  expect_mentions(error_message([&] { sum(x, IntArrayRef{2}); }), {"IndexError", "[sum]"});
  expect_mentions(error_message([&] { mean(from_vector<int64_t>({1}, {1})); }),
                  {"TypeError", "[mean]", "could not infer output dtype"});
  expect_mentions(error_message([&] { mean(x, std::nullopt, false, kInt64); }),
                  {"TypeError", "[mean]"});
  expect_mentions(error_message([&] { var(from_vector<int32_t>({1}, {1})); }),
                  {"TypeError", "[var]"});
  expect_mentions(error_message([&] { norm(from_vector<int32_t>({1}, {1})); }),
                  {"TypeError", "[norm]"});
  expect_mentions(error_message([&] { softmax(from_vector<int32_t>({1}, {1}), 0); }),
                  {"TypeError", "[softmax]"});
  expect_mentions(error_message([&] { log_softmax(x, 2); }), {"IndexError", "[log_softmax]"});
  expect_mentions(error_message([&] { max(x, -3); }), {"IndexError", "[max]"});
}

TEST(Reduce, VarianceCorrection) {
  Tensor one_value = from_vector<float>({3}, {1});
  EXPECT_TRUE(std::isnan(var(one_value).item<float>()));
  EXPECT_EQ(var(one_value, std::nullopt, 0).item<float>(), 0.0f);
  Tensor two = from_vector<double>({1, 2}, {2});
  EXPECT_EQ(var(two, std::nullopt, 2).item<double>(), INFINITY);
  EXPECT_NEAR(loom::std(two, std::nullopt, 0).item<double>(), 0.5, 1e-15);
  // A large offset does not hurt the variance (no sum-of-squares cancellation).
  Tensor shifted = from_vector<float>({1e6f + 1, 1e6f + 2, 1e6f + 3, 1e6f + 4}, {4});
  EXPECT_NEAR(var(shifted).item<float>(), 5.0f / 3.0f, 1e-5);
}

TEST(Reduce, ZeroDimTensors) {
  Tensor s = scalar_tensor(3.0, kFloat32);
  EXPECT_EQ(sum(s).item<float>(), 3.0f);
  EXPECT_EQ(sum(s, IntArrayRef{0}).item<float>(), 3.0f);
  EXPECT_EQ(sum(s).dim(), 0);
  auto [v, i] = max(s, 0);
  EXPECT_EQ(v.item<float>(), 3.0f);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(softmax(s, 0).item<float>(), 1.0f);
  EXPECT_EQ(log_softmax(s, -1).item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(var(s).item<float>()));
}

TEST(Reduce, StridedExpandedAndTransposedInputs) {
  Tensor x = arange(0, 24, 1, kFloat32).reshape({4, 6});
  Tensor xt = x.t();  // [6, 4], strides (1, 6)
  EXPECT_EQ(to_vector<float>(sum(xt, IntArrayRef{0})), to_vector<float>(sum(x, IntArrayRef{1})));
  EXPECT_EQ(to_vector<float>(sum(xt, IntArrayRef{1})), to_vector<float>(sum(x, IntArrayRef{0})));
  EXPECT_EQ(to_vector<int64_t>(argmax(xt, 0)), (std::vector<int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(argmax(xt).item<int64_t>(), 23);  // flat index in xt's logical order
  Tensor e = from_vector<float>({1, 2, 3}, {3, 1}).expand({3, 5});
  EXPECT_EQ(to_vector<float>(sum(e, IntArrayRef{1})), (std::vector<float>{5, 10, 15}));
  EXPECT_EQ(to_vector<float>(sum(e, IntArrayRef{0})), (std::vector<float>(5, 6.0f)));
  // Non-adjacent reduced dims of a permuted tensor.
  Tensor y = arange(0, 60, 1, kFloat64).reshape({3, 4, 5}).permute({2, 0, 1});
  Tensor got = sum(y, IntArrayRef{0, 2});
  Tensor want = sum(sum(y.contiguous(), IntArrayRef{2}), IntArrayRef{0});
  EXPECT_EQ(to_vector<double>(got), to_vector<double>(want));
  // softmax over a non-contiguous dim.
  Tensor sm = softmax(xt, 0);
  EXPECT_NEAR(sum(sm, IntArrayRef{0}).to(kFloat64).data_ptr<double>()[2], 1.0, 1e-6);
}

TEST(Reduce, LongFloatSumIsAccurate) {
  const int64_t n = int64_t(16) << 20;
  Tensor x = full({n}, 0.1f, kFloat32);
  const double want = double(0.1f) * double(n);
  EXPECT_NEAR(sum(x).item<double>(), want, want * 1e-7);
  EXPECT_NEAR(mean(x).item<double>(), double(0.1f), 1e-7 * 0.1);
  // Column sums over many rows and row sums over long rows.
  Tensor cols = full({int64_t(1) << 20, 4}, 0.1f, kFloat32);
  for (float v : to_vector<float>(sum(cols, IntArrayRef{0}))) {
    EXPECT_NEAR(v, double(0.1f) * double(1 << 20), double(0.1f) * double(1 << 20) * 1e-7);
  }
  Tensor rows = full({3, int64_t(1) << 21}, 0.1f, kFloat32);
  for (float v : to_vector<float>(sum(rows, IntArrayRef{1}))) {
    EXPECT_NEAR(v, double(0.1f) * double(1 << 21), double(0.1f) * double(1 << 21) * 1e-7);
  }
  EXPECT_NEAR(norm(full({n}, 1.0f, kFloat32)).item<double>(), std::sqrt(double(n)), 1e-3);
}

TEST(Reduce, ResultsDoNotDependOnThreadCount) {
  const int saved = get_num_threads();
  Tensor a = randn({1 << 20});
  Tensor b = randn({3000, 77});
  auto run = [&] {
    return std::vector<Tensor>{sum(a),
                               sum(b, IntArrayRef{0}),
                               sum(b, IntArrayRef{1}),
                               var(b, IntArrayRef{0}),
                               logsumexp(a, {0}),
                               softmax(b, 1),
                               argmax(a)};
  };
  set_num_threads(1);
  auto one_thread = run();
  set_num_threads(2);
  auto two_threads = run();
  set_num_threads(saved);
  for (size_t k = 0; k < one_thread.size(); ++k) {
    EXPECT_TRUE(equal(one_thread[k], two_threads[k])) << "result " << k;
  }
}

TEST(Reduce, SoftmaxIsStable) {
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000}, {1, 4});
  auto p = to_vector<float>(softmax(x, 1));
  EXPECT_NEAR(p[0], 0.09003057f, 1e-6);
  EXPECT_NEAR(p[2], 0.66524096f, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  auto lp = to_vector<float>(log_softmax(x, 1));
  EXPECT_NEAR(lp[0], -2.40760596f, 1e-5);
  EXPECT_NEAR(lp[3], -2002.40760596f, 1e-2);
  // Masked entries (-inf) get exactly zero probability.
  Tensor m = from_vector<float>({0, -INFINITY, 1, -INFINITY}, {4});
  auto pm = to_vector<float>(softmax(m, 0));
  EXPECT_EQ(pm[1], 0.0f);
  EXPECT_NEAR(pm[0] + pm[2], 1.0f, 1e-6);
  EXPECT_NEAR(logsumexp(from_vector<float>({1000, 1000}, {2}), {0}).item<float>(),
              1000 + std::log(2.0), 1e-3);
  EXPECT_EQ(logsumexp(from_vector<float>({-INFINITY, -INFINITY}, {2}), {0}).item<float>(),
            -INFINITY);
  EXPECT_EQ(logsumexp(from_vector<float>({1, INFINITY}, {2}), {0}).item<float>(), INFINITY);
}

TEST(Reduce, MetaComputesShapesOnly) {
  Tensor m = empty({4, 0, 3}, TensorOptions(kFloat32).with_device(kMeta));
  EXPECT_EQ(sum(m, IntArrayRef{2}).sizes().vec(), (std::vector<int64_t>{4, 0}));
  EXPECT_TRUE(sum(m).is_meta());
  auto [v, i] = max(empty({4, 5}, TensorOptions(kFloat16).with_device(kMeta)), 1, true);
  EXPECT_EQ(v.sizes().vec(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(v.dtype(), kFloat16);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(sum(empty({2}, TensorOptions(kInt8).with_device(kMeta))).dtype(), kInt64);
}

}  // namespace
}  // namespace loom::testing
