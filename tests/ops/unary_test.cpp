// Pointwise unary operators: table entries plus non-finite edge cases, accuracy sweeps of the fast
// float32 kernels against double, dtype rules, in-place/out= variants and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "loom/parallel.h"
#include "ops/op_table.h"

namespace loom::testing {
namespace {

const std::vector<DType> kFloats = {kFloat32, kFloat64, kFloat16, kBFloat16};
const std::vector<DType> kSigned = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kInt32, kInt64};
// Float-producing ops also take integers and bool (giving the default float dtype).
const std::vector<DType> kToFloat = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};

OpCase with_dtypes(OpCase c, std::vector<DType> dtypes) {
  c.dtypes = std::move(dtypes);
  return c;
}

double ref_sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_sign(double x) {
  return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
}

const RegisterOpCases kUnaryCases({
    with_dtypes(unary_case(
                    "neg", [](const Tensor& a) { return neg(a); }, [](double x) { return -x; }),
                kSigned),
    with_dtypes(unary_case(
                    "abs", [](const Tensor& a) { return abs(a); },
                    [](double x) { return std::fabs(x); }),
                kSigned),
    with_dtypes(unary_case(
                    "exp", [](const Tensor& a) { return exp(a); },
                    [](double x) { return std::exp(x); }, -10, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "exp/large", [](const Tensor& a) { return exp(a); },
                    [](double x) { return std::exp(x); }, -80, 80, {1000}),
                {kFloat32, kFloat64}),
    with_dtypes(unary_case(
                    "log", [](const Tensor& a) { return log(a); },
                    [](double x) { return std::log(x); }, 0.01, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "log1p", [](const Tensor& a) { return log1p(a); },
                    [](double x) { return std::log1p(x); }, -0.9, 5),
                kFloats),
    with_dtypes(unary_case(
                    "sqrt", [](const Tensor& a) { return sqrt(a); },
                    [](double x) { return std::sqrt(x); }, 0, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "rsqrt", [](const Tensor& a) { return rsqrt(a); },
                    [](double x) { return 1 / std::sqrt(x); }, 0.1, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "sin", [](const Tensor& a) { return sin(a); },
                    [](double x) { return std::sin(x); }, -10, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "cos", [](const Tensor& a) { return cos(a); },
                    [](double x) { return std::cos(x); }, -10, 10),
                kToFloat),
    with_dtypes(unary_case(
                    "tanh", [](const Tensor& a) { return tanh(a); },
                    [](double x) { return std::tanh(x); }, -5, 5),
                kToFloat),
    with_dtypes(unary_case(
                    "sigmoid", [](const Tensor& a) { return sigmoid(a); }, ref_sigmoid, -12, 12),
                kToFloat),
    with_dtypes(unary_case(
                    "relu", [](const Tensor& a) { return relu(a); },
                    [](double x) { return x > 0 ? x : 0.0; }),
                kSigned),
    with_dtypes(unary_case(
                    "silu", [](const Tensor& a) { return silu(a); },
                    [](double x) { return x * ref_sigmoid(x); }, -8, 8),
                kFloats),
    with_dtypes(unary_case(
                    "erf", [](const Tensor& a) { return erf(a); },
                    [](double x) { return std::erf(x); }, -4, 4),
                kToFloat),
    with_dtypes(unary_case(
                    "sign", [](const Tensor& a) { return sign(a); }, ref_sign),
                {kFloat32, kFloat64, kFloat16, kInt32, kInt64, kUInt8, kBool}),
    with_dtypes(unary_case(
                    "reciprocal", [](const Tensor& a) { return reciprocal(a); },
                    [](double x) { return 1 / x; }, 0.25, 4),
                kToFloat),
    with_dtypes(unary_case(
                    "logical_not", [](const Tensor& a) { return logical_not(a); },
                    [](double x) { return double(x == 0); }, -1, 1),
                {kFloat32, kFloat64, kInt32, kBool}),
    with_dtypes(unary_case(
                    "gelu", [](const Tensor& a) { return gelu(a); }, ref_gelu, -6, 6),
                kFloats),
    with_dtypes(unary_case(
                    "gelu/tanh", [](const Tensor& a) { return gelu(a, "tanh"); }, ref_gelu_tanh, -6,
                    6),
                kFloats),
    with_dtypes(unary_case(
                    "pow/square", [](const Tensor& a) { return pow(a, 2); },
                    [](double x) { return x * x; }),
                {kFloat32, kFloat64, kFloat16, kInt32, kInt64}),
    with_dtypes(unary_case(
                    "pow/cube", [](const Tensor& a) { return pow(a, 3); },
                    [](double x) { return x * x * x; }, -3, 3),
                {kFloat32, kFloat64, kInt64}),
    with_dtypes(unary_case(
                    "pow/sqrt", [](const Tensor& a) { return pow(a, 0.5); },
                    [](double x) { return std::sqrt(x); }, 0, 4),
                {kFloat32, kFloat64, kBFloat16, kInt64}),
    unary_case(
        "pow/rsqrt", [](const Tensor& a) { return pow(a, -0.5); },
        [](double x) { return 1 / std::sqrt(x); }, 0.1, 4),
    unary_case(
        "pow/reciprocal", [](const Tensor& a) { return pow(a, -1); },
        [](double x) { return 1 / x; }, 0.5, 4),
    unary_case(
        "pow/minus_two", [](const Tensor& a) { return pow(a, -2); },
        [](double x) { return 1 / (x * x); }, 0.5, 4),
    unary_case(
        "pow/zero", [](const Tensor& a) { return pow(a, 0); }, [](double) { return 1.0; }),
    unary_case(
        "pow/general", [](const Tensor& a) { return pow(a, 2.7); },
        [](double x) { return std::pow(x, 2.7); }, 0, 3),
    unary_case(
        "pow/scalar_base", [](const Tensor& a) { return pow(2.5, a); },
        [](double x) { return std::pow(2.5, x); }, -3, 3),
    with_dtypes(binary_case(
                    "pow/tensor", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
                    [](double x, double y) { return std::pow(x, y); }, {4, 1, 3}, {5, 3}, 0.25, 3),
                {kFloat32, kFloat64, kFloat16}),
    with_dtypes(binary_case(
                    "pow/tensor_int", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
                    [](double x, double y) { return std::pow(x, y); }, {4, 1, 3}, {5, 3}, 0, 4),
                {kInt32, kInt64}),
    with_dtypes(unary_case(
                    "clamp", [](const Tensor& a) { return clamp(a, -0.5, 0.75); },
                    [](double x) { return std::min(std::max(x, -0.5), 0.75); }),
                kFloats),
    with_dtypes(unary_case(
                    "clamp/min", [](const Tensor& a) { return clamp(a, 0.25); },
                    [](double x) { return std::max(x, 0.25); }),
                kFloats),
    with_dtypes(unary_case(
                    "clamp/max", [](const Tensor& a) { return clamp(a, std::nullopt, 1); },
                    [](double x) { return std::min(x, 1.0); }),
                {kFloat32, kFloat64, kInt8, kInt32, kInt64}),
    with_dtypes(unary_case(
                    "clamp/int", [](const Tensor& a) { return clamp(a, -1, 1); },
                    [](double x) { return std::min(std::max(x, -1.0), 1.0); }, -3, 3),
                {kUInt8, kInt16, kInt32, kInt64}),
    unary_case(
        "exp/zero_size", [](const Tensor& a) { return exp(a); },
        [](double x) { return std::exp(x); }, -1, 1, {0, 3}),
    unary_case(
        "exp/scalar", [](const Tensor& a) { return exp(a); }, [](double x) { return std::exp(x); },
        -1, 1, {}),
});

