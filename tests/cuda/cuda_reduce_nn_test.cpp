// The CUDA reductions, softmax, layer norm, losses and index kernels on a real GPU, checked against
// the CPU kernels of the same operators: large reductions against a float64 reference and their
// determinism, reductions over non-inner dims, softmax rows of 1 and 50257 elements, the
// backwards, embedding_dense_backward with repeated indices, and typed index errors. Label `cuda`:
// every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/tensor.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfinity = std::numeric_limits<double>::infinity();

Tensor dev(const Tensor& t) {
  return t.to(kCuda);
}
Tensor host(const Tensor& t) {
  EXPECT_TRUE(t.is_cuda()) << "expected a CUDA result";
  return t.to(kCPU);
}

// got (a CUDA result) matches want (the CPU kernel's) within tolerances, same shape and dtype.
void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  const Tensor g = host(got);
  ASSERT_EQ(g.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(g.dtype(), want.dtype()) << what;
  EXPECT_TRUE(allclose(g.to(kFloat64), want.to(kFloat64), rtol, atol, /*equal_nan=*/true))
      << what << "\n got: " << g << "\n want: " << want;
}
void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  const Tensor g = host(got);
  ASSERT_EQ(g.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(g.dtype(), want.dtype()) << what;
  EXPECT_TRUE(equal(g, want)) << what;
}
Tensor longs_of(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector<int64_t>(v, {n});
}
// The bytes of two CPU tensors are identical (bit-identical floats, NaNs included).
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// ---- reductions ----

TEST(CudaReduce, SumOf2To26FloatsMatchesDoubleAndIsDeterministic) {
  REQUIRE_GPU();
  const int64_t n = int64_t{1} << 26;
  const Tensor x = rand({n});
  const double want = sum(x, std::nullopt, false, kFloat64).item<double>();
  const Tensor xd = dev(x);
  const Tensor s1 = host(sum(xd)), s2 = host(sum(xd));
  EXPECT_TRUE(same_bits(s1, s2)) << s1.item<double>() << " vs " << s2.item<double>();
  EXPECT_NEAR(s1.item<double>(), want, 1e-6 * want);
  EXPECT_NEAR(host(mean(xd)).item<double>(), want / static_cast<double>(n), 1e-6);
  // Extremes and their indices are exact.
  expect_equal(amax(xd, {0}), amax(x, {0}), "amax 2^26");
  expect_equal(argmax(xd), argmax(x), "argmax 2^26");
  expect_equal(argmin(xd), argmin(x), "argmin 2^26");
  expect_close(var(xd), var(x), 1e-4, 1e-7, "var 2^26");
  expect_close(norm(xd), norm(x), 1e-5, 0, "norm 2^26");
  // Another order of the same values: still within float rounding of the double reference.
  const Tensor twice = host(sum(dev(x.view({1 << 13, 1 << 13})), IntArrayRef{0, 1}));
  EXPECT_NEAR(twice.item<double>(), want, 1e-6 * want);
}

