// The CUDA linear algebra, convolution and pooling kernels (cuBLASLt, cuDNN and loom's pooling
// loops) against the CPU kernels of the same operators. Label `cuda`: every test that needs a GPU
// skips, saying so, where none is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/config.h"
#include "loom/cuda.h"
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
    const bool ok = err <= atol + rtol * std::abs(w[i]) || (std::isnan(g[i]) && std::isnan(w[i]));
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
  const Tensor a = rand_t({2, 3}).to(kCuda), b = rand_t({4, 5}).to(kCuda);
  EXPECT_THROW(mm(a, b), ValueError);
  EXPECT_THROW(bmm(rand_t({2, 3, 4}).to(kCuda), rand_t({3, 4, 5}).to(kCuda)), ValueError);
  EXPECT_THROW(mm(a, rand_t({3, 2}, kFloat64).to(kCuda)), TypeError);
  EXPECT_THROW(mm(a, rand_t({3, 2})), ValueError);  // one on the CPU
  EXPECT_THROW(mm(ones({2, 2}, TensorOptions(kBool)).to(kCuda),
                  ones({2, 2}, TensorOptions(kBool)).to(kCuda)),
               TypeError);
}

}  // namespace
}  // namespace loom
