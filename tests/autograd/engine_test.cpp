// The autograd engine: recording, backward, grad(), accumulation, hooks, modes and errors.
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/ops.h"
#include "ops/op_table.h"

namespace loom {
namespace {

using autograd::NoGradGuard;
using testing::error_of;

Tensor leaf(std::vector<double> v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape).requires_grad_();
}

std::vector<double> vec(const Tensor& t) {
  return to_vector<double>(t);
}

TEST(Autograd, TensorsThatDoNotRequireGradRecordNothing) {
  Tensor a = from_vector<double>({1, 2}), b = from_vector<double>({3, 4});
  Tensor c = add(a, b);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
  EXPECT_FALSE(c.key_set().has(DispatchKey::Autograd));
}

TEST(Autograd, MulAddChainAgainstHandDerivative) {
  // f = sum(x * y + x) => df/dx = y + 1, df/dy = x
  Tensor x = leaf({1, 2, 3}), y = leaf({4, 5, 6});
  Tensor f = sum(add(mul(x, y), x));
  EXPECT_TRUE(f.requires_grad());
  EXPECT_EQ(autograd::grad_fn(f)->name(), "SumBackward");
  f.backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(vec(y.grad()), (std::vector<double>{1, 2, 3}));
}

TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  Tensor s = leaf({2}, {1, 1});
  sum(mul(add(x, b), s)).backward();
  EXPECT_EQ(vec(b.grad()), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(vec(s.grad()), (std::vector<double>{21 + 120}));
  EXPECT_EQ(b.grad().sizes(), IntArrayRef({3}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2});
  sum(mul(x, x)).backward();
  sum(mul(x, x)).backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{4, 8}));
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = leaf({3});
  Tensor a = mul(x, 2.0), b = mul(x, x);
  Tensor f = sum(add(a, b));  // 2x + x^2 -> 2 + 2x = 8
  f.backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{8}));
}

TEST(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 2.0);
  std::string msg = error_of<ValueError>([&] { y.backward(); });
  EXPECT_CONTAINS(msg, "scalar outputs");
  EXPECT_CONTAINS(msg, "[2]");
  y.backward(from_vector<double>({1, 10}));
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{2, 20}));
}

TEST(Autograd, SecondBackwardWithoutRetainGraphFails) {
  Tensor x = leaf({1, 2});
  Tensor f = sum(mul(x, x));
  f.backward();
  std::string msg = error_of<ValueError>([&] { f.backward(); });
  EXPECT_CONTAINS(msg, "second time");
  EXPECT_CONTAINS(msg, "loom::mul");
  Tensor g = sum(mul(x, x));
  g.backward(Tensor(), /*retain_graph=*/true);
  g.backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{2 + 4, 4 + 8}));
}

TEST(Autograd, BackwardOfATensorWithoutHistoryFails) {
  Tensor x = from_vector<double>({1.0});
  EXPECT_CONTAINS(error_of<ValueError>([&] { x.backward(); }), "does not require grad");
}

TEST(Autograd, GradFunctionDoesNotTouchDotGrad) {
  Tensor x = leaf({1, 2}), y = leaf({3, 4});
  Tensor f = sum(mul(x, y));
  auto g = autograd::grad({f}, {x});
  EXPECT_EQ(vec(g[0]), (std::vector<double>{3, 4}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
}

TEST(Autograd, GradOfAnIntermediateTensor) {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 3.0);
  Tensor f = sum(mul(h, h));
  auto g = autograd::grad({f}, {h});
  EXPECT_EQ(vec(g[0]), (std::vector<double>{6, 12}));
}

TEST(Autograd, UnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = leaf({1}), unused = leaf({2});
  Tensor f = sum(mul(x, 2.0));
  std::string msg = error_of<ValueError>([&] { autograd::grad({f}, {x, unused}, {}, true); });
  EXPECT_CONTAINS(msg, "input 1");
  EXPECT_CONTAINS(msg, "allow_unused");
  auto g = autograd::grad({f}, {x, unused}, {}, true, false, /*allow_unused=*/true);
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
}

TEST(Autograd, GradOfNonLeafIsAnErrorUnlessRetained) {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 2.0);
  Tensor h2 = mul(x, 3.0);
  h2.retain_grad();
  sum(add(mul(h, h), h2)).backward();
  EXPECT_CONTAINS(error_of<ValueError>([&] { (void)h.grad(); }), "retain_grad");
  EXPECT_EQ(vec(h2.grad()), (std::vector<double>{1, 1}));
}