TEST(CudaReduce, NonInnermostDimsOfLargeTensors) {
  REQUIRE_GPU();
  const Tensor x = randn({64, 1000, 33});
  const Tensor xd = dev(x);
  expect_close(sum(xd, IntArrayRef{1}), sum(x, IntArrayRef{1}), 1e-4, 1e-4, "sum dim 1");
  expect_close(sum(xd, IntArrayRef{0, 2}), sum(x, IntArrayRef{0, 2}), 1e-4, 1e-3, "sum dims 0,2");
  expect_close(sum(xd, IntArrayRef{0}, true), sum(x, IntArrayRef{0}, true), 1e-4, 1e-4,
               "sum dim 0 keepdim");
  expect_close(mean(xd, IntArrayRef{0, 1}), mean(x, IntArrayRef{0, 1}), 1e-4, 1e-6, "mean 0,1");
  expect_close(var(xd, IntArrayRef{0}), var(x, IntArrayRef{0}), 1e-4, 1e-6, "var dim 0");
  expect_close(loom::std(xd, IntArrayRef{1}, 0, true), loom::std(x, IntArrayRef{1}, 0, true), 1e-4,
               1e-6, "std dim 1");
  expect_close(logsumexp(xd, {0}), logsumexp(x, {0}), 1e-5, 1e-5, "logsumexp dim 0");
  expect_close(norm(xd, 3, IntArrayRef{1}), norm(x, 3, IntArrayRef{1}), 1e-4, 1e-5, "norm 3");
  expect_equal(amin(xd, {0, 2}), amin(x, {0, 2}), "amin 0,2");
  // Indices follow the logical order, also through a transposed (non-contiguous) input.
  const Tensor t = x.transpose(0, 2);
  expect_equal(argmax(dev(x).transpose(0, 2), 1), argmax(t, 1), "argmax transposed");
  auto [v, i] = max(xd, 0);
  auto [cv, ci] = max(x, 0);
  expect_equal(v, cv, "max.dim values");
  expect_equal(i, ci, "max.dim indices");
  // Column sums long enough to be split across blocks (partials added in a fixed order).
  const Tensor tall = randn({300000, 7});
  const Tensor tall_d = dev(tall);
  const Tensor c1 = sum(tall_d, IntArrayRef{0}), c2 = sum(tall_d, IntArrayRef{0});
  EXPECT_TRUE(same_bits(host(c1), host(c2)));
  expect_close(c1, sum(tall, IntArrayRef{0}), 1e-4, 1e-2, "column sums 300000 x 7");
  // Rows of a transposed square matrix: neither the kept nor the reduced dim is contiguous in
  // the way the inner and outer loops want; still the CPU's result.
  const Tensor sq = randn({2048, 2048});
  expect_close(sum(dev(sq).t(), IntArrayRef{1}), sum(sq.t(), IntArrayRef{1}), 1e-4, 1e-3,
               "rows of a transpose");
}

// Rows whose reduced elements are contiguous read 16-byte vectors (Note [Vector loads in
// reductions]): rows starting at every offset modulo four, lengths around the vector width and
// the block width, float and int32, sums, extremes with their indices, and variance — against
// the CPU kernels.
TEST(CudaReduce, VectorLoadsWithUnalignedHeadsAndRaggedTails) {
  REQUIRE_GPU();
  for (int64_t len : {1, 3, 4, 5, 7, 8, 33, 127, 513, 4099, 70001}) {
    for (int64_t offset = 0; offset < 4; ++offset) {
      const std::string what = "len " + std::to_string(len) + " offset " + std::to_string(offset);
      // A flat buffer viewed as 6 rows of `len` starting `offset` elements in, row stride len+1,
      // so that consecutive rows start at different alignments as well.
      const Tensor flat = randn({offset + 6 * (len + 1)});
      const Tensor rows = as_strided(flat, {6, len}, {len + 1, 1}, offset);
      const Tensor rows_d = as_strided(dev(flat), {6, len}, {len + 1, 1}, offset);
      expect_close(sum(rows_d, IntArrayRef{1}), sum(rows, IntArrayRef{1}), 1e-5, 1e-4,
                   "sum " + what);
      expect_equal(amax(rows_d, {1}), amax(rows, {1}), "amax " + what);
      expect_equal(argmin(rows_d, 1), argmin(rows, 1), "argmin " + what);
      if (len > 1) {
        expect_close(var(rows_d, IntArrayRef{1}), var(rows, IntArrayRef{1}), 1e-4, 1e-5,
                     "var " + what);
      }
      // Ties: the first index wins, wherever the vector lanes put the equal values.
      const Tensor ints = clamp(flat * 2, -1, 1).to(kInt32);
      const Tensor irows = as_strided(ints, {6, len}, {len + 1, 1}, offset);
      const Tensor irows_d = as_strided(dev(ints), {6, len}, {len + 1, 1}, offset);
      expect_equal(argmax(irows_d, 1), argmax(irows, 1), "argmax ties " + what);
      expect_equal(sum(irows_d, IntArrayRef{1}), sum(irows, IntArrayRef{1}), "int sum " + what);
    }
  }
  // One long row split across many blocks, starting off the 16-byte boundary.
  const Tensor big = randn({(int64_t{1} << 22) + 3});
  const Tensor tail = big.narrow(0, 1, big.size(0) - 1);
  const Tensor tail_d = dev(big).narrow(0, 1, big.size(0) - 1);
  const double want = sum(tail, std::nullopt, false, kFloat64).item<double>();
  EXPECT_NEAR(host(sum(tail_d)).item<double>(), want, 1e-3);
  expect_equal(argmax(tail_d), argmax(tail), "argmax long unaligned row");
}

