// The fused training kernels on the CPU against the unfused compositions they replace: the fused
// cross-entropy (values, gradients, ignore_index, an all-ignored batch, label smoothing, bad
// targets), bias + GELU and linear + GELU (both approximations, gradients of input, weight and
// bias), and the multi-tensor Adam step against the per-parameter step.
#include <gtest/gtest.h>

#include <memory>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "test_errors.h"

namespace loom::testing {
namespace {

Tensor targets(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  EXPECT_TRUE(allclose(got.to(kFloat64), want.to(kFloat64), rtol, atol, /*equal_nan=*/true))
      << what << "\n got: " << got << "\n want: " << want;
}

// The composition cross_entropy ran before the fused kernel: log_softmax + nll_loss (+ smoothing).
Tensor composed_ce(const Tensor& x, const Tensor& t, int64_t ignore, double smoothing) {
  const Tensor logp = log_softmax(x, 1, x.dtype());
  Tensor loss = nll_loss(logp, t, std::nullopt, Reduction::Mean, ignore);
  if (smoothing == 0.0) return loss;
  const Tensor keep = ne(t, ignore);
  const Tensor smooth = masked_fill(mul(sum(logp, IntArrayRef{1}), -1.0), logical_not(keep), 0.0);
  const Tensor term = div(sum(smooth), sum(keep));
  return add(mul(loss, 1.0 - smoothing), mul(term, smoothing / static_cast<double>(x.size(1))));
}

// Loss and gradient of logits x (a leaf copy) through f.
template <class F>
std::pair<Tensor, Tensor> loss_and_grad(const Tensor& x0, const F& f) {
  Tensor x = x0.detach().clone();
  x.requires_grad_();
  Tensor loss = f(x);
  loss.backward();
  return {loss.detach(), x.grad()};
}

TEST(FusedCrossEntropy, MatchesCompositionFloat32) {
  const Tensor x = mul(randn({37, 1000}, kFloat32, Generator(11)), 3.0);
  const Tensor t = randint(0, 1000, {37}, kInt64, Generator(12));
  auto [l0, g0] = loss_and_grad(x, [&](const Tensor& v) { return composed_ce(v, t, -100, 0.0); });
  auto [l1, g1] = loss_and_grad(x, [&](const Tensor& v) { return cross_entropy(v, t); });
  expect_close(l1, l0, 1e-6, 1e-6, "loss");
  expect_close(g1, g0, 1e-5, 1e-8, "grad");
  // cross_entropy took the fused operator: its lse is each row's logsumexp.
  auto [l2, lse] = _fused_cross_entropy(x, t);
  EXPECT_EQ(l2.item<float>(), l1.item<float>());
  expect_close(lse, logsumexp(x, IntArrayRef{1}), 1e-6, 1e-6, "lse");
}

TEST(FusedCrossEntropy, MatchesCompositionBFloat16) {
  const Tensor x = mul(randn({16, 50304}, kFloat32, Generator(13)), 2.0).to(kBFloat16);
  const Tensor t = randint(0, 50304, {16}, kInt64, Generator(14));
  auto [l0, g0] =
      loss_and_grad(x.to(kFloat32), [&](const Tensor& v) { return composed_ce(v, t, -100, 0.0); });
  auto [l1, g1] = loss_and_grad(x, [&](const Tensor& v) { return cross_entropy(v, t); });
  EXPECT_EQ(l1.dtype(), kBFloat16);
  EXPECT_EQ(g1.dtype(), kBFloat16);
  expect_close(l1, l0, 1e-2, 1e-2, "bf16 loss");
  // Gradients are O(1/N) at the target, O(1/(N V)) elsewhere: bf16 keeps 8 bits.
  expect_close(g1, g0, 1e-2, 1e-6, "bf16 grad");
}

TEST(FusedCrossEntropy, IgnoreIndexAndSmoothing) {
  const Tensor x = randn({9, 33}, kFloat32, Generator(15));
  const Tensor t = targets({3, -100, 0, 32, 7, -100, 7, 1, 2});
  for (double s : {0.0, 0.1, 1.0}) {
    auto [l0, g0] = loss_and_grad(x, [&](const Tensor& v) { return composed_ce(v, t, -100, s); });
    auto [l1, g1] = loss_and_grad(x, [&](const Tensor& v) {
      return cross_entropy(v, t, std::nullopt, Reduction::Mean, -100, s);
    });
    expect_close(l1, l0, 1e-6, 1e-6, "loss, smoothing " + std::to_string(s));
    expect_close(g1, g0, 1e-5, 1e-7, "grad, smoothing " + std::to_string(s));
    // Ignored rows get no gradient.
    EXPECT_EQ(sum(abs(g1.select(0, 1))).item<float>(), 0.0f);
  }
  // A custom ignore_index that is also a valid class.
  auto [l0, g0] =
      loss_and_grad(x, [&](const Tensor& v) { return composed_ce(v, clamp(t, 0, 32), 7, 0.0); });
  auto [l1, g1] = loss_and_grad(x, [&](const Tensor& v) {
    return cross_entropy(v, clamp(t, 0, 32), std::nullopt, Reduction::Mean, 7);
  });
  expect_close(l1, l0, 1e-6, 1e-6, "ignore_index 7");
  expect_close(g1, g0, 1e-5, 1e-7, "ignore_index 7 grad");
}

TEST(FusedCrossEntropy, AllIgnoredGivesNaN) {
  const Tensor x = randn({4, 5}, kFloat32, Generator(16));
  const Tensor t = targets({-100, -100, -100, -100});
  auto [l1, g1] = loss_and_grad(x, [&](const Tensor& v) { return cross_entropy(v, t); });
  EXPECT_TRUE(std::isnan(l1.item<float>()));
  EXPECT_TRUE(std::isnan(composed_ce(x, t, -100, 0.0).item<float>()));
  // Every row is ignored: zero gradient (PyTorch's composition gives 0 there too).
  EXPECT_EQ(sum(abs(g1)).item<float>(), 0.0f);
}

TEST(FusedCrossEntropy, BadTargetNamesRowAndValue) {
  const Tensor x = randn({4, 5}, kFloat32, Generator(17));
  const std::string e = error_of<IndexError>([&] { cross_entropy(x, targets({0, 4, 5, 1})); });
  EXPECT_CONTAINS(e, "[_fused_cross_entropy]");
  EXPECT_CONTAINS(e, "target 5 of row 2");
  EXPECT_CONTAINS(error_of<IndexError>([&] {
                    _fused_cross_entropy(x, targets({0, -3, 1, 1}));
                  }),
                  "target -3 of row 1");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    _fused_cross_entropy(x, targets({0, 1}));
                  }),
                  "expected target of shape [4]");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    _fused_cross_entropy(x, targets({0, 1, 1, 1}), -100, 1.5);
                  }),
                  "label_smoothing");
}

