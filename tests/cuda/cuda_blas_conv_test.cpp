// The CUDA linear algebra, convolution and pooling kernels (cuBLASLt, cuDNN and loom's pooling
// loops) against the CPU kernels of the same operators. Label `cuda`: every test that needs a GPU
// skips, saying so, where none is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "loom/tensor.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

// Sets TF32 for the scope of a test and restores the setting after it.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow) : previous_(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Scope() { cuda::set_allow_tf32(previous_); }

 private:
  bool previous_;
};

std::vector<double> values_of(const Tensor& t) {
  const Tensor c = t.to(kCPU).to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Expects got (any device) to match want (CPU) elementwise: |got - want| <= atol + rtol * |want|.
void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const std::vector<double> g = values_of(got), w = values_of(want);
  size_t bad = 0;
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]);
    const bool ok = g[i] == w[i] || err <= atol + rtol * std::abs(w[i]) ||
                    (std::isnan(g[i]) && std::isnan(w[i]));
    if (!ok) {
      ++bad;
      if (err > worst) worst = err, worst_at = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << g.size() << " elements differ; worst at "
                     << worst_at << ": got " << (g.empty() ? 0 : g[worst_at]) << ", want "
                     << (w.empty() ? 0 : w[worst_at]);
}

Tensor rand_t(std::vector<int64_t> shape, DType dt = kFloat32) {
  return randn(shape).to(dt);
}

// Tolerances for a product over k terms of unit-scale values, by dtype and TF32.
struct Tol {
  double rtol, atol;
};
Tol gemm_tol(DType dt, int64_t k, bool tf32 = false) {
  const double s = std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
  if (dt == kFloat64) return {1e-12, 1e-12 * s};
  if (dt == kFloat32) return tf32 ? Tol{5e-3, 5e-3 * s} : Tol{1e-5, 2e-6 * s};
  return {2e-2, 1e-2 * s};  // float16 / bfloat16: one rounding of a float32 sum, plus inputs
}

// The kind of loom error `f` throws ("ValueError", ...), or "none".
template <class F>
std::string error_kind(const F& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return "none";
}

// Expects f(kCuda) to fail as f(kCPU) does (the same shape functions run on both).
template <class F>
void expect_cpu_error(const F& f, const std::string& what) {
  const std::string cpu = error_kind([&] { f(kCPU); });
  EXPECT_NE(cpu, "none") << what << ": the CPU accepts it";
  EXPECT_EQ(error_kind([&] { f(kCuda); }), cpu) << what;
}

// ---------------------------------------------------------------- settings (no GPU needed)

TEST(CudaTf32Setting, DefaultsOffAndIsSettableThroughTheApiAndTheRegistry) {
  Tf32Scope restore(cuda::allow_tf32());
  config::set("LOOM_ALLOW_TF32", "");
  EXPECT_FALSE(cuda::allow_tf32());  // off by default, as PyTorch's matmul
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  EXPECT_EQ(config::get("LOOM_ALLOW_TF32"), "1");
  config::set("LOOM_ALLOW_TF32", "off");
  EXPECT_FALSE(cuda::allow_tf32());
  EXPECT_THROW(config::set("LOOM_ALLOW_TF32", "maybe"), ValueError);
}

// ---------------------------------------------------------------- GEMM

TEST(CudaGemm, MatchesCpuForEveryFloatDtype) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1, 1}, {3, 4, 5}, {64, 128, 96}, {7, 300, 5}, {129, 65, 257}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const auto& s : shapes) {
      const Tensor a = rand_t({s[0], s[1]}, dt), b = rand_t({s[1], s[2]}, dt);
      const Tol t = gemm_tol(dt, s[1]);
      expect_close(mm(a.to(kCuda), b.to(kCuda)), mm(a, b), t.rtol, t.atol,
                   "mm " + std::string(dtype_name(dt)) + " " + std::to_string(s[0]) + "x" +
                       std::to_string(s[1]) + "x" + std::to_string(s[2]));
    }
  }
}