// Note [Vector loads in column reductions]: a column sum takes 16-byte vectors when the matrix is
// aligned and the scalar kernel otherwise, with the same bits either way (the bias gradient of a
// linear layer must not depend on where the allocator put its input).
TEST(CudaReduce, ColumnSumsAlignedAndUnalignedGiveTheSameBits) {
  REQUIRE_GPU();
  for (DType dt : {kBFloat16, kFloat16, kFloat32, kFloat64}) {
    for (int64_t rows : {1, 5, 64, 8192}) {
      for (int64_t cols : {8, 24, 768, 3072}) {
        const std::string what =
            std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
        const Tensor x = randn({rows, cols}).to(dt);
        const Tensor flat = dev(x).reshape({-1});
        // The same values aligned (a fresh allocation) and one element off the 16-byte boundary.
        const Tensor buf = empty({rows * cols + 1}, TensorOptions(dt).with_device(kCuda));
        buf.narrow(0, 1, rows * cols).copy_(flat);
        const Tensor aligned = flat.view({rows, cols});
        const Tensor shifted = as_strided(buf, {rows, cols}, {cols, 1}, 1);
        const Tensor a = host(sum(aligned, IntArrayRef{0}, false, kFloat32));
        const Tensor b = host(sum(shifted, IntArrayRef{0}, false, kFloat32));
        EXPECT_TRUE(same_bits(a, b)) << what;
        const Tensor want = sum(x.to(kFloat64), IntArrayRef{0});
        EXPECT_TRUE(allclose(a.to(kFloat64), want, 1e-4, 1e-3)) << what;
        // The dtype's own sum (a 16-bit result) and the mean take the same path.
        expect_close(sum(aligned, IntArrayRef{0}), sum(x.to(kFloat32), IntArrayRef{0}).to(dt),
                     dt == kBFloat16 ? 2e-2 : 2e-3, 2e-2, "sum " + what);
        expect_close(mean(aligned, IntArrayRef{0}).to(kFloat64),
                     mean(x.to(kFloat64), IntArrayRef{0}), 1e-2, 1e-3, "mean " + what);
      }
    }
  }
}

TEST(CudaReduce, TiesIntegersAndFlags) {
  REQUIRE_GPU();
  // Integer values with many ties: argmax/argmin and max.dim pick the first, as the CPU.
  const Tensor x = randint(-2, 3, {37, 1500}).to(kInt32);
  const Tensor xd = dev(x);
  expect_equal(argmax(xd, 1), argmax(x, 1), "argmax ties");
  expect_equal(argmin(xd, 0), argmin(x, 0), "argmin ties");
  expect_equal(argmax(xd), argmax(x), "argmax all ties");
  auto [v, i] = min(xd, 1, true);
  auto [cv, ci] = min(x, 1, true);
  expect_equal(v, cv, "min.dim values");
  expect_equal(i, ci, "min.dim indices");
  expect_equal(sum(xd), sum(x), "int sum");
  expect_equal(sum(xd, IntArrayRef{0}, false, kInt32), sum(x, IntArrayRef{0}, false, kInt32),
               "int sum dtype=int32");
  const Tensor small = randint(-2, 3, {5, 9});
  expect_equal(prod(dev(small), IntArrayRef{1}), prod(small, IntArrayRef{1}), "int prod");
  const Tensor b = gt(x, 0);
  expect_equal(all(dev(b), IntArrayRef{1}), all(b, IntArrayRef{1}), "all");
  expect_equal(any(dev(b), IntArrayRef{0}), any(b, IntArrayRef{0}), "any");
  expect_equal(any(dev(x.to(kUInt8))), any(x.to(kUInt8)), "any uint8");
  // NaN propagates into max and wins argmax at its first position.
  Tensor f = randn({4, 100});
  f.narrow(1, 17, 1).fill_(kNaN);
  f.narrow(1, 60, 1).fill_(kNaN);
  expect_equal(argmax(dev(f), 1), argmax(f, 1), "argmax NaN");
  expect_close(amax(dev(f), {1}), amax(f, {1}), 0, 0, "amax NaN");
  // 16-bit floats accumulate in float.
  const Tensor h = randn({33, 2049}).to(kBFloat16);
  expect_close(sum(dev(h), IntArrayRef{1}), sum(h, IntArrayRef{1}), 2e-2, 2e-2, "bf16 sum");
  expect_close(mean(dev(h.to(kFloat16)), IntArrayRef{0}), mean(h.to(kFloat16), IntArrayRef{0}),
               2e-2, 2e-3, "f16 mean");
  // Empty reductions give the identity; zero outputs give nothing.
  expect_equal(sum(dev(zeros({3, 0})), IntArrayRef{1}), sum(zeros({3, 0}), IntArrayRef{1}),
               "empty sum");
  expect_equal(sum(dev(zeros({0, 4})), IntArrayRef{1}), sum(zeros({0, 4}), IntArrayRef{1}),
               "no outputs");
}

