// The pointwise CUDA kernels (unary, binary, comparisons, activation backwards, factories, random
// numbers, dropout) against the CPU kernels, for what the operator table cannot express: the same
// random numbers for the same generator state, CPU scalar operands, in-place ops on strided views,
// 0-stride broadcasts, integer and NaN semantics, the 64-bit index path, and device errors.
// Label `cuda`: every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/ops.h"
#include "loom/tensor.h"
#include "test_errors.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

// The device result equals the CPU's: same dtype and shape, values equal (exact) or close.
void expect_same(const Tensor& cpu, const Tensor& dev, const std::string& what, double rtol = 0,
                 double atol = 0) {
  ASSERT_TRUE(dev.is_cuda()) << what << ": result on " << dev.device();
  ASSERT_EQ(dev.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(dev.sizes(), cpu.sizes()) << what;
  const Tensor got = dev.to(kCPU);
  if (rtol == 0 && atol == 0) {
    // Exact, NaN equal to NaN.
    const Tensor a = cpu.to(kFloat64), b = got.to(kFloat64);
    EXPECT_TRUE(allclose(a, b, 0, 0, /*equal_nan=*/true)) << what;
  } else {
    EXPECT_TRUE(allclose(got.to(kFloat64), cpu.to(kFloat64), rtol, atol, /*equal_nan=*/true))
        << what;
  }
}

double rtol_for(DType dt) {
  if (dt == kFloat16 || dt == kBFloat16) return 1e-2;
  if (dt == kFloat32) return 2e-6;
  return 1e-13;
}

// Values with NaN, infinities, zeros of both signs and ordinary numbers.
Tensor special_values(DType dt, bool reversed = false) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, inf, -inf, nan, 1e-3, 20.0};
  for (int i = 0; i < 40; ++i) v.push_back(-4.0 + 0.2 * i);
  if (reversed) v = std::vector<double>(v.rbegin(), v.rend());
  return from_vector<double>(v).to(dt);
}

// ---- random numbers: the same draws on both devices ----

TEST(CudaRandom, RandEqualsCpuForTheSameSeed) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{1001}, int64_t{1} << 20}) {
      Generator a(1234), b(1234);
      a.set_state({1234, 5});
      b.set_state({1234, 5});
      const Tensor cpu = rand({n}, dt, a);
      const Tensor dev = rand({n}, TensorOptions(dt).with_device(kCuda), b);
      expect_same(cpu, dev, "rand " + std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      EXPECT_EQ(a.state(), b.state()) << "both advance the generator alike";
    }
  }
}

TEST(CudaRandom, DefaultGeneratorGivesTheSameNumbers) {
  REQUIRE_GPU();
  manual_seed(42);
  const Tensor cpu = rand({4, 33});
  manual_seed(42);
  const Tensor dev = rand({4, 33}, kCuda);
  expect_same(cpu, dev, "rand with the default generator");
}

TEST(CudaRandom, RandnEqualsCpuForTheSameSeed) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{100001}}) {
      Generator a(7), b(7);
      const Tensor cpu = randn({n}, dt, a);
      const Tensor dev = randn({n}, TensorOptions(dt).with_device(kCuda), b);
      // log, sin and cos in double may differ in the last bit of a double between libdevice and
      // glibc (Note [Same random numbers on every device]); after rounding to float they agree.
      expect_same(cpu, dev, "randn " + std::string(dtype_name(dt)), dt == kFloat64 ? 1e-14 : 0,
                  dt == kFloat64 ? 1e-14 : 0);
      EXPECT_EQ(a.state(), b.state());
    }
  }
}

TEST(CudaRandom, RandintEqualsCpuForTheSameSeed) {
  REQUIRE_GPU();
  for (DType dt : {kInt64, kInt32, kInt16, kUInt8, kFloat32, kFloat64}) {
    Generator a(99), b(99);
    const Tensor cpu = randint(3, 200, {2, 513}, dt, a);
    const Tensor dev = randint(3, 200, {2, 513}, TensorOptions(dt).with_device(kCuda), b);
    expect_same(cpu, dev, "randint " + std::string(dtype_name(dt)));
    EXPECT_EQ(a.state(), b.state());
  }
}