std::vector<double> values(const Tensor& t) {
  return to_vector<double>(t);
}

Tensor f32(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector<float>(v, {n});
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Distance from got to the exact value want in units of float32's last place at want (subnormal
// spacing below FLT_MIN). Non-finite results must match exactly.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
  const float wf = static_cast<float>(want);
  if (std::isinf(wf)) return got == wf ? 0.0 : 1e30;
  if (std::isnan(got) || std::isinf(got)) return 1e30;
  int e = 0;
  std::frexp(want, &e);
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Every 509th float bit pattern of both signs (about 8.4 million values, enough to cover every
// binade densely) plus the edges named in the brief. Large enough to run on the intra-op pool.
std::vector<float> sweep_inputs() {
  std::vector<float> v;
  v.reserve(8'500'000);
  for (uint32_t b = 0; b < 0x7f800000u; b += 509) {
    float x;
    std::memcpy(&x, &b, 4);
    v.push_back(x);
    v.push_back(-x);
  }
  for (float x :
       {0.0f,       -0.0f, kInf,      -kInf,       kNaN,       -104.0f, -103.97f, -87.3f,
        -87.33655f, 88.7f, 88.72283f, 88.7228394f, 89.0f,      1e-45f,  1e-40f,   1.17549435e-38f,
        1.0f,       -1.0f, 0.625f,    0.921875f,   -0.921875f, 9.0f,    -9.0f}) {
    v.push_back(x);
  }
  return v;
}

void expect_within_ulp(const char* name, const std::function<Tensor(const Tensor&)>& op,
                       const std::function<double(double)>& ref, double max_ulp) {
  const std::vector<float> in = sweep_inputs();
  const Tensor x = f32(in);
  const std::vector<float> got = to_vector<float>(op(x));
  ASSERT_EQ(got.size(), in.size());
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double e = ulp_error(got[i], ref(static_cast<double>(in[i])));
    if (e > worst) {
      worst = e;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, max_ulp) << name << "(" << in[worst_i] << ") = " << got[worst_i] << ", want "
                            << ref(static_cast<double>(in[worst_i]));
}

TEST(Unary, ExpAccuracySweep) {
  expect_within_ulp(
      "exp", [](const Tensor& t) { return exp(t); }, [](double x) { return std::exp(x); }, 2.0);
}
TEST(Unary, LogAccuracySweep) {
  expect_within_ulp(
      "log", [](const Tensor& t) { return log(t); }, [](double x) { return std::log(x); }, 1.0);
}
TEST(Unary, Log1pAccuracySweep) {
  expect_within_ulp(
      "log1p", [](const Tensor& t) { return log1p(t); }, [](double x) { return std::log1p(x); },
      3.0);
}
TEST(Unary, TanhAccuracySweep) {
  expect_within_ulp(
      "tanh", [](const Tensor& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, 2.0);
}
TEST(Unary, SigmoidAccuracySweep) {
  expect_within_ulp(
      "sigmoid", [](const Tensor& t) { return sigmoid(t); }, ref_sigmoid, 3.5);
}
TEST(Unary, ErfAccuracySweep) {
  expect_within_ulp(
      "erf", [](const Tensor& t) { return erf(t); }, [](double x) { return std::erf(x); }, 2.0);
}

// silu and gelu multiply by x, so their error is the activation's plus one rounding; gelu's
// 1 + erf(x) cancels for x << 0, where only an absolute bound holds (as in PyTorch).
TEST(Unary, ActivationAccuracy) {
  std::vector<float> in;
  for (int i = -200000; i <= 200000; ++i) in.push_back(static_cast<float>(i) * 1e-4f);
  const Tensor x = f32(in);
  const std::vector<float> s = to_vector<float>(silu(x));
  const std::vector<float> g = to_vector<float>(gelu(x));
  const std::vector<float> gt = to_vector<float>(gelu(x, "tanh"));
  for (size_t i = 0; i < in.size(); ++i) {
    const double v = in[i];
    ASSERT_LE(ulp_error(s[i], v * ref_sigmoid(v)), 4.0) << "silu(" << v << ")";
    ASSERT_NEAR(g[i], ref_gelu(v), 2e-7 + 4e-7 * std::fabs(ref_gelu(v))) << "gelu(" << v << ")";
    ASSERT_NEAR(gt[i], ref_gelu_tanh(v), 2e-7 + 4e-7 * std::fabs(ref_gelu_tanh(v)))
        << "gelu_tanh(" << v << ")";
  }
}

// The same values through the fast path at 1 and 2 threads, and through the strided path.
TEST(Unary, ThreadsAndLayoutsAgree) {
  std::vector<float> in;
  for (int i = 0; i < 300001; ++i) in.push_back(static_cast<float>(i % 2001) * 0.01f - 10.0f);
  const Tensor x = f32(in);
  const int threads = get_num_threads();
  set_num_threads(1);
  const std::vector<float> one = to_vector<float>(exp(x));
  set_num_threads(2);
  const std::vector<float> two = to_vector<float>(exp(x));
  set_num_threads(threads);
  const std::vector<float> strided = to_vector<float>(exp(noncontiguous_copy(x)));
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, strided);
  // Broadcast input (stride 0) through the iterator.
  const Tensor b = exp(f32({1.5f}).expand({70000}));
  const float want = to_vector<float>(exp(f32({1.5f})))[0];
  for (float v : to_vector<float>(b)) ASSERT_EQ(v, want);
}

// 16-bit floats are computed in float in blocks; the result must be float's result rounded.
TEST(Unary, ReducedFloatsMatchFloat) {
  std::vector<float> in;
  for (int i = 0; i < 5000; ++i) in.push_back(static_cast<float>(i) * 0.004f - 10.0f);
  const Tensor x = f32(in);
  for (DType dt : {kFloat16, kBFloat16}) {
    const Tensor xr = x.to(dt);
    for (auto op :
         {+[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return tanh(t); },
          +[](const Tensor& t) { return gelu(t); }}) {
      const Tensor want = op(xr.to(kFloat32)).to(dt);
      const Tensor got = op(xr);
      ASSERT_EQ(got.dtype(), dt);
      EXPECT_EQ(values(got), values(want)) << dtype_name(dt);
      EXPECT_EQ(values(op(noncontiguous_copy(xr))), values(want)) << dtype_name(dt);
    }
  }
}

TEST(Unary, NonFiniteValues) {
  auto v = [](const Tensor& t) { return to_vector<float>(t); };
  const std::vector<float> e = v(exp(f32({kInf, -kInf, kNaN, 89.0f, 88.8f, -104.0f, 0.0f})));
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], kInf);  // overflow
  EXPECT_EQ(e[4], kInf);
  EXPECT_EQ(e[5], 0.0f);  // underflow
  EXPECT_EQ(e[6], 1.0f);
  EXPECT_EQ(v(exp(f32({-87.3f})))[0], std::exp(-87.3f));  // just above FLT_MIN's log
  EXPECT_GT(v(exp(f32({-100.0f})))[0], 0.0f);             // a subnormal, not flushed
  const std::vector<float> l = v(log(f32({0.0f, -0.0f, -1.0f, kInf, -kInf, kNaN, 1.0f})));
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], -kInf);
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_EQ(l[3], kInf);
  EXPECT_TRUE(std::isnan(l[4]));
  EXPECT_TRUE(std::isnan(l[5]));
  EXPECT_EQ(l[6], 0.0f);
  const std::vector<float> l1 = v(log1p(f32({-1.0f, -2.0f, kInf, 0.0f, 1e-30f})));
  EXPECT_EQ(l1[0], -kInf);
  EXPECT_TRUE(std::isnan(l1[1]));
  EXPECT_EQ(l1[2], kInf);
  EXPECT_EQ(l1[3], 0.0f);
  EXPECT_EQ(l1[4], 1e-30f);
  EXPECT_TRUE(std::isnan(v(sqrt(f32({-1.0f})))[0]));
  EXPECT_EQ(v(rsqrt(f32({0.0f})))[0], kInf);
  EXPECT_EQ(v(reciprocal(f32({-0.0f})))[0], -kInf);
  const std::vector<float> r = v(relu(f32({kNaN, -0.0f, -kInf, kInf})));
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(r[1] == 0.0f && std::signbit(r[1]));  // relu keeps -0.0, as PyTorch
  EXPECT_EQ(r[2], 0.0f);
  EXPECT_EQ(r[3], kInf);
  EXPECT_EQ(v(tanh(f32({kInf, -kInf, 20.0f, -1e-30f}))), (std::vector<float>{1, -1, 1, -1e-30f}));
  EXPECT_TRUE(std::isnan(v(tanh(f32({kNaN})))[0]));
  EXPECT_EQ(v(sigmoid(f32({kInf, -kInf, 0.0f}))), (std::vector<float>{1, 0, 0.5f}));
  EXPECT_TRUE(std::isnan(v(sigmoid(f32({kNaN})))[0]));
  EXPECT_EQ(v(erf(f32({kInf, -kInf, 0.0f}))), (std::vector<float>{1, -1, 0}));
  EXPECT_TRUE(std::isnan(v(erf(f32({kNaN})))[0]));
  EXPECT_EQ(v(sign(f32({kNaN, -0.0f, -kInf, 3.0f}))), (std::vector<float>{0, 0, -1, 1}));
  EXPECT_EQ(v(silu(f32({-kInf, kInf})))[1], kInf);
  EXPECT_TRUE(std::isnan(v(clamp(f32({kNaN}), 0, 1))[0]));
  EXPECT_EQ(v(clamp(f32({-kInf, kInf}), -1, 1)), (std::vector<float>{-1, 1}));
  // double goes through std:: and gives the same answers.
  const std::vector<double> d =
      values(exp(from_vector<double>({710.0, -746.0, std::nan("")}, {3})));
  EXPECT_EQ(d[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(d[1], 0.0);
  EXPECT_TRUE(std::isnan(d[2]));
}

TEST(Unary, DtypeRules) {
  const Tensor i = from_vector<int64_t>({-2, 0, 3}, {3});
  const Tensor b = from_vector<bool>({true, false}, {2});
  const Tensor h = from_vector<float>({1, 2}, {2}).to(kFloat16);
  EXPECT_EQ(exp(i).dtype(), kFloat32);
  EXPECT_EQ(sqrt(b).dtype(), kFloat32);
  EXPECT_EQ(values(sqrt(from_vector<int32_t>({4, 9}, {2}))), (std::vector<double>{2, 3}));
  EXPECT_EQ(sigmoid(i).dtype(), kFloat32);
  EXPECT_EQ(reciprocal(i).dtype(), kFloat32);
  EXPECT_EQ(exp(h).dtype(), kFloat16);
  EXPECT_EQ(neg(i).dtype(), kInt64);
  EXPECT_EQ(values(neg(i)), (std::vector<double>{2, 0, -3}));
  EXPECT_EQ(values(neg(from_vector<uint8_t>({3}, {1}))), (std::vector<double>{253}));  // wraps
  EXPECT_EQ(values(abs(from_vector<int8_t>({-128, -5}, {2}))), (std::vector<double>{-128, 5}));
  EXPECT_EQ(values(relu(i)), (std::vector<double>{0, 0, 3}));
  EXPECT_EQ(sign(b).dtype(), kBool);
  EXPECT_EQ(values(sign(i)), (std::vector<double>{-1, 0, 1}));
  EXPECT_EQ(logical_not(i).dtype(), kBool);
  EXPECT_EQ(values(logical_not(i)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(logical_not(h).dtype(), kBool);
  // pow promotes like a binary op with a wrapped number.
  EXPECT_EQ(pow(i, 2).dtype(), kInt64);
  EXPECT_EQ(values(pow(i, 2)), (std::vector<double>{4, 0, 9}));
  EXPECT_EQ(pow(i, 0.5).dtype(), kFloat32);
  EXPECT_EQ(pow(b, 2).dtype(), kInt64);
  EXPECT_EQ(values(pow(2, i)), (std::vector<double>{0, 1, 8}));
  EXPECT_EQ(pow(2, i).dtype(), kInt64);
  EXPECT_EQ(pow(2.5, i).dtype(), kFloat32);
  EXPECT_EQ(pow(h, 2).dtype(), kFloat16);
  EXPECT_EQ(pow(i, from_vector<float>({1, 2, 3}, {3})).dtype(), kFloat32);
  // clamp promotes with its bounds.
  EXPECT_EQ(clamp(i, 0.5).dtype(), kFloat32);
  EXPECT_EQ(values(clamp(i, 0.5)), (std::vector<double>{0.5, 0.5, 3}));
  EXPECT_EQ(clamp(i, 0).dtype(), kInt64);
  EXPECT_EQ(clamp(h, 0).dtype(), kFloat16);
  EXPECT_EQ(clamp(from_vector<int8_t>({-100, 100}, {2}), -1000, 1000).dtype(), kInt8);
  EXPECT_EQ(values(clamp(from_vector<int8_t>({-100, 100}, {2}), -1000, 1000)),
            (std::vector<double>{-100, 100}));  // out-of-range bounds saturate
  // The default float dtype decides what integers become.
  set_default_dtype(kFloat64);
  EXPECT_EQ(exp(i).dtype(), kFloat64);
  set_default_dtype(kFloat32);
  // Meta tensors: shape and dtype only.
  const Tensor m = empty({2, 3}, TensorOptions(kInt32).with_device(kMeta));
  EXPECT_TRUE(exp(m).is_meta());
  EXPECT_EQ(exp(m).dtype(), kFloat32);
  EXPECT_EQ(pow(m, 2).dtype(), kInt32);
  EXPECT_EQ(clamp(m, 0.5).dtype(), kFloat32);
  EXPECT_EQ(logical_not(m).dtype(), kBool);
}

TEST(Unary, PowSemantics) {
  // Integer powers wrap on overflow and negative exponents follow PyTorch's integer rule.
  EXPECT_EQ(values(pow(from_vector<int64_t>({3}, {1}), 50))[0],
            static_cast<double>(int64_t{6048575297968530377}));
  const Tensor base = from_vector<int64_t>({2, 1, -1, -1, 0}, {5});
  const Tensor e = from_vector<int64_t>({-1, -5, -3, -2, 0}, {5});
  EXPECT_EQ(values(pow(base, e)), (std::vector<double>{0, 1, -1, 1, 1}));
  EXPECT_EQ(values(pow(from_vector<int32_t>({2, 3}, {2}), 0)), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(pow(from_vector<float>({kNaN, 0}, {2}), 0)), (std::vector<double>{1, 1}));
  EXPECT_TRUE(std::isnan(values(pow(from_vector<float>({-4}, {1}), 0.5))[0]));
  EXPECT_EQ(values(pow(from_vector<float>({0}, {1}), -1))[0], kInf);
  EXPECT_EQ(values(pow(from_vector<float>({4}, {1}), -0.5))[0], 0.5);
}

TEST(Unary, ClampSemantics) {
  const Tensor x = from_vector<float>({-2, 0, 2}, {3});
  EXPECT_EQ(values(clamp(x, 1, 0)), (std::vector<double>{0, 0, 0}));  // min > max gives max
  EXPECT_EQ(values(clamp(x, std::nullopt, 1)), (std::vector<double>{-2, 0, 1}));
  EXPECT_EQ(values(clamp(x, -1)), (std::vector<double>{-1, 0, 2}));
}

TEST(Unary, InPlaceAndOut) {
  Tensor a = from_vector<float>({0, 1, 2}, {3});
  const uint32_t v0 = a.version();
  const Tensor& r = exp_(a);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_GT(a.version(), v0);
  EXPECT_FLOAT_EQ(to_vector<float>(a)[2], std::exp(2.0f));
  // In place on a strided view writes through to the base.
  Tensor base = from_vector<float>({1, -1, 2, -2, 3, -3}, {6});
  neg_(base.slice(0, 0, std::nullopt, 2));
  EXPECT_EQ(values(base), (std::vector<double>{-1, -1, -2, -2, -3, -3}));
  abs_(base);
  EXPECT_EQ(values(base), (std::vector<double>{1, 1, 2, 2, 3, 3}));
  // out= resizes and casts.
  Tensor out = empty({1});
  sqrt_out(out, from_vector<float>({4, 9}, {2}));
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2}));
  EXPECT_EQ(values(out), (std::vector<double>{2, 3}));
  Tensor out64 = empty({2}, kFloat64);
  exp_out(out64, from_vector<float>({0, 1}, {2}));
  EXPECT_EQ(out64.dtype(), kFloat64);
  EXPECT_NEAR(values(out64)[1], std::exp(1.0), 1e-6);
  Tensor outf = empty({3});
  logical_not_out(outf, from_vector<float>({0, 1, 2}, {3}));
  EXPECT_EQ(values(outf), (std::vector<double>{1, 0, 0}));
  Tensor lb = from_vector<float>({0, 3}, {2});
  logical_not_(lb);  // writes 0/1 into the float tensor, as PyTorch
  EXPECT_EQ(values(lb), (std::vector<double>{1, 0}));
  // The rest of the family.
  Tensor g = from_vector<float>({-1, 0, 1}, {3});
  gelu_(g, "tanh");
  EXPECT_NEAR(values(g)[2], ref_gelu_tanh(1), 1e-6);
  Tensor p = from_vector<float>({1, 2, 3}, {3});
  pow_(p, 2);
  EXPECT_EQ(values(p), (std::vector<double>{1, 4, 9}));
  Tensor c = from_vector<int64_t>({-5, 0, 5}, {3});
  clamp_(c, -1, 1);
  EXPECT_EQ(values(c), (std::vector<double>{-1, 0, 1}));
  Tensor i = from_vector<int32_t>({-5, 5}, {2});
  relu_(i);
  sign_(i);
  EXPECT_EQ(values(i), (std::vector<double>{0, 1}));
  Tensor h = from_vector<float>({0.5f, 1.5f}, {2}).to(kBFloat16);
  sigmoid_(h);
  EXPECT_NEAR(values(h)[1], ref_sigmoid(1.5), 1e-2);
}