TEST(CudaReduce, DotEqualAllclose) {
  REQUIRE_GPU();
  const Tensor a = randn({100003}), b = randn({100003});
  expect_close(dot(dev(a), dev(b)), dot(a, b), 1e-4, 1e-3, "dot float");
  expect_close(dot(dev(a.to(kFloat64)), dev(b.to(kFloat64))), dot(a.to(kFloat64), b.to(kFloat64)),
               1e-10, 1e-10, "dot double");
  const Tensor ia = randint(-100, 100, {5000}), ib = randint(-100, 100, {5000});
  expect_equal(dot(dev(ia), dev(ib)), dot(ia, ib), "dot int64");
  // Every third element, from two offsets: 33333 each.
  expect_close(dot(dev(a).slice(0, 0, 99999, 3), dev(b).slice(0, 1, 100000, 3)),
               dot(a.slice(0, 0, 99999, 3), b.slice(0, 1, 100000, 3)), 1e-4, 1e-3, "dot strided");
  EXPECT_TRUE(equal(dev(a), dev(a.clone())));
  Tensor c = a.clone();
  c.narrow(0, 99999, 1).fill_(7.0);
  EXPECT_FALSE(equal(dev(a), dev(c)));
  EXPECT_TRUE(allclose(dev(a), dev(add(a, 1e-9))));
  EXPECT_FALSE(allclose(dev(a), dev(c)));
  Tensor n = full({3}, kNaN);
  EXPECT_FALSE(allclose(dev(n), dev(n)));
  EXPECT_TRUE(allclose(dev(n), dev(n), 1e-5, 1e-8, true));
}

// ---- softmax ----

TEST(CudaSoftmax, RowsOfOneAnd50257) {
  REQUIRE_GPU();
  const Tensor one_col = randn({5, 1});
  expect_equal(softmax(dev(one_col), -1), ones({5, 1}), "softmax rows of 1");
  expect_equal(log_softmax(dev(one_col), -1), zeros({5, 1}), "log_softmax rows of 1");
  const Tensor x = mul(randn({8, 50257}), 5.0);
  const Tensor xd = dev(x);
  const Tensor y = softmax(xd, -1);
  expect_close(y, softmax(x, -1), 1e-5, 1e-9, "softmax 50257");
  expect_close(sum(y, IntArrayRef{1}), ones({8}), 1e-5, 0, "softmax rows sum to 1");
  expect_close(log_softmax(xd, 1), log_softmax(x, 1), 1e-5, 1e-5, "log_softmax 50257");
  // Over dim 0 the CPU sums each column in float (about 5e-5 off here); the device sums in double
  // (Note [Device softmax]): both are checked against a float64 reference, the device tightly.
  const Tensor col = x.t().contiguous();
  const Tensor ref = softmax(col.to(kFloat64), 0).to(kFloat32);
  expect_close(softmax(dev(col), 0), ref, 1e-5, 1e-9, "softmax over dim 0 of [50257, 8]");
  expect_close(softmax(dev(x.to(kFloat16)), 1), softmax(x.to(kFloat16), 1), 1e-2, 1e-4,
               "softmax half 50257");
  // Special values as the CPU: a NaN or +inf poisons the row; -inf elements get 0.
  Tensor s = randn({3, 40});
  s.narrow(1, 3, 1).narrow(0, 0, 1).fill_(kNaN);
  s.narrow(1, 5, 1).narrow(0, 1, 1).fill_(-kInfinity);
  s.narrow(1, 7, 1).narrow(0, 2, 1).fill_(kInfinity);
  expect_close(softmax(dev(s), 1), softmax(s, 1), 1e-5, 1e-9, "softmax special values");
  expect_close(log_softmax(dev(s), 1), log_softmax(s, 1), 1e-5, 1e-6, "log_softmax special");
}