TEST(CudaRandom, DropoutMaskEqualsCpuForTheSameSeed) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      const Tensor x = randn({7, 129}).to(dt);
      Generator a(2026), b(2026);
      const auto [out_c, mask_c] = native_dropout(x, p, true, a);
      // A strided input: the kernel reads a contiguous copy.
      const Tensor xd = x.to(kCuda).t().contiguous().t();
      const auto [out_d, mask_d] = native_dropout(xd, p, true, b);
      const std::string what = std::string(dtype_name(dt)) + " p=" + std::to_string(p);
      expect_same(mask_c, mask_d, "dropout mask " + what);
      expect_same(out_c, out_d, "dropout output " + what);
      EXPECT_EQ(a.state(), b.state()) << what;
      const Tensor g = randn({7, 129}).to(dt);
      const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
      expect_same(native_dropout_backward(g, mask_c, scale),
                  native_dropout_backward(g.to(kCuda), mask_d, scale), "dropout backward " + what);
    }
  }
  // Evaluation mode: the input passes and the generator does not move.
  Generator g(1);
  const Tensor x = randn({10}).to(kCuda);
  const auto [out, mask] = native_dropout(x, 0.5, false, g);
  expect_same(x.to(kCPU), out, "dropout in eval mode");
  EXPECT_EQ(g.state().offset, 0u);
}

// ---- factories ----