TEST(CudaGemm, Tf32IsLooseButClose) {
  REQUIRE_GPU();
  Tf32Scope tf32(true);
  const Tensor a = rand_t({256, 512}), b = rand_t({512, 128});
  const Tol t = gemm_tol(kFloat32, 512, true);
  const Tensor got = mm(a.to(kCuda), b.to(kCuda));
  expect_close(got, mm(a, b), t.rtol, t.atol, "mm tf32");
  // TF32 off again: exact float32 (the cached algorithm of the TF32 run is not reused).
  cuda::set_allow_tf32(false);
  const Tol exact = gemm_tol(kFloat32, 512);
  expect_close(mm(a.to(kCuda), b.to(kCuda)), mm(a, b), exact.rtol, exact.atol, "mm after tf32");
}

TEST(CudaGemm, TransposedAndStridedOperandsMatchCpu) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  for (DType dt : {kFloat32, kFloat16}) {
    const Tol t = gemm_tol(dt, 40);
    const Tensor a = rand_t({40, 30}, dt), b = rand_t({50, 40}, dt);
    const Tensor da = a.to(kCuda), db = b.to(kCuda);
    const std::string n = dtype_name(dt);
    // a^T [30, 40] @ b^T [40, 50]: both read transposed.
    expect_close(mm(da.t(), db.t()), mm(a.t(), b.t()), t.rtol, t.atol, "mm t t " + n);
    // Column slices of wider matrices (leading dimension > columns, odd start).
    const Tensor wide = rand_t({30, 47}, dt), wide2 = rand_t({40, 61}, dt);
    const Tensor dwide = wide.to(kCuda), dwide2 = wide2.to(kCuda);
    expect_close(mm(dwide.slice(1, 3, 43), dwide2.slice(1, 1, 51)),
                 mm(wide.slice(1, 3, 43), wide2.slice(1, 1, 51)), t.rtol, t.atol, "slices " + n);
    // Every other row and column: no BLAS layout, copied first.
    const Tensor big = rand_t({60, 80}, dt);
    const Tensor dbig = big.to(kCuda);
    const Tensor sa = big.slice(0, 0, std::nullopt, 2).slice(1, 0, std::nullopt, 2);  // [30, 40]
    const Tensor dsa = dbig.slice(0, 0, std::nullopt, 2).slice(1, 0, std::nullopt, 2);
    expect_close(mm(dsa, db.t()), mm(sa, b.t()), t.rtol, t.atol, "every other " + n);
    // Expanded rows (stride 0).
    const Tensor row = rand_t({1, 40}, dt);
    expect_close(mm(row.to(kCuda).expand({9, 40}), db.t()), mm(row.expand({9, 40}), b.t()), t.rtol,
                 t.atol, "expanded " + n);
  }
}

TEST(CudaGemm, BmmMatchesCpuWithTransposedAndBroadcastBatches) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    const Tol t = gemm_tol(dt, 33);
    const Tensor a = rand_t({5, 17, 33}, dt), b = rand_t({5, 33, 9}, dt);
    const Tensor da = a.to(kCuda), db = b.to(kCuda);
    const std::string n = dtype_name(dt);
    expect_close(bmm(da, db), bmm(a, b), t.rtol, t.atol, "bmm " + n);
    expect_close(bmm(db.transpose(1, 2), da.transpose(1, 2)),
                 bmm(b.transpose(1, 2), a.transpose(1, 2)), t.rtol, t.atol, "bmm t " + n);
    const Tensor one = rand_t({1, 33, 9}, dt);
    expect_close(bmm(da, one.to(kCuda).expand({5, 33, 9})), bmm(a, one.expand({5, 33, 9})), t.rtol,
                 t.atol, "bmm broadcast " + n);
    // matmul's broadcasting batch (composite: bmm / mm on reshaped views).
    const Tensor c = rand_t({2, 1, 6, 33}, dt), d = rand_t({3, 33, 4}, dt);
    expect_close(matmul(c.to(kCuda), d.to(kCuda)), matmul(c, d), t.rtol, t.atol, "matmul " + n);
  }
}