TEST(CudaSoftmax, BackwardsMatchTheCpu) {
  REQUIRE_GPU();
  for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{16, 50257}, {7, 300, 5}}) {
    for (int64_t dim : {int64_t{1}, int64_t{-1}}) {
      const Tensor x = randn(shape), g = randn(shape);
      const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
      expect_close(_softmax_backward_data(dev(g), dev(y), dim, kFloat32),
                   _softmax_backward_data(g, y, dim, kFloat32), 1e-4, 1e-7, "softmax backward");
      expect_close(_log_softmax_backward_data(dev(g), dev(ly), dim, kFloat32),
                   _log_softmax_backward_data(g, ly, dim, kFloat32), 1e-4, 1e-5,
                   "log_softmax backward");
    }
  }
}

// Rows of up to 1024 elements stay in registers, one warp a row (Note [Device softmax]): every
// register width, the row lengths around each, float64 and bfloat16, special values, backwards.
TEST(CudaSoftmax, WarpRowsAroundEveryWidth) {
  REQUIRE_GPU();
  for (int64_t d :
       {2, 31, 32, 33, 64, 65, 100, 128, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025}) {
    const std::string what = "d " + std::to_string(d);
    const Tensor x = mul(randn({37, d}), 4.0), g = randn({37, d});
    const Tensor xd = dev(x);
    expect_close(softmax(xd, 1), softmax(x, 1), 1e-5, 1e-8, "softmax " + what);
    expect_close(log_softmax(xd, 1), log_softmax(x, 1), 1e-5, 1e-5, "log_softmax " + what);
    const Tensor x64 = x.to(kFloat64);
    expect_close(softmax(dev(x64), 1), softmax(x64, 1), 1e-12, 1e-15, "softmax f64 " + what);
    const Tensor xb = x.to(kBFloat16);
    expect_close(softmax(dev(xb), 1), softmax(xb, 1), 2e-2, 1e-3, "softmax bf16 " + what);
    const Tensor y = softmax(x, 1), ly = log_softmax(x, 1);
    expect_close(_softmax_backward_data(dev(g), dev(y), 1, kFloat32),
                 _softmax_backward_data(g, y, 1, kFloat32), 1e-4, 1e-6, "backward " + what);
    expect_close(_log_softmax_backward_data(dev(g), dev(ly), 1, kFloat32),
                 _log_softmax_backward_data(g, ly, 1, kFloat32), 1e-4, 1e-5,
                 "log backward " + what);
  }
  // A row of -inf is NaN, as on the CPU; NaN and +inf poison their rows in the widest warp path.
  Tensor s = randn({4, 1000});
  s.narrow(0, 0, 1).fill_(-kInfinity);
  s.narrow(1, 999, 1).narrow(0, 1, 1).fill_(kNaN);
  s.narrow(1, 40, 1).narrow(0, 2, 1).fill_(kInfinity);
  s.narrow(1, 0, 500).narrow(0, 3, 1).fill_(-kInfinity);
  expect_close(softmax(dev(s), 1), softmax(s, 1), 1e-5, 1e-9, "softmax special values, 1000");
  expect_close(log_softmax(dev(s), 1), log_softmax(s, 1), 1e-5, 1e-6, "log_softmax special");
}