TEST(FusedCrossEntropy, OtherCasesKeepTheComposition) {
  // Weighted, sum, float64 and 3-d inputs still run log_softmax + nll_loss, with their own values.
  const Tensor x = randn({6, 4}, kFloat64, Generator(18));
  const Tensor t = targets({0, 1, 2, 3, 0, 1});
  expect_close(cross_entropy(x, t), composed_ce(x, t, -100, 0.0), 1e-12, 1e-12, "f64");
  const Tensor w = from_vector<double>({1, 2, 3, 4}, {4});
  expect_close(cross_entropy(x.to(kFloat32), t, w.to(kFloat32)), nll_loss(log_softmax(x, 1), t, w),
               1e-5, 1e-6, "weighted");
}

// ---- bias + GELU ----

TEST(FusedBiasGelu, MatchesAddGeluBothApproximations) {
  for (const char* approx : {"tanh", "none"}) {
    const Tensor x = mul(randn({5, 7, 24}, kFloat32, Generator(21)), 2.0);
    const Tensor b = randn({24}, kFloat32, Generator(22));
    const Tensor g = randn({5, 7, 24}, kFloat32, Generator(23));
    expect_close(_bias_gelu(x, b, approx), gelu(add(x, b), approx), 1e-6, 1e-6,
                 std::string("forward ") + approx);
    expect_close(_bias_gelu_backward(g, x, b, approx), gelu_backward(g, add(x, b), approx), 1e-6,
                 1e-6, std::string("backward ") + approx);
  }
  // The approximations differ, and each op keeps its own.
  const Tensor x = from_vector<float>({1.5f, -2.0f}, {2});
  const Tensor b = zeros({2}, kFloat32);
  EXPECT_FALSE(equal(_bias_gelu(x, b, "tanh"), _bias_gelu(x, b, "none")));
  EXPECT_CONTAINS(error_of<ValueError>([&] { _bias_gelu(x, b, "fast"); }), "approximate");
  EXPECT_CONTAINS(error_of<ValueError>([&] { _bias_gelu(x, zeros({3}, kFloat32), "tanh"); }),
                  "expected bias of shape [2]");
}

