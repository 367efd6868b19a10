// Note [Accumulating into .grad]: linear's weight gradient added straight into an existing .grad(),
// checked against the same backward with the sink refused, and every case where the engine must
// refuse it (hooks, a second use of the weight, create_graph, grad(), no .grad() yet).
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/ops.h"

namespace loom {
namespace {

struct Net {
  Tensor x, w, b;
  explicit Net(uint64_t seed, DType dt = kFloat64) {
    Generator gen(seed);
    x = rand({6, 4}, TensorOptions(dt), gen) - 0.5;
    w = (rand({3, 4}, TensorOptions(dt), gen) - 0.5).requires_grad_();
    b = (rand({3}, TensorOptions(dt), gen) - 0.5).requires_grad_();
  }
  // A loss whose weight gradient is not a constant: sum(tanh(linear(x))^2).
  Tensor loss() const { return sum(pow(tanh(linear(x, w, b)), 2.0)); }
};

// d loss / d w computed without touching any .grad() (grad() never offers sinks).
Tensor reference_grad(const Net& n) {
  return autograd::grad({n.loss()}, {n.w})[0];
}

TEST(GradSink, LinearAddsIntoAnExistingGrad) {
  Net n(1);
  const Tensor once = reference_grad(n);
  n.loss().backward();  // first backward: .grad() is stolen from the fresh gradient, no sink
  const uint64_t before = autograd::grads_accumulated_in_place();
  const Tensor g = n.w.grad();
  const void* data = g.data_ptr();
  const uint32_t version = g.storage()->version();
  n.loss().backward();  // second: added into the same .grad() by the GEMM
  EXPECT_EQ(autograd::grads_accumulated_in_place(), before + 1);
  EXPECT_EQ(n.w.grad().data_ptr(), data);
  EXPECT_GT(n.w.grad().storage()->version(), version);
  EXPECT_TRUE(allclose(n.w.grad(), mul(once, 2.0), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(n.b.grad(), mul(autograd::grad({n.loss()}, {n.b})[0], 2.0), 1e-12, 1e-12));
}

TEST(GradSink, ZeroedGradMatchesSetToNoneFloat32) {
  // The training-loop case: zero_grad in place, then one backward, against set_to_none.
  Net a(2, kFloat32), b(2, kFloat32);
  a.loss().backward();
  autograd::zero_grads({a.w, a.b}, /*set_to_none=*/false);
  const uint64_t before = autograd::grads_accumulated_in_place();
  a.loss().backward();
  EXPECT_EQ(autograd::grads_accumulated_in_place(), before + 1);
  b.loss().backward();
  EXPECT_TRUE(allclose(a.w.grad(), b.w.grad(), 0, 0)) << "0 + G must be exactly G";
}

TEST(GradSink, PostAccumulateHooksRunOnceWithTheAccumulatedGrad) {
  Net n(3);
  n.loss().backward();
  std::vector<Tensor> seen;
  autograd::register_post_accumulate_grad_hook(
      n.w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().clone()); });
  const uint64_t before = autograd::grads_accumulated_in_place();
  n.loss().backward();
  EXPECT_EQ(autograd::grads_accumulated_in_place(), before + 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(allclose(seen[0], n.w.grad(), 0, 0));
}

TEST(GradSink, RefusedWhereTheUsualPathDiffers) {
  const auto check = [](const char* what, const std::function<void(Net&)>& setup,
                        const std::function<void(Net&)>& run, double factor) {
    SCOPED_TRACE(what);
    Net n(4);
    const Tensor once = reference_grad(n);
    n.loss().backward();
    setup(n);
    const uint64_t before = autograd::grads_accumulated_in_place();
    run(n);
    EXPECT_EQ(autograd::grads_accumulated_in_place(), before);
    EXPECT_TRUE(allclose(n.w.grad(), mul(once, factor), 1e-12, 1e-12));
  };
  const auto none = [](Net&) {};
  const auto backward = [](Net& n) { n.loss().backward(); };
  // A tensor hook sees (and here doubles) the gradient before it is added.
  check(
      "tensor hook",
      [](Net& n) { autograd::register_hook(n.w, [](const Tensor& g) { return mul(g, 2.0); }); },
      backward, 3.0);
  // The weight used twice: the two gradients are summed before the add, as without the sink.
  check(
      "two uses", none,
      [](Net& n) { add(n.loss(), sum(pow(tanh(linear(n.x, n.w, n.b)), 2.0))).backward(); }, 3.0);
  // create_graph: the accumulated gradient must itself be differentiable.
  check(
      "create_graph", none, [](Net& n) { autograd::backward({n.loss()}, {}, std::nullopt, true); },
      2.0);
  // backward(inputs=): gradients are captured, then accumulated.
  check(
      "inputs=", none,
      [](Net& n) { autograd::backward({n.loss()}, {}, std::nullopt, false, {n.w}); }, 2.0);
  // grad() leaves .grad() alone.
  check(
      "grad()", none, [](Net& n) { autograd::grad({n.loss()}, {n.w}); }, 1.0);
}

TEST(GradSink, NotOfferedWithoutAGrad) {
  Net n(5);
  const uint64_t before = autograd::grads_accumulated_in_place();
  n.loss().backward();
  EXPECT_EQ(autograd::grads_accumulated_in_place(), before);
  EXPECT_TRUE(allclose(n.w.grad(), reference_grad(n), 1e-12, 1e-12));
}

}  // namespace
}  // namespace loom