// ---- layer norm ----

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheCpu) {
  REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kBFloat16 ? 2e-2 : 1e-4;
    // Rows of up to 1024 run one warp a row in registers, longer rows the block loops.
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{
             {64, 768}, {3, 5, 4099}, {9, 1}, {40, 33}, {50, 1024}, {5, 1025}}) {
      const int64_t cols = shape.back();
      const Tensor x = add(mul(randn(shape), 3.0), 1.0).to(dt), w = randn({cols}).to(dt),
                   b = randn({cols}).to(dt), g = randn(shape).to(dt);
      auto [y, mu, rs] = native_layer_norm(x, {cols}, w, b, 1e-5);
      auto [yd, mud, rsd] = native_layer_norm(dev(x), {cols}, dev(w), dev(b), 1e-5);
      expect_close(yd, y, tol, tol, "layer_norm out");
      expect_close(mud, mu, tol, tol, "layer_norm mean");
      expect_close(rsd, rs, tol, tol, "layer_norm rstd");
      auto [gi, gw, gb] =
          native_layer_norm_backward(g, x, {cols}, mu, rs, w, b, {true, true, true});
      auto [gid, gwd, gbd] = native_layer_norm_backward(dev(g), dev(x), {cols}, mud, rsd, dev(w),
                                                        dev(b), {true, true, true});
      expect_close(gid, gi, tol, tol, "grad_input");
      expect_close(gwd, gw, tol, tol * 10, "grad_weight");
      expect_close(gbd, gb, tol, tol * 10, "grad_bias");
      // Only some outputs, no affine parameters.
      auto [gi2, gw2, gb2] = native_layer_norm_backward(
          dev(g), dev(x), {cols}, mud, rsd, std::nullopt, std::nullopt, {true, false, true});
      EXPECT_FALSE(gw2.defined());
      auto [ci2, cw2, cb2] = native_layer_norm_backward(g, x, {cols}, mu, rs, std::nullopt,
                                                        std::nullopt, {true, false, true});
      expect_close(gi2, ci2, tol, tol, "grad_input without weight");
      expect_close(gb2, cb2, tol, tol * 10, "grad_bias without bias");
    }
  }
}

// ---- losses ----

TEST(CudaLoss, NllLossAndBackwardMatchTheCpu) {
  REQUIRE_GPU();
  const Tensor logp = log_softmax(randn({257, 11, 3}), 1);
  Tensor target = randint(0, 11, {257, 3});
  target.narrow(0, 5, 7).fill_(-100);
  const Tensor w = rand({11});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    for (bool weighted : {false, true}) {
      const std::optional<Tensor> wc = weighted ? std::optional<Tensor>(w) : std::nullopt;
      const std::optional<Tensor> wd = weighted ? std::optional<Tensor>(dev(w)) : std::nullopt;
      const Tensor want = nll_loss(logp, target, wc, r);
      const Tensor got = nll_loss(dev(logp), dev(target), wd, r);
      expect_close(got, want, 1e-5, 1e-6, "nll_loss");
      const Tensor go = r == Reduction::None ? randn({257, 3}) : full({}, 0.7);
      expect_close(nll_loss_backward(dev(go), dev(logp), dev(target), wd, r, -100),
                   nll_loss_backward(go, logp, target, wc, r, -100), 1e-6, 1e-9,
                   "nll_loss_backward");
    }
  }
  const Tensor logits = randn({9, 5}), classes = randint(0, 5, {9});
  expect_close(cross_entropy(dev(logits), dev(classes)), cross_entropy(logits, classes), 1e-5, 1e-6,
               "cross_entropy");
}

// ---- index ----

TEST(CudaIndex, EmbeddingBackwardWithRepeatedIndicesIsTheCpus) {
  REQUIRE_GPU();
  Tensor idx = randint(0, 50, {4096});
  idx.narrow(0, 100, 1000).fill_(7);  // one row gets a thousand contributions
  const Tensor grad = randn({4096, 64});
  for (int64_t padding : {int64_t{-1}, int64_t{7}, int64_t{3}}) {
    const Tensor want = embedding_dense_backward(grad, idx, 60, padding);
    const Tensor g1 = host(embedding_dense_backward(dev(grad), dev(idx), 60, padding));
    const Tensor g2 = host(embedding_dense_backward(dev(grad), dev(idx), 60, padding));
    // The same additions in the same order as the CPU: the same bits, on every run.
    EXPECT_TRUE(same_bits(g1, want)) << "padding " << padding;
    EXPECT_TRUE(same_bits(g1, g2));
  }
  expect_equal(embedding_dense_backward(dev(grad.view({64, 64, 64})),
                                        dev(idx.view({64, 64})).to(kInt32), 60, -1),
               embedding_dense_backward(grad.view({64, 64, 64}), idx.view({64, 64}), 60, -1),
               "embedding backward 2-D int32 indices");
  const Tensor weight = randn({60, 33});
  expect_equal(embedding(dev(weight), dev(idx.view({64, 64}))),
               embedding(weight, idx.view({64, 64})), "embedding");
}