TEST(CudaFactory, ArangeLinspaceEyeOneHotEqualCpu) {
  REQUIRE_GPU();
  for (DType dt : {kInt64, kInt32, kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const TensorOptions d = TensorOptions(dt).with_device(kCuda);
    const std::string n = dtype_name(dt);
    expect_same(arange(-5, 100, 3, dt), arange(-5, 100, 3, d), "arange int " + n);
    expect_same(arange(0.1, 7.3, 0.35, dt), arange(0.1, 7.3, 0.35, d), "arange float " + n);
    expect_same(linspace(-1.5, 2.25, 77, dt), linspace(-1.5, 2.25, 77, d), "linspace " + n);
    expect_same(eye(5, 7, dt), eye(5, 7, d), "eye " + n);
  }
  expect_same(linspace(3, 3, 1), linspace(3, 3, 1, kCuda), "linspace one step");
  expect_same(linspace(0, 1, 0), linspace(0, 1, 0, kCuda), "linspace no step");
  const Tensor idx = from_vector<int64_t>({3, 0, 1, 4, 4, 2}, {2, 3});
  expect_same(one_hot(idx), one_hot(idx.to(kCuda)), "one_hot inferred");
  expect_same(one_hot(idx, 6), one_hot(idx.to(kCuda), 6), "one_hot explicit");
  EXPECT_CONTAINS(testing::error_of<IndexError>([&] { one_hot(idx.to(kCuda), 3); }),
                  "[one_hot] class value 3 is out of range for num_classes 3");
}

// ---- unary ----

TEST(CudaUnary, EveryOpEqualsCpu) {
  REQUIRE_GPU();
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"log1p", [](const Tensor& t) { return log1p(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"sin", [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return cos(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"erf", [](const Tensor& t) { return erf(t); }},
      {"sign", [](const Tensor& t) { return sign(t); }},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }},
      {"logical_not", [](const Tensor& t) { return logical_not(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"pow_2", [](const Tensor& t) { return pow(t, 2); }},
      {"pow_0.5", [](const Tensor& t) { return pow(t, 0.5); }},
      {"pow_-1", [](const Tensor& t) { return pow(t, -1); }},
      {"pow_1.7", [](const Tensor& t) { return pow(t, 1.7); }},
      {"pow_tensor", [](const Tensor& t) { return pow(t, t); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -1.0, 2.0); }},
      {"clamp_max", [](const Tensor& t) { return clamp(t, std::nullopt, 0.25); }},
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor x = special_values(dt);
    for (const auto& [name, f] : ops) {
      const std::string what = name + " " + dtype_name(dt);
      // The CPU's float32 math is its own vectorised code (unary_math.h): a few ulps apart.
      expect_same(f(x), f(x.to(kCuda)), what, rtol_for(dt) * 4, rtol_for(dt) * 4);
    }
  }
}

TEST(CudaUnary, IntegerSemanticsEqualCpu) {
  REQUIRE_GPU();
  for (DType dt : {kInt8, kInt16, kInt32, kInt64, kUInt8}) {
    // -128 in int8: neg and abs wrap, as on the CPU.
    const Tensor x = from_vector<int64_t>({-128, -3, -1, 0, 1, 2, 5, 127}).to(dt);
    const Tensor xd = x.to(kCuda);
    const std::string n = dtype_name(dt);
    expect_same(neg(x), neg(xd), "neg " + n);
    expect_same(abs(x), abs(xd), "abs " + n);
    expect_same(relu(x), relu(xd), "relu " + n);
    expect_same(sign(x), sign(xd), "sign " + n);
    expect_same(logical_not(x), logical_not(xd), "logical_not " + n);
    expect_same(exp(x), exp(xd), "exp promotes " + n, 1e-6, 1e-6);
    expect_same(pow(x, 3), pow(xd, 3), "pow int " + n);
    expect_same(clamp(x, -2, 1000), clamp(xd, -2, 1000), "clamp saturates " + n);
    expect_same(clamp(x, 0.5), clamp(xd, 0.5), "clamp to float " + n, 1e-6, 1e-6);
  }
  const Tensor b = from_vector<bool>({true, false, true});
  expect_same(sign(b), sign(b.to(kCuda)), "sign bool");
  expect_same(sqrt(b), sqrt(b.to(kCuda)), "sqrt of bool promotes");
  EXPECT_CONTAINS(testing::error_of<TypeError>([&] { neg(b.to(kCuda)); }), "[neg]");
  EXPECT_CONTAINS(testing::error_of<TypeError>([&] { silu(from_vector<int64_t>({1}).to(kCuda)); }),
                  "[silu] expected a floating point tensor");
  EXPECT_CONTAINS(
      testing::error_of<ValueError>([&] { pow(from_vector<int64_t>({2}).to(kCuda), -1); }),
      "[pow] integers to negative integer powers are not allowed");
}

TEST(CudaUnary, InPlaceAndOutOnStridedViews) {
  REQUIRE_GPU();
  Tensor cpu = randn({6, 10});
  Tensor dev = cpu.to(kCuda);
  // Every other column, and a transposed view.
  exp_(cpu.slice(1, 0, std::nullopt, 2));
  exp_(dev.slice(1, 0, std::nullopt, 2));
  clamp_(cpu.t(), -0.5, 0.5);
  clamp_(dev.t(), -0.5, 0.5);
  expect_same(cpu, dev, "in-place on views", 1e-6, 1e-6);
  // out= of another dtype: computed in float32, cast into float64.
  Tensor out_c = empty({6, 10}, kFloat64),
         out_d = empty({6, 10}, TensorOptions(kFloat64).with_device(kCuda));
  sigmoid_out(out_c, cpu);
  sigmoid_out(out_d, dev);
  expect_same(out_c, out_d, "sigmoid out= float64", 1e-6, 1e-7);
}

// ---- binary ----

TEST(CudaBinary, CpuScalarOperands) {
  REQUIRE_GPU();
  const Tensor x = randn({5, 7});
  const Tensor xd = x.to(kCuda);
  expect_same(add(x, 2.5), add(xd, 2.5), "add(cuda, 2.5)");
  expect_same(sub(x, 2, 3), sub(xd, 2, 3), "sub with alpha");
  const Tensor s = scalar_tensor(-1.5, kFloat64);  // a CPU 0-dim tensor (not a wrapped number)
  expect_same(mul(x, s), mul(xd, s), "mul(cuda, cpu 0-dim)");
  expect_same(mul(s, x), mul(s, xd), "mul(cpu 0-dim, cuda)");
  expect_same(div(x, s), div(xd, s), "div(cuda, cpu 0-dim)");
  expect_same(maximum(x, scalar_tensor(0.0)), maximum(xd, scalar_tensor(0.0)), "maximum");
  expect_same(gt(x, s), gt(xd, s), "gt(cuda, cpu 0-dim)");
  expect_same(where(gt(x, 0), x, 0.0), where(gt(xd, 0), xd, 0.0), "where with a scalar");
  const Tensor mask = scalar_tensor(true, kBool);
  expect_same(masked_fill(x, mask, 7), masked_fill(xd, mask, 7), "masked_fill, cpu 0-dim mask");
  // Integer tensors with numbers: promotion as on the CPU.
  const Tensor i = from_vector<int32_t>({1, -2, 3, 7});
  expect_same(add(i, 2), add(i.to(kCuda), 2), "int + int number");
  expect_same(add(i, 0.5), add(i.to(kCuda), 0.5), "int + float number");
  expect_same(div(i, 2), div(i.to(kCuda), 2), "int / int is true division");
  expect_same(div(i, 0), div(i.to(kCuda), 0), "int / 0 gives inf");
}

TEST(CudaBinary, InPlaceOnStridedViewsAndZeroStrideBroadcasts) {
  REQUIRE_GPU();
  Tensor cpu = randn({8, 12});
  Tensor dev = cpu.to(kCuda);
  const Tensor row = randn({1, 6});                 // broadcast along rows: stride 0
  const Tensor col = randn({8, 1}).expand({8, 6});  // an expanded view: stride 0 along columns
  add_(cpu.slice(1, 1, std::nullopt, 2), row, 2);
  add_(dev.slice(1, 1, std::nullopt, 2), row.to(kCuda), 2);
  mul_(cpu.slice(1, 0, 6), col);
  mul_(dev.slice(1, 0, 6), col.to(kCuda).expand({8, 6}));
  maximum_(cpu.t(), 0.25);
  maximum_(dev.t(), 0.25);
  expect_same(cpu, dev, "in-place binaries on views", 1e-6, 1e-6);
  // Comparisons in place keep self's dtype (0 or 1).
  Tensor e_c = randint(0, 3, {4, 5}, kFloat32), e_d = e_c.to(kCuda);
  const Tensor other = randint(0, 3, {5}, kFloat32);
  eq_(e_c, other);
  eq_(e_d, other.to(kCuda));
  expect_same(e_c, e_d, "eq_ in place");
  // out= resized from the wrong shape.
  Tensor out_c = empty({1}, kBool), out_d = empty({1}, TensorOptions(kBool).with_device(kCuda));
  logical_xor_out(out_c, e_c, other);
  logical_xor_out(out_d, e_d, other.to(kCuda));
  expect_same(out_c, out_d, "logical_xor out= resized");
}

TEST(CudaBinary, NanAndIntegerSemanticsEqualCpu) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor a = special_values(dt);
    const Tensor b = special_values(dt, /*reversed=*/true);
    const Tensor ad = a.to(kCuda), bd = b.to(kCuda);
    const std::string n = dtype_name(dt);
    expect_same(maximum(a, b), maximum(ad, bd), "maximum NaN " + n);
    expect_same(minimum(a, b), minimum(ad, bd), "minimum NaN " + n);
    expect_same(eq(a, b), eq(ad, bd), "eq NaN " + n);
    expect_same(ne(a, b), ne(ad, bd), "ne NaN " + n);
    expect_same(le(a, b), le(ad, bd), "le " + n);
    expect_same(logical_and(a, b), logical_and(ad, bd), "logical_and " + n);
    expect_same(logical_or(a, b), logical_or(ad, bd), "logical_or " + n);
    expect_same(div(a, b), div(ad, bd), "div " + n, rtol_for(dt), 0);
    expect_same(add(a, b, 0.5), add(ad, bd, 0.5), "add alpha " + n, rtol_for(dt), 1e-12);
  }
  const Tensor i = from_vector<int8_t>({127, -128, 5, -3});
  const Tensor j = from_vector<int8_t>({1, -1, 3, 7});
  expect_same(add(i, j), add(i.to(kCuda), j.to(kCuda)), "int8 add wraps");
  expect_same(mul(i, j), mul(i.to(kCuda), j.to(kCuda)), "int8 mul wraps");
  expect_same(sub(i, j, 2), sub(i.to(kCuda), j.to(kCuda), 2), "int8 sub alpha");
  const Tensor t = from_vector<bool>({true, false, true, false});
  const Tensor f = from_vector<bool>({true, true, false, false});
  expect_same(add(t, f), add(t.to(kCuda), f.to(kCuda)), "bool add is or");
  expect_same(mul(t, f), mul(t.to(kCuda), f.to(kCuda)), "bool mul is and");
  EXPECT_CONTAINS(testing::error_of<TypeError>([&] { sub(t.to(kCuda), f.to(kCuda)); }),
                  "[sub] subtraction with two bool tensors is not supported");
  EXPECT_CONTAINS(
      testing::error_of<TypeError>([&] { add(i.to(kCuda), j.to(kCuda), 1.5); }),
      "[add] for integral input tensors, argument alpha must not be a floating point number");
  const Tensor c = from_vector<uint8_t>({1, 0, 2, 0});
  expect_same(where(c, i, j), where(c.to(kCuda), i.to(kCuda), j.to(kCuda)), "where uint8 cond");
}