TEST(Autograd, NoGradAndInferenceModeRecordNothing) {
  Tensor x = leaf({1});
  {
    NoGradGuard ng;
    EXPECT_FALSE(autograd::GradMode::is_enabled());
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
  }
  {
    autograd::InferenceMode im;
    EXPECT_FALSE(mul(x, 2.0).requires_grad());
  }
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
}

TEST(Autograd, DetachSharesStorageWithoutHistory) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
}

TEST(Autograd, OnlyFloatingLeavesCanRequireGrad) {
  Tensor i = from_vector<int64_t>({1, 2});
  EXPECT_CONTAINS(error_of<TypeError>([&] { i.requires_grad_(); }), "int64");
  Tensor x = leaf({1});
  Tensor y = mul(x, 2.0);
  EXPECT_CONTAINS(error_of<ValueError>([&] { y.requires_grad_(false); }), "leaf");
}

TEST(Autograd, ModifyingASavedTensorNamesTheOperator) {
  Tensor x = leaf({1, 2});
  Tensor a = mul(x, 1.0);
  Tensor b = mul(a, a);  // saves a
  a.mul_(2.0);
  std::string msg = error_of<ValueError>([&] { sum(b).backward(); });
  EXPECT_CONTAINS(msg, "modified by an in-place operation");
  EXPECT_CONTAINS(msg, "loom::mul");
  EXPECT_CONTAINS(msg, "version");
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradFails) {
  Tensor x = leaf({1, 2});
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    x.add_(from_vector<double>({1, 1}));
                  }),
                  "leaf tensor that requires grad");
  NoGradGuard ng;
  x.add_(from_vector<double>({1, 1}));  // allowed without grad (as an optimizer does)
  EXPECT_EQ(vec(x), (std::vector<double>{2, 3}));
}

TEST(Autograd, InPlaceOpsOnNonLeavesAreRecorded) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 3.0);
  Tensor z = mul(x, 2.0);
  y.mul_(z);          // y = 6x^2 (the old value of y is saved as a copy)
  sum(y).backward();  // d/dx = 12x
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{12, 24}));
}

TEST(Autograd, TensorHooksCanReplaceTheGradient) {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 2.0);
  std::vector<double> seen;
  autograd::register_hook(h, [&](const Tensor& g) {
    seen = vec(g);
    return mul(g, 10.0);
  });
  autograd::register_hook(x, [&](const Tensor& g) { return add(g, 1.0); });
  int post = 0;
  autograd::register_post_accumulate_grad_hook(x, [&](const Tensor& t) {
    ++post;
    EXPECT_TRUE(t.grad().defined());
  });
  sum(h).backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{21, 21}));
  EXPECT_EQ(post, 1);
}

TEST(Autograd, NodesRunMostRecentFirst) {
  // Two independent branches: the branch recorded last runs first.
  Tensor x = leaf({1}), y = leaf({1});
  std::vector<char> order;
  Tensor a = mul(x, 2.0);
  Tensor b = mul(y, 2.0);
  autograd::register_hook(a, [&](const Tensor&) {
    order.push_back('a');
    return Tensor();
  });
  autograd::register_hook(b, [&](const Tensor&) {
    order.push_back('b');
    return Tensor();
  });
  sum(add(a, b)).backward();
  EXPECT_EQ(order, (std::vector<char>{'b', 'a'}));
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = leaf({2, 3});
  Tensor y = sum(mul(mul(x, x), x));  // x^3
  auto g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(vec(g[0]), (std::vector<double>{12, 27}));  // 3x^2
  EXPECT_TRUE(g[0].requires_grad());
  sum(g[0]).backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{12, 18}));  // 6x
}

TEST(Autograd, AnomalyModeNamesTheForwardOperator) {
  autograd::DetectAnomalyGuard anomaly;
  Tensor x = leaf({0.0});
  Tensor y = div(x, x);  // 0/0: backward gives NaN
  std::string msg = error_of<ValueError>([&] { sum(y).backward(); });
  EXPECT_CONTAINS(msg, "NaN");
  EXPECT_CONTAINS(msg, "loom::div");
}

TEST(Autograd, MatmulGradientsMatchHandComputation) {
  Tensor a = leaf({1, 2, 3, 4}, {2, 2});
  Tensor b = leaf({5, 6, 7, 8}, {2, 2});
  sum(mm(a, b)).backward();
  // d/da sum(AB) = 1 B^T: rows of ones times B^T
  EXPECT_EQ(vec(a.grad()), (std::vector<double>{11, 15, 11, 15}));
  EXPECT_EQ(vec(b.grad()), (std::vector<double>{4, 4, 6, 6}));
}

}  // namespace
}  // namespace loom