TEST(CudaGemm, LinearAndAddmmBiasMatchCpu) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tol t = gemm_tol(dt, 70);
    const std::string n = dtype_name(dt);
    const Tensor x = rand_t({33, 70}, dt), w = rand_t({50, 70}, dt), bias = rand_t({50}, dt);
    const Tensor dx = x.to(kCuda), dw = w.to(kCuda), dbias = bias.to(kCuda);
    // The bias epilogue (vector bias, beta 1), a 3-D input and no bias.
    expect_close(linear(dx, dw, dbias), linear(x, w, bias), t.rtol, t.atol, "linear " + n);
    const Tensor x3 = rand_t({2, 5, 70}, dt);
    expect_close(linear(x3.to(kCuda), dw, dbias), linear(x3, w, bias), t.rtol, t.atol,
                 "linear 3-D " + n);
    expect_close(linear(dx, dw), linear(x, w), t.rtol, t.atol, "linear no bias " + n);
    // A bias that is a strided view (copied to an aligned vector for the epilogue).
    const Tensor wide_bias = rand_t({101}, dt);
    expect_close(linear(dx, dw, wide_bias.to(kCuda).slice(0, 1, std::nullopt, 2)),
                 linear(x, w, wide_bias.slice(0, 1, std::nullopt, 2)), t.rtol, t.atol,
                 "linear strided bias " + n);
    // addmm: row bias with alpha; matrix self with beta; column bias; scalar self; beta 0 with
    // NaN in self (never read).
    const Tensor wt = w.t(), dwt = dw.t();
    expect_close(addmm(dbias, dx, dwt, 1, 0.5), addmm(bias, x, wt, 1, 0.5), t.rtol, t.atol,
                 "addmm row " + n);
    const Tensor self = rand_t({33, 50}, dt);
    expect_close(addmm(self.to(kCuda), dx, dwt, -1.5, 0.25), addmm(self, x, wt, -1.5, 0.25), t.rtol,
                 t.atol, "addmm matrix " + n);
    const Tensor col = rand_t({33, 1}, dt);
    expect_close(addmm(col.to(kCuda), dx, dwt), addmm(col, x, wt), t.rtol, t.atol,
                 "addmm column " + n);
    const Tensor scalar = rand_t({}, dt);
    expect_close(addmm(scalar.to(kCuda), dx, dwt), addmm(scalar, x, wt), t.rtol, t.atol,
                 "addmm scalar " + n);
    const Tensor nan_self = full({33, 50}, NAN, TensorOptions(dt));
    expect_close(addmm(nan_self.to(kCuda), dx, dwt, 0, 1), addmm(nan_self, x, wt, 0, 1), t.rtol,
                 t.atol, "addmm beta 0 " + n);
  }
}

TEST(CudaGemm, LargeInnerDimension) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor a = rand_t({8, 1 << 16}, dt), b = rand_t({1 << 16, 12}, dt);
    const Tol t = gemm_tol(dt, 1 << 16);
    expect_close(mm(a.to(kCuda), b.to(kCuda)), mm(a, b), t.rtol, t.atol, "large k");
  }
}

TEST(CudaGemm, IntegerProductsAreExact) {
  REQUIRE_GPU();
  for (DType dt : {kUInt8, kInt16, kInt32, kInt64}) {
    const Tensor a = randint(-5, 6, {7, 9}).to(dt), b = randint(-5, 6, {9, 4}).to(dt);
    EXPECT_TRUE(equal(mm(a.to(kCuda), b.to(kCuda)).to(kCPU), mm(a, b))) << dt;
    const Tensor ba = randint(-5, 6, {3, 7, 9}).to(dt), bb = randint(-5, 6, {3, 9, 4}).to(dt);
    EXPECT_TRUE(equal(bmm(ba.to(kCuda), bb.to(kCuda)).to(kCPU), bmm(ba, bb))) << dt;
    const Tensor s = randint(-5, 6, {4}).to(dt);
    EXPECT_TRUE(
        equal(addmm(s.to(kCuda), a.to(kCuda), b.to(kCuda), 2, 3).to(kCPU), addmm(s, a, b, 2, 3)))
        << dt;
    const Tensor v = randint(-5, 6, {9}).to(dt);
    EXPECT_TRUE(equal(dot(v.to(kCuda), v.to(kCuda)).to(kCPU), dot(v, v))) << dt;
  }
}