template <class E, class F>
void expect_error(const F& f, const std::string& prefix) {
  try {
    f();
    ADD_FAILURE() << "expected an error starting with " << prefix;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
  }
}

TEST(Unary, Errors) {
  const Tensor b = from_vector<bool>({true}, {1});
  const Tensor i = from_vector<int64_t>({1, 2}, {2});
  const Tensor f = from_vector<float>({1, 2}, {2});
  expect_error<TypeError>([&] { neg(b); }, "[neg]");
  expect_error<TypeError>([&] { abs(b); }, "[abs]");
  expect_error<TypeError>([&] { relu(b); }, "[relu]");
  expect_error<TypeError>([&] { silu(i); }, "[silu]");
  expect_error<TypeError>([&] { gelu(i); }, "[gelu]");
  expect_error<ValueError>([&] { gelu(f, "exact"); }, "[gelu]");
  expect_error<ValueError>([&] { exp(Tensor()); },
                           "[loom::exp] argument 'self' is an undefined tensor");
  // Float results cannot be written into integer tensors.
  expect_error<TypeError>([&] { exp_(i.clone()); }, "[exp]");
  expect_error<TypeError>([&] { sqrt_out(empty({2}, kInt64), f); }, "[sqrt]");
  expect_error<TypeError>([&] { abs_out(empty({2}, kBool), f); }, "[abs]");
  expect_error<TypeError>([&] { pow_(i.clone(), 0.5); }, "[pow]");
  expect_error<TypeError>([&] { clamp_(i.clone(), 0.5); }, "[clamp]");
  expect_error<ValueError>([&] { pow(i, -1); }, "[pow]");
  expect_error<TypeError>([&] { pow(b, b); }, "[pow]");
  expect_error<TypeError>([&] { clamp(b, true); }, "[clamp]");
  expect_error<ValueError>([&] { clamp(f, std::nullopt, std::nullopt); }, "[clamp]");
  expect_error<ValueError>([&] { pow(f, zeros({3})); }, "[pow]");  // shapes do not broadcast
}

}  // namespace
}  // namespace loom::testing