TEST(CudaBinary, MixingDevicesNamesTheOpAndBothDevices) {
  REQUIRE_GPU();
  const Tensor dev = randn({3}).to(kCuda);
  const Tensor cpu = randn({3});
  for (const auto& [name, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { add(dev, cpu); }},
           {"mul", [&] { mul(cpu, dev); }},
           {"eq", [&] { eq(dev, cpu); }},
           {"where", [&] { where(gt(dev, 0), dev, cpu); }},
           {"pow", [&] { pow(dev, cpu); }},
       }) {
    const std::string msg = testing::error_of<ValueError>(f);
    EXPECT_CONTAINS(msg, "[" + name + "]");
    EXPECT_CONTAINS(msg, "cuda:0");
    EXPECT_CONTAINS(msg, "cpu");
  }
  // A CUDA 0-dim tensor does not mix with a CPU tensor (only CPU scalars travel).
  const std::string msg =
      testing::error_of<ValueError>([&] { add(cpu, scalar_tensor(1.0, kCuda)); });
  EXPECT_CONTAINS(msg, "[add]");
  // An output on the other device.
  Tensor out = empty({3});
  EXPECT_CONTAINS(testing::error_of<ValueError>([&] { add_out(out, dev, dev); }), "[add]");
}

TEST(CudaBinary, AllcloseAndEqualAnswerAsTheCpu) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kInt32, kBool}) {
    const Tensor a = special_values(dt);
    const Tensor b = special_values(dt, /*reversed=*/true);
    const Tensor ad = a.to(kCuda), bd = b.to(kCuda);
    const std::string n = dtype_name(dt);
    EXPECT_EQ(equal(a, a), equal(ad, ad)) << n;  // NaN != NaN for floats
    EXPECT_EQ(equal(a, b), equal(ad, bd)) << n;
    EXPECT_EQ(allclose(a, a, 1e-5, 1e-8, true), allclose(ad, ad, 1e-5, 1e-8, true)) << n;
    EXPECT_EQ(allclose(a, a), allclose(ad, ad)) << n;
    EXPECT_EQ(allclose(a, b), allclose(ad, bd)) << n;
  }
  const Tensor x = randn({300, 7});
  const Tensor y = add(x, 1e-4);
  EXPECT_TRUE(equal(x.to(kCuda), x.to(kCuda).t().contiguous().t()));
  EXPECT_FALSE(allclose(x.to(kCuda), y.to(kCuda), 0, 1e-5));
  EXPECT_TRUE(allclose(x.to(kCuda), y.to(kCuda), 0, 1e-3));
  // Broadcasting, as the CPU kernel.
  EXPECT_EQ(allclose(x, x.select(0, 0)), allclose(x.to(kCuda), x.select(0, 0).to(kCuda)));
  EXPECT_CONTAINS(testing::error_of<ValueError>([&] { equal(x.to(kCuda), x); }),
                  "[equal] expected both tensors on one device");
}