TEST(CudaGemm, DotMatchesCpu) {
  REQUIRE_GPU();
  Tf32Scope tf32(false);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor x = rand_t({1000}, dt), y = rand_t({2000}, dt);
    const Tensor ys = y.slice(0, 0, std::nullopt, 2);
    const Tol t = gemm_tol(dt, 1000);
    expect_close(dot(x.to(kCuda), y.to(kCuda).slice(0, 0, std::nullopt, 2)), dot(x, ys), t.rtol,
                 t.atol, "dot " + std::string(dtype_name(dt)));
  }
}

TEST(CudaGemm, EmptyProductsFollowTheCpu) {
  REQUIRE_GPU();
  const Tensor self = rand_t({3, 4});
  const Tensor a = empty_tensor({3, 0}, kFloat32), b = empty_tensor({0, 4}, kFloat32);
  expect_close(addmm(self.to(kCuda), a.to(kCuda), b.to(kCuda), 0.5, 2.0), addmm(self, a, b, 0.5, 2),
               0, 1e-7, "addmm k=0");
  expect_close(mm(a.to(kCuda), b.to(kCuda)), mm(a, b), 0, 0, "mm k=0");
  EXPECT_EQ(mm(empty_tensor({0, 3}, kFloat32, kCuda), rand_t({3, 4}).to(kCuda)).sizes(),
            IntArrayRef({0, 4}));
  EXPECT_EQ(bmm(empty_tensor({0, 3, 4}, kFloat32, kCuda), empty_tensor({0, 4, 5}, kFloat32, kCuda))
                .sizes(),
            IntArrayRef({0, 3, 5}));
}

TEST(CudaGemm, ShapeErrorsAreTheCpus) {
  REQUIRE_GPU();
  const Tensor a = rand_t({2, 3}), b = rand_t({4, 5});
  expect_cpu_error([&](Device d) { mm(a.to(d), b.to(d)); }, "mm mismatch");
  expect_cpu_error(
      [&](Device d) {
        bmm(rand_t({2, 3, 4}).to(d), rand_t({3, 4, 5}).to(d));
      },
      "bmm batch");
  expect_cpu_error([&](Device d) { mm(a.to(d), rand_t({3, 2}, kFloat64).to(d)); }, "mm dtypes");
  expect_cpu_error(
      [&](Device d) {
        const Tensor t = ones({2, 2}, TensorOptions(kBool)).to(d);
        mm(t, t);
      },
      "mm bool");
  expect_cpu_error(
      [&](Device d) {
        const Tensor t = ones({2, 2}, TensorOptions(kInt32)).to(d);
        addmm(t, t, t, 1.5, 1);
      },
      "addmm integer with a floating beta");
  EXPECT_THROW(mm(a.to(kCuda), rand_t({3, 2})), ValueError);  // one on the CPU
}

// ---------------------------------------------------------------- convolution (cuDNN)

