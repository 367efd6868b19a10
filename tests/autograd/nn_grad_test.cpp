// Gradients of small networks end to end (MLP and conv net against finite differences), and the
// fused backward kernels against the differentiable formulas used with create_graph.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd/gradcheck_cases.h"
#include "loom/autograd.h"
#include "loom/ops.h"

namespace loom {
namespace {

using V = std::vector<Tensor>;
using testing::rnd;

Tensor ints(std::vector<int64_t> v) {
  return from_vector(v, {static_cast<int64_t>(v.size())});
}

Tensor mlp_loss(const Tensor& x, const Tensor& target, const V& p) {
  return cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), target);
}

// The MLP's parameters in float64 (for finite differences) and in `dtype` (for backward).
void check_mlp_against_finite_differences(DType dtype, double atol, double rtol) {
  Generator gen(11);
  const Tensor x64 = randn({4, 5}, DType::Float64, gen);
  const Tensor target = ints({2, 0, 1, 2});
  V p64 = {mul(randn({6, 5}, DType::Float64, gen), 0.5), mul(randn({6}, DType::Float64, gen), 0.1),
           mul(randn({3, 6}, DType::Float64, gen), 0.5), mul(randn({3}, DType::Float64, gen), 0.1)};
  V p;
  for (const Tensor& t : p64) p.push_back(t.to(dtype).requires_grad_());
  Tensor loss = mlp_loss(x64.to(dtype), target, p);
  loss.backward();

  autograd::NoGradGuard ng;
  const double eps = 1e-6;
  for (size_t i = 0; i < p64.size(); ++i) {
    ASSERT_TRUE(p[i].grad().defined()) << "parameter " << i;
    const std::vector<double> analytic = to_vector<double>(p[i].grad().to(DType::Float64));
    double* data = p64[i].data_ptr<double>();
    const int64_t n = p64[i].numel();
    for (int64_t k : {int64_t{0}, n / 2, n - 1}) {
      const double orig = data[k];
      data[k] = orig + eps;
      const double plus = mlp_loss(x64, target, p64).item<double>();
      data[k] = orig - eps;
      const double minus = mlp_loss(x64, target, p64).item<double>();
      data[k] = orig;
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(k)], numeric, atol + rtol * std::abs(numeric))
          << dtype_name(dtype) << " parameter " << i << " element " << k;
    }
  }
}

TEST(NnGrad, MlpCrossEntropyMatchesFiniteDifferencesFloat64) {
  check_mlp_against_finite_differences(DType::Float64, 1e-8, 1e-6);
}

// The training path: float32 parameters through the fused backward kernels.
TEST(NnGrad, MlpCrossEntropyMatchesFiniteDifferencesFloat32) {
  check_mlp_against_finite_differences(DType::Float32, 2e-5, 1e-3);
}

TEST(NnGrad, MlpSecondDerivative) {
  auto fn = [](const V& p) { return V{mlp_loss(p[0], ints({1, 0, 2}), {p[1], p[2], p[3], p[4]})}; };
  const V inputs = {rnd({3, 4}, 501), rnd({5, 4}, 502), rnd({5}, 503), rnd({3, 5}, 504),
                    rnd({3}, 505)};
  EXPECT_EQ(autograd::gradgradcheck(fn, inputs), "");
}

TEST(NnGrad, ConvReluMaxPoolLinearCrossEntropyPassesGradcheck) {
  auto fn = [](const V& p) {
    Tensor h = relu(conv2d(p[0], p[1], p[2], {1, 1}, {1, 1}));  // [2, 2, 4, 4]
    h = max_pool2d(h, {2, 2}).flatten(1);                       // [2, 8]
    return V{cross_entropy(linear(h, p[3], p[4]), ints({2, 0}))};
  };
  const V inputs = {rnd({2, 1, 4, 4}, 506), rnd({2, 1, 3, 3}, 507), rnd({2}, 508), rnd({3, 8}, 509),
                    rnd({3}, 510)};
  EXPECT_EQ(autograd::gradcheck(fn, inputs), "");
}