// ---- activation backwards ----

TEST(CudaActivationBackward, EveryOpEqualsCpu) {
  REQUIRE_GPU();
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"threshold", [](const Tensor& g, const Tensor& x) { return threshold_backward(g, x, 0.5); }},
      {"sigmoid", [](const Tensor& g, const Tensor& x) { return sigmoid_backward(g, x); }},
      {"tanh", [](const Tensor& g, const Tensor& x) { return tanh_backward(g, x); }},
      {"silu", [](const Tensor& g, const Tensor& x) { return silu_backward(g, x); }},
      {"gelu", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x); }},
      {"gelu_tanh", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, "tanh"); }},
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor x = mul(randn({9, 31}), 3.0).to(dt);
    const Tensor g = randn({9, 31}).to(dt);
    for (const auto& [name, f] : ops) {
      expect_same(f(g, x), f(g.to(kCuda), x.to(kCuda)), name + " " + dtype_name(dt),
                  rtol_for(dt) * 4, rtol_for(dt) * 4);
      // Strided operands.
      expect_same(f(g.t(), x.t()), f(g.to(kCuda).t(), x.to(kCuda).t()),
                  name + " strided " + dtype_name(dt), rtol_for(dt) * 4, rtol_for(dt) * 4);
    }
  }
}

// ---- the 64-bit index path ----

// A strided view whose byte offsets pass 2^31 (the loop's 64-bit offset calculator). Allocates
// about 2.2 GB on the device.
TEST(CudaPointwise, StridedViewBeyondTwoGigabytes) {
  REQUIRE_GPU();
  const int64_t rows = (int64_t{1} << 30) + 7;  // 2 bytes per row: 2 GiB + 14 bytes
  Tensor big = zeros({rows, 2}, TensorOptions(kInt8).with_device(kCuda));
  Tensor first = big.select(1, 0);  // stride 2 bytes: offsets up to 2^31 + 12
  add_(first, 3);
  sub_(first, big.select(1, 1), 1);  // two strided operands
  for (int64_t r : {int64_t{0}, int64_t{1} << 29, (int64_t{1} << 30) - 1, rows - 1}) {
    const std::vector<int64_t> v = to_vector<int64_t>(big.select(0, r).to(kCPU).to(kInt64));
    EXPECT_EQ(v, (std::vector<int64_t>{3, 0})) << "row " << r;
  }
}

}  // namespace
}  // namespace loom