struct ConvConfig {
  std::vector<int64_t> input, weight;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::vector<ConvConfig> conv_configs() {
  return {
      {{2, 3, 9, 11}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{2, 4, 10, 10}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2, true},     // groups
      {{1, 6, 12, 9}, {6, 1, 3, 2}, {2, 1}, {0, 2}, {2, 1}, 6, false},     // depthwise, dilation
      {{3, 8, 7, 7}, {16, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},      // pointwise
      {{2, 5, 17, 13}, {7, 5, 5, 5}, {3, 2}, {2, 1}, {1, 2}, 1, true},     // uneven output
      {{3, 9, 8}, {4, 3, 2, 2}, {1, 1}, {1, 0}, {1, 1}, 1, true},          // unbatched
      {{4, 32, 16, 16}, {64, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},  // a real layer
  };
}

std::string conv_name(const ConvConfig& c, DType dt) {
  std::string s = std::string(dtype_name(dt)) + " input [";
  for (int64_t v : c.input) s += std::to_string(v) + " ";
  s += "] weight [";
  for (int64_t v : c.weight) s += std::to_string(v) + " ";
  return s + "] groups " + std::to_string(c.groups);
}

// Tolerance for a sum over `terms` unit-scale products. cuDNN may pick Winograd or FFT algorithms,
// whose float32 rounding differs more from the CPU's im2col + gemm than a gemm's does.
Tol conv_tol(DType dt, int64_t terms, bool tf32 = false) {
  const double s = std::sqrt(static_cast<double>(std::max<int64_t>(terms, 1)));
  // cuDNN may choose Winograd or FFT algorithms, whose float32 rounding is a few times a direct
  // sum's (seen on an H200: 5e-4 on one grad_weight element summed over 1024 terms).
  if (dt == kFloat32 && !tf32) return {1e-4, 3e-5 * s};
  if (dt == kFloat64) return {1e-10, 1e-10 * s};
  return gemm_tol(dt, terms, tf32);
}

void check_conv(DType dt, bool tf32) {
  Tf32Scope scope(tf32);
  for (const ConvConfig& c : conv_configs()) {
    const Tensor x = rand_t(c.input, dt), w = rand_t(c.weight, dt);
    const std::optional<Tensor> b =
        c.bias ? std::optional<Tensor>(rand_t({c.weight[0]}, dt)) : std::nullopt;
    const std::optional<Tensor> db = b ? std::optional<Tensor>(b->to(kCuda)) : std::nullopt;
    const std::string n = conv_name(c, dt);
    const Tensor want = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    const Tensor got =
        conv2d(x.to(kCuda), w.to(kCuda), db, c.stride, c.padding, c.dilation, c.groups);
    EXPECT_TRUE(got.is_cuda()) << n;
    const int64_t k = c.weight[1] * c.weight[2] * c.weight[3];
    const Tol t = conv_tol(dt, k, tf32);
    expect_close(got, want, t.rtol, t.atol, "conv2d " + n);

    const Tensor go = rand_t(want.sizes().vec(), dt);
    const auto [gi, gw, gb] = convolution_backward(go, x, w, c.stride, c.padding, c.dilation,
                                                   c.groups, {true, true, c.bias});
    const auto [dgi, dgw, dgb] =
        convolution_backward(go.to(kCuda), x.to(kCuda), w.to(kCuda), c.stride, c.padding,
                             c.dilation, c.groups, {true, true, c.bias});
    const Tol ti = conv_tol(dt, c.weight[0] / c.groups * c.weight[2] * c.weight[3], tf32);
    expect_close(dgi, gi, ti.rtol, ti.atol, "grad_input " + n);
    const int64_t spatial = want.numel() / (want.dim() == 4 ? want.size(1) : want.size(0));
    const Tol tw = conv_tol(dt, spatial, tf32);
    expect_close(dgw, gw, tw.rtol, tw.atol, "grad_weight " + n);
    if (c.bias) {
      expect_close(dgb, gb, tw.rtol, tw.atol, "grad_bias " + n);
    } else {
      EXPECT_FALSE(dgb.defined()) << n;
    }
  }
}

TEST(CudaConv, Float32MatchesCpuWithoutTf32) {
  REQUIRE_GPU();
  check_conv(kFloat32, false);
}

TEST(CudaConv, Float32WithTf32IsClose) {
  REQUIRE_GPU();
  check_conv(kFloat32, true);
}

TEST(CudaConv, Float64MatchesCpu) {
  REQUIRE_GPU();
  check_conv(kFloat64, false);
}

TEST(CudaConv, ReducedFloatsAreClose) {
  REQUIRE_GPU();
  check_conv(kFloat16, false);
  check_conv(kBFloat16, false);
}

TEST(CudaConv, StridedInputsAndMasksAndEmptyBatches) {
  REQUIRE_GPU();
  Tf32Scope scope(false);
  // A channels-sliced input (non-contiguous): made contiguous before cuDNN.
  const Tensor big = rand_t({2, 6, 8, 8}), w = rand_t({3, 3, 3, 3});
  const Tensor x = big.slice(1, 0, std::nullopt, 2);
  const Tol t = conv_tol(kFloat32, 27);
  expect_close(conv2d(big.to(kCuda).slice(1, 0, std::nullopt, 2), w.to(kCuda)), conv2d(x, w),
               t.rtol, t.atol, "strided input");
  // Only grad_weight asked for.
  const Tensor go = rand_t({2, 3, 6, 6});
  const auto [gi, gw, gb] = convolution_backward(go.to(kCuda), x.to(kCuda), w.to(kCuda), {1, 1},
                                                 {0, 0}, {1, 1}, 1, {false, true, false});
  EXPECT_FALSE(gi.defined());
  EXPECT_FALSE(gb.defined());
  const auto cpu = convolution_backward(go, x, w, {1, 1}, {0, 0}, {1, 1}, 1, {false, true, false});
  const Tol tw = conv_tol(kFloat32, 72);
  expect_close(gw, std::get<1>(cpu), tw.rtol, tw.atol, "grad_weight only");
  // An empty batch: an empty output; zero weight and bias gradients.
  const Tensor e = empty_tensor({0, 3, 5, 5}, kFloat32, kCuda);
  const Tensor wd = w.to(kCuda), bd = rand_t({3}).to(kCuda);
  const Tensor out = conv2d(e, wd, bd);
  EXPECT_EQ(out.sizes(), IntArrayRef({0, 3, 3, 3}));
  const auto [egi, egw, egb] =
      convolution_backward(empty_tensor({0, 3, 3, 3}, kFloat32, kCuda), e, wd, {1, 1}, {0, 0},
                           {1, 1}, 1, {true, true, true});
  EXPECT_EQ(egi.sizes(), IntArrayRef({0, 3, 5, 5}));
  EXPECT_TRUE(equal(egw.to(kCPU), zeros({3, 3, 3, 3})));
  EXPECT_TRUE(equal(egb.to(kCPU), zeros({3})));
}

TEST(CudaConv, ShapeErrorsAreTheCpus) {
  REQUIRE_GPU();
  const Tensor x = rand_t({1, 4, 5, 5});
  expect_cpu_error([&](Device d) { conv2d(x.to(d), rand_t({2, 3, 3, 3}).to(d)); }, "channels");
  expect_cpu_error(
      [&](Device d) {
        conv2d(x.to(d), rand_t({2, 4, 7, 7}).to(d));
      },
      "kernel larger than the input");
  expect_cpu_error(
      [&](Device d) {
        conv2d(x.to(d), rand_t({3, 2, 3, 3}).to(d), std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2);
      },
      "out_channels not divisible by groups");
  expect_cpu_error(
      [&](Device d) {
        conv2d(x.to(d), rand_t({2, 4, 3, 3}, kFloat64).to(d));
      },
      "dtypes");
  expect_cpu_error(
      [&](Device d) {
        convolution_backward(rand_t({1, 2, 2, 2}).to(d), x.to(d), rand_t({2, 4, 3, 3}).to(d),
                             {1, 1}, {0, 0}, {1, 1}, 1, {true, true, true});
      },
      "grad_output shape");
}

// ---------------------------------------------------------------- pooling

struct PoolConfig {
  std::vector<int64_t> shape;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode;
};

std::vector<PoolConfig> pool_configs() {
  return {
      {{2, 3, 8, 8}, {2, 2}, {}, {0, 0}, {1, 1}, false},
      {{2, 2, 9, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
      {{1, 2, 6, 7}, {3, 2}, {2, 2}, {1, 0}, {1, 1}, true},
      {{1, 3, 11, 10}, {3, 2}, {1, 2}, {1, 1}, {2, 2}, true},  // dilation
      {{3, 5, 5}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false},      // unbatched, overlapping
      {{2, 4, 33, 31}, {5, 3}, {3, 2}, {2, 1}, {1, 1}, true},
  };
}

// Values with ties (integers in a small range), a -inf and a NaN, in dtype dt.
Tensor pool_input(const std::vector<int64_t>& shape, DType dt, bool specials) {
  Tensor t = randint(-3, 4, shape).to(kFloat64);
  if (specials && t.numel() > 10) {
    double* p = t.data_ptr<double>();
    p[3] = -INFINITY;
    p[7] = NAN;
  }
  return t.to(dt);
}

TEST(CudaPool, MaxPoolValuesAndIndicesAreTheCpus) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8}) {
    for (const PoolConfig& c : pool_configs()) {
      const Tensor x = pool_input(c.shape, dt, is_floating(dt));
      const auto [v, i] =
          max_pool2d_with_indices(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      const auto [dv, di] = max_pool2d_with_indices(x.to(kCuda), c.kernel, c.stride, c.padding,
                                                    c.dilation, c.ceil_mode);
      ASSERT_TRUE(dv.is_cuda() && di.is_cuda());
      EXPECT_TRUE(equal(di.to(kCPU), i)) << dtype_name(dt) << " indices";
      expect_close(dv, v, 0, 0, std::string("max_pool2d values ") + dtype_name(dt));
      if (!is_floating(dt)) continue;
      const Tensor go = rand_t(v.sizes().vec(), dt);
      const Tensor gi = max_pool2d_with_indices_backward(go, x, c.kernel, c.stride, c.padding,
                                                         c.dilation, c.ceil_mode, i);
      const Tensor dgi = max_pool2d_with_indices_backward(
          go.to(kCuda), x.to(kCuda), c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, di);
      // The same gradients added in the same order (Note [CUDA pooling loops]).
      expect_close(dgi, gi, 0, 0, std::string("max_pool2d backward ") + dtype_name(dt));
    }
  }
}

TEST(CudaPool, AvgPoolMatchesCpu) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    for (const PoolConfig& c : pool_configs()) {
      if (c.dilation[0] != 1 || c.dilation[1] != 1) continue;  // avg_pool2d has no dilation
      for (bool include_pad : {true, false}) {
        for (std::optional<int64_t> divisor :
             {std::optional<int64_t>(), std::optional<int64_t>(3)}) {
          const std::string n = std::string(dtype_name(dt)) + (include_pad ? " incl" : " excl") +
                                (divisor ? " divisor 3" : "");
          const Tensor x = is_floating(dt) ? rand_t(c.shape, dt) : pool_input(c.shape, dt, false);
          // Through the dispatcher by name: the public avg_pool2d has no divisor_override.
          auto run = [&](const Tensor& in) {
            using Sig = Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool,
                               std::optional<int64_t>);
            return Dispatcher::singleton()
                .find_typed<Sig>("loom::avg_pool2d")
                .call(in, c.kernel, c.stride, c.padding, c.ceil_mode, include_pad, divisor);
          };
          const Tensor want = run(x);
          const double tol = is_floating(dt) && dt != kFloat64 ? 1e-6 : 0;
          expect_close(run(x.to(kCuda)), want, tol, tol, "avg_pool2d " + n);
          if (!is_floating(dt)) continue;
          const Tensor go = rand_t(want.sizes().vec(), dt);
          const Tensor gi = avg_pool2d_backward(go, x, c.kernel, c.stride, c.padding, c.ceil_mode,
                                                include_pad, divisor);
          const Tensor dgi = avg_pool2d_backward(go.to(kCuda), x.to(kCuda), c.kernel, c.stride,
                                                 c.padding, c.ceil_mode, include_pad, divisor);
          expect_close(dgi, gi, tol, tol, "avg_pool2d backward " + n);
        }
      }
    }
  }
}