// Without create_graph the fused kernels run; with it, formulas of differentiable operators. Both
// must give the same float32 gradients.
void expect_fused_matches_composed(const std::string& what,
                                   const std::function<Tensor(const V&)>& fn, const V& inputs) {
  SCOPED_TRACE(what);
  const Tensor out = fn(inputs);
  const Tensor v = randn(out.sizes(), out.options(), Generator(99));
  const V fused = autograd::grad({out}, inputs, {v}, /*retain_graph=*/true, /*create_graph=*/false);
  const V composed = autograd::grad({out}, inputs, {v}, true, /*create_graph=*/true);
  ASSERT_EQ(fused.size(), composed.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(fused[i].dtype(), inputs[i].dtype()) << "input " << i;
    EXPECT_TRUE(allclose(fused[i], composed[i].detach(), 1e-4, 1e-5))
        << "input " << i << ": " << fused[i].str() << " vs " << composed[i].str();
  }
}

Tensor f32(std::vector<int64_t> shape, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  return rnd(std::move(shape), seed, lo, hi, false).to(DType::Float32).requires_grad_();
}

TEST(NnGrad, FusedBackwardKernelsMatchTheDifferentiableFormulas) {
  expect_fused_matches_composed("sigmoid", [](const V& x) { return sigmoid(x[0]); },
                                {f32({3, 40}, 511)});
  expect_fused_matches_composed("tanh", [](const V& x) { return tanh(x[0]); }, {f32({3, 40}, 512)});
  expect_fused_matches_composed("silu", [](const V& x) { return silu(x[0]); }, {f32({3, 40}, 513)});
  expect_fused_matches_composed("gelu", [](const V& x) { return gelu(x[0]); }, {f32({3, 40}, 514)});
  expect_fused_matches_composed("gelu tanh", [](const V& x) { return gelu(x[0], "tanh"); },
                                {f32({3, 40}, 515)});
  expect_fused_matches_composed("softmax", [](const V& x) { return softmax(x[0], 1); },
                                {f32({4, 33}, 516)});
  expect_fused_matches_composed(
      "log_softmax dim 0", [](const V& x) { return log_softmax(x[0], 0); }, {f32({5, 7}, 517)});
  expect_fused_matches_composed("softmax computed in float64",
                                [](const V& x) { return softmax(x[0], -1, DType::Float64); },
                                {f32({3, 9}, 518)});
  expect_fused_matches_composed("layer_norm",
                                [](const V& x) { return layer_norm(x[0], {6}, x[1], x[2]); },
                                {f32({4, 6}, 519), f32({6}, 520), f32({6}, 521)});
  expect_fused_matches_composed("cross_entropy",
                                [](const V& x) {
                                  return cross_entropy(x[0], ints({1, 0, 4}));
                                },
                                {f32({3, 5}, 522)});
  expect_fused_matches_composed("conv2d",
                                [](const V& x) {
                                  return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1});
                                },
                                {f32({2, 3, 5, 5}, 523), f32({4, 3, 3, 3}, 524), f32({4}, 525)});
}

TEST(NnGrad, NllLossWeightGradientIsNotImplemented) {
  Tensor logp = rnd({2, 3}, 526);
  Tensor w = rnd({3}, 527, 0.5, 1.0);
  Tensor loss = nll_loss(logp, ints({0, 2}), w);
  EXPECT_THROW(loss.backward(), NotImplementedError);
}

TEST(NnGrad, DropoutGradientIsMaskedAndScaled) {
  Tensor x = rnd({64}, 528);
  auto [y, mask] = native_dropout(x, 0.25, true, Generator(3));
  sum(y).backward();
  const Tensor expected = div(mask.to(DType::Float64), 0.75);
  EXPECT_TRUE(allclose(x.grad(), expected)) << x.grad().str();
}

}  // namespace
}  // namespace loom