TEST(FusedBiasGelu, LinearGeluGradientsMatchComposition) {
  for (const char* approx : {"tanh", "none"}) {
    for (DType dt : {kFloat32, kBFloat16}) {
      const Tensor x0 = randn({6, 16}, kFloat32, Generator(24)).to(dt);
      const Tensor w0 = mul(randn({32, 16}, kFloat32, Generator(25)), 0.3).to(dt);
      const Tensor b0 = randn({32}, kFloat32, Generator(26)).to(dt);
      const Tensor up = randn({6, 32}, kFloat32, Generator(27)).to(dt);
      auto run = [&](bool fused) {
        Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
        x.requires_grad_();
        w.requires_grad_();
        b.requires_grad_();
        Tensor y = fused ? _linear_gelu(x, w, b, approx) : gelu(linear(x, w, b), approx);
        sum(mul(y, up)).backward();
        return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
      };
      const auto ref = run(false), got = run(true);
      const double tol = dt == kFloat32 ? 1e-5 : 3e-2;
      const char* names[] = {"output", "grad input", "grad weight", "grad bias"};
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(got[i].dtype(), dt);
        expect_close(got[i], ref[i], tol, tol,
                     std::string(names[i]) + " " + approx + " " + dtype_name(dt));
      }
    }
  }
}

// ---- multi-tensor Adam ----

struct AdamCase {
  bool decoupled, amsgrad, maximize;
  double weight_decay;
};

TEST(FusedAdam, OperatorMatchesPerParameterStep) {
  for (const AdamCase c : {AdamCase{false, false, false, 0.0}, AdamCase{true, false, false, 0.01},
                           AdamCase{false, true, true, 0.1}, AdamCase{true, true, false, 0.05}}) {
    // Two optimizers over equal parameters: one per parameter (fused=false), one through the op.
    std::vector<int64_t> sizes[] = {{3, 5}, {70000}, {1}, {4, 4, 4}};
    std::vector<Tensor> pa, pb;
    for (size_t i = 0; i < 4; ++i) {
      Tensor p = randn(sizes[i], kFloat32, Generator(30 + i));
      pa.push_back(p.clone().requires_grad_());
      pb.push_back(p.clone().requires_grad_());
    }
    optim::AdamOptions o;
    o.lr = 1e-2;
    o.weight_decay = c.weight_decay;
    o.amsgrad = c.amsgrad;
    o.maximize = c.maximize;
    o.fused = false;
    std::unique_ptr<optim::Adam> a, b;
    if (c.decoupled) {
      a = std::make_unique<optim::AdamW>(pa, o);
      o.fused = true;
      b = std::make_unique<optim::AdamW>(pb, o);
    } else {
      a = std::make_unique<optim::Adam>(pa, o);
      o.fused = true;
      b = std::make_unique<optim::Adam>(pb, o);
    }
    for (int step = 0; step < 5; ++step) {
      for (size_t i = 0; i < 4; ++i) {
        // Parameter 2 skips step 1: its step count lags the others'.
        if (i == 2 && step == 1) {
          autograd::zero_grads({pa[i], pb[i]});
          continue;
        }
        const Tensor g = randn(sizes[i], kFloat32, Generator(100 + 10 * step + i));
        autograd::set_grad(pa[i], g.clone());
        autograd::set_grad(pb[i], g.clone());
      }
      a->step();
      b->step();
    }
    for (size_t i = 0; i < 4; ++i) {
      // The same fused loop on both sides: bit-identical.
      EXPECT_TRUE(equal(pa[i].detach(), pb[i].detach()))
          << "param " << i << " decoupled " << c.decoupled << " amsgrad " << c.amsgrad;
    }
  }
}

TEST(FusedAdam, RefusesWhatItCannotTake) {
  Tensor p = randn({4}, kFloat32).requires_grad_();
  Tensor q = randn({4}, kFloat16).requires_grad_();
  Tensor g = randn({4}, kFloat32);
  autograd::set_grad(p, g.clone());
  autograd::set_grad(q, g.to(kFloat16));
  optim::AdamOptions o;
  o.fused = true;
  optim::Adam opt({p, q}, o);
  EXPECT_CONTAINS(error_of<ValueError>([&] { opt.step(); }), "fused=true");
  // The operator's own checks name the list and index.
  Tensor m = zeros({4}, kFloat32), v = zeros({4}, kFloat32), bad = zeros({5}, kFloat32);
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    _fused_adam_({p.detach()}, {g}, {bad}, {v}, {}, 1e-3, 0.9, 0.999, 0, 1e-8,
                                 false, false, false, {1});
                  }),
                  "exp_avgs[0] has shape");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    _fused_adam_({p.detach()}, {g}, {m}, {v}, {}, 1e-3, 0.9, 0.999, 0, 1e-8, false,
                                 false, false, {0});
                  }),
                  "steps[0] = 0");
}

}  // namespace
}  // namespace loom::testing