TEST(CudaIndex, GatherScatterIndexSelectCat) {
  REQUIRE_GPU();
  const Tensor x = randn({300, 40, 7});
  const Tensor xd = dev(x);
  const Tensor sel = randint(0, 40, {97});
  expect_equal(index_select(xd, 1, dev(sel)), index_select(x, 1, sel), "index_select");
  const Tensor gi = randint(0, 40, {300, 25, 7});
  expect_equal(gather(xd, 1, dev(gi)), gather(x, 1, gi), "gather");
  const Tensor gt_idx = randint(0, 300, {7, 40, 5});
  expect_equal(gather(xd.transpose(0, 2), 2, dev(gt_idx)), gather(x.transpose(0, 2), 2, gt_idx),
               "gather from a strided self");
  const Tensor src = randn({300, 25, 7});
  expect_equal(scatter(xd, 1, dev(gi), dev(src)), scatter(x, 1, gi, src), "scatter src");
  expect_equal(scatter(xd, 1, dev(gi), 2.5), scatter(x, 1, gi, 2.5), "scatter value");
  // Many duplicates per row: added in the CPU's order, so the same bits, every run.
  const Tensor dup = randint(0, 3, {300, 25, 7});
  const Tensor a1 = host(scatter_add(xd, 1, dev(dup), dev(src)));
  const Tensor a2 = host(scatter_add(xd, 1, dev(dup), dev(src)));
  EXPECT_TRUE(same_bits(a1, scatter_add(x, 1, dup, src)));
  EXPECT_TRUE(same_bits(a1, a2));
  const Tensor add_idx = randint(0, 300, {50, 40, 7}), add_src = randn({50, 40, 7});
  Tensor self_d = dev(x.clone()), self_c = x.clone();
  scatter_add_(self_d, 0, dev(add_idx), dev(add_src));
  scatter_add_(self_c, 0, add_idx, add_src);
  expect_equal(self_d, self_c, "scatter_add_ dim 0");
  const Tensor put_idx = randint(0, 7, {300, 40, 3}), put_src = randn({300, 40, 3});
  Tensor put_d = dev(x.clone()), put_c = x.clone();
  scatter_(put_d, 2, dev(put_idx), dev(put_src));
  scatter_(put_c, 2, put_idx, put_src);
  expect_equal(put_d, put_c, "scatter_ dim 2 (last write wins)");
  const Tensor ints = randint(-5, 5, {64, 9}), int_idx = randint(0, 64, {100, 9}),
               int_src = randint(-5, 5, {100, 9});
  expect_equal(scatter_add(dev(ints), 0, dev(int_idx), dev(int_src)),
               scatter_add(ints, 0, int_idx, int_src), "int64 scatter_add");
  const std::vector<Tensor> parts = {randn({4, 3, 5}), randn({4, 1, 5}), randn({4, 6, 5})};
  std::vector<Tensor> parts_d;
  for (const Tensor& p : parts) parts_d.push_back(dev(p));
  expect_equal(cat(parts_d, 1), cat(parts, 1), "cat dim 1");
  parts_d[1] = dev(parts[1].transpose(0, 2).contiguous()).transpose(0, 2);
  expect_equal(cat(parts_d, 1), cat(parts, 1), "cat strided");
}