TEST(CudaPool, ShapeErrorsAndEmptyInputsAreTheCpus) {
  REQUIRE_GPU();
  const Tensor x = rand_t({1, 2, 4, 4});
  expect_cpu_error([&](Device d) { max_pool2d(x.to(d), {5, 5}); }, "kernel larger than input");
  expect_cpu_error([&](Device d) { max_pool2d(x.to(d), {2, 2}, {0, 1}); }, "zero stride");
  expect_cpu_error(
      [&](Device d) {
        avg_pool2d(x.to(d), {2, 2}, {}, {2, 2});
      },
      "padding over half the kernel");
  expect_cpu_error(
      [&](Device d) {
        max_pool2d(ones({2, 4, 4}, TensorOptions(kBool)).to(d), {2, 2});
      },
      "bool");
  expect_cpu_error(
      [&](Device d) {
        avg_pool2d_backward(rand_t({1, 2, 3, 3}).to(d), x.to(d), {2, 2}, {2, 2}, {0, 0}, false,
                            true);
      },
      "grad_output shape");
  const auto [v, i] = max_pool2d_with_indices(empty_tensor({0, 2, 4, 4}, kFloat32, kCuda), {2, 2});
  EXPECT_EQ(v.sizes(), IntArrayRef({0, 2, 2, 2}));
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(avg_pool2d(empty_tensor({0, 2, 4, 4}, kFloat32, kCuda), {2, 2}).sizes(),
            IntArrayRef({0, 2, 2, 2}));
}

}  // namespace
}  // namespace loom