// The error a call throws: its type by the catch, its message returned.
template <class E, class F>
std::string error_of(const F& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

TEST(CudaIndex, MaskedFillAndOneHot) {
  REQUIRE_GPU();
  const Tensor x = randn({6, 5});
  const Tensor mask = gt(randn({5}), 0.0);
  expect_equal(masked_fill(dev(x), dev(mask), -3.5), masked_fill(x, mask, -3.5), "masked_fill");
  Tensor inplace = dev(x.clone()), want = x.clone();
  masked_fill_(inplace, dev(mask), 2);
  masked_fill_(want, mask, 2);
  expect_equal(inplace, want, "masked_fill_");
  const Tensor classes = randint(0, 7, {4, 9});
  expect_equal(one_hot(dev(classes)), one_hot(classes), "one_hot inferred");
  expect_equal(one_hot(dev(classes), 10), one_hot(classes, 10), "one_hot explicit");
  EXPECT_NE(error_of<IndexError>([&] { one_hot(dev(classes), 3); }).find("[one_hot] class value"),
            std::string::npos);
}

TEST(CudaIndex, BadIndicesAreTypedErrorsAndWriteNothing) {
  REQUIRE_GPU();
  const Tensor x = dev(randn({5, 4}));
  EXPECT_NE(error_of<IndexError>([&] {
              index_select(x, 0, dev(longs_of({1, 7, 2})));
            }).find("[index_select] index 7 is out of range for dimension 0 with size 5"),
            std::string::npos);
  EXPECT_NE(error_of<IndexError>([&] {
              embedding(x, dev(longs_of({0, -1})));
            }).find("[embedding] index -1"),
            std::string::npos);
  EXPECT_NE(error_of<IndexError>([&] {
              gather(x, 1, dev(longs_of({4}).view({1, 1})));
            }).find("[gather] index 4 is out of range for dimension 1 with size 4"),
            std::string::npos);
  EXPECT_NE(error_of<IndexError>([&] {
              embedding_dense_backward(dev(randn({3, 4})), dev(longs_of({0, 9, 1})), 5, -1);
            }).find("[embedding_dense_backward] index 9"),
            std::string::npos);
  EXPECT_NE(error_of<IndexError>([&] {
              nll_loss(dev(randn({3, 4})), dev(longs_of({0, 4, -100})));
            }).find("[nll_loss] target 4 is out of bounds for 4 classes"),
            std::string::npos);
  // scatter_ checks before it writes: self is untouched.
  Tensor self = dev(zeros({3, 3}));
  EXPECT_THROW(scatter_(self, 0, dev(longs_of({0, 3, 1}).view({1, 3})), dev(ones({1, 3}))),
               IndexError);
  EXPECT_TRUE(equal(host(self), zeros({3, 3})));
}

// Note [Remembered index checks]: a check that passed is not run again for the same unchanged
// indices (the embedding's backward after its forward, a batch used twice), but a write to them, a
// larger bound's check or other indices at the same address are checked on the device again.
TEST(CudaIndex, PassedChecksAreRememberedUntilTheIndicesChange) {
  REQUIRE_GPU();
  const Tensor w = dev(randn({6, 4}));
  Tensor idx = dev(longs_of({0, 5, 2, 5}));
  auto counts = [] { return cuda::index_check_counts(); };
  const cuda::IndexCheckCounts c0 = counts();
  const Tensor e = embedding(w, idx);
  const cuda::IndexCheckCounts c1 = counts();
  EXPECT_EQ(c1.device_checks, c0.device_checks + 1);
  // The backward of the same indices against the same bound, and the forward again.
  const Tensor g = embedding_dense_backward(dev(ones({4, 4})), idx, 6, -1);
  EXPECT_TRUE(equal(host(embedding(w, idx)), host(e)));
  const cuda::IndexCheckCounts c2 = counts();
  EXPECT_EQ(c2.device_checks, c1.device_checks);
  EXPECT_EQ(c2.remembered, c1.remembered + 2);
  EXPECT_TRUE(equal(host(g).select(0, 5), full({4}, 2.0)));
  // A smaller bound is a new check, and fails.
  EXPECT_NE(error_of<IndexError>([&] {
              index_select(dev(randn({5, 4})), 0, idx);
            }).find("index 5 is out of range for dimension 0 with size 5"),
            std::string::npos);
  // A write bumps the version: the bad value is found.
  idx.fill_(Scalar(int64_t{6}));
  EXPECT_NE(error_of<IndexError>([&] { embedding(w, idx); }).find("[embedding] index 6"),
            std::string::npos);
  // A view of other elements of the checked storage is checked itself.
  const Tensor all = dev(longs_of({1, 2, 9}));
  const Tensor head = all.narrow(0, 0, 2);
  embedding(w, head);
  EXPECT_THROW(embedding(w, all), IndexError);
  // Fresh indices after the checked ones were freed (the allocator may hand out the same memory).
  for (int i = 0; i < 3; ++i) {
    embedding(w, dev(longs_of({1, 2, 3})));
    EXPECT_THROW(embedding(w, dev(longs_of({1, 2, 7}))), IndexError) << "round " << i;
  }
}

}  // namespace
}  // namespace loom
