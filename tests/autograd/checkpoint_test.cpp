// autograd::checkpoint (Note [Activation checkpointing] in include/loom/autograd_checkpoint.h): the
// gradients of a checkpointed function are those of the plain one, bitwise on the CPU, with
// parameters it captures, several inputs and outputs, and dropout; fn is recomputed once per
// backward; the errors and the warning it gives.
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/autograd_checkpoint.h"
#include "loom/ops.h"
#include "loom/warning.h"
#include "test_errors.h"

namespace loom {
namespace {

using testing::error_of;

std::vector<double> vec(const Tensor& t) {
  return to_vector<double>(t.to(kFloat64));
}

// A small two-output function of (x, y) with a captured parameter w and dropout from both the
// default generator and `gen`.
struct Fixture {
  Generator gen{17};
  Tensor w;
  int calls = 0;
  Fixture() {
    Generator g(1);
    w = randn({6, 6}, {}, g).requires_grad_();
  }
  std::vector<Tensor> fn(const std::vector<Tensor>& in) {
    ++calls;
    Tensor h = tanh(matmul(in[0], w));
    h = dropout(h, 0.3, true);  // the default generator
    Tensor z = mul(h, in[1]);
    z = dropout(z, 0.25, true, gen);
    return {sum(z), mul(h, 2.0)};
  }
};

struct Grads {
  std::vector<double> x, y, w;
};

Grads run(bool checkpointed, Fixture& f) {
  manual_seed(123);
  Generator g(2);
  Tensor x = randn({4, 6}, {}, g).requires_grad_();
  Tensor y = randn({4, 6}, {}, g).requires_grad_();
  autograd::set_grad(f.w, Tensor());
  auto body = [&f](const std::vector<Tensor>& in) { return f.fn(in); };
  std::vector<Tensor> out =
      checkpointed ? autograd::checkpoint(body, {add(x, 0.0), y}, {.generators = {f.gen}})
                   : body({add(x, 0.0), y});
  Tensor loss = add(out[0], sum(mul(out[1], out[1])));
  autograd::backward({loss});
  return {vec(x.grad()), vec(y.grad()), vec(f.w.grad())};
}

TEST(Checkpoint, GradientsAreBitwiseThoseOfThePlainFunction) {
  Fixture plain, ckpt;
  const Grads want = run(false, plain);
  const GeneratorState plain_after = plain.gen.state();
  const uint64_t default_after = default_generator().state().offset;
  const Grads got = run(true, ckpt);
  EXPECT_EQ(got.x, want.x);
  EXPECT_EQ(got.y, want.y);
  EXPECT_EQ(got.w, want.w);
  EXPECT_EQ(plain.calls, 1);
  EXPECT_EQ(ckpt.calls, 2);  // the forward and one recompute
  // The recompute left the generators where the first run had left them.
  EXPECT_EQ(ckpt.gen.state(), plain_after);
  EXPECT_EQ(default_generator().state().offset, default_after);
  // Without restoring the generators the recompute draws other masks: other gradients.
  Fixture norestore;
  autograd::CheckpointOptions no_restore;
  no_restore.preserve_rng_state = false;
  manual_seed(123);
  Generator g(2);
  Tensor x = randn({4, 6}, {}, g).requires_grad_();
  Tensor y = randn({4, 6}, {}, g).requires_grad_();
  auto out = autograd::checkpoint([&](const std::vector<Tensor>& in) { return norestore.fn(in); },
                                  {x, y}, no_restore);
  autograd::backward({add(out[0], sum(mul(out[1], out[1])))});
  EXPECT_NE(vec(norestore.w.grad()), want.w);
}

TEST(Checkpoint, KeepsNoIntermediateInTheGraph) {
  Fixture f;
  Tensor x = randn({4, 6}).requires_grad_(), y = randn({4, 6});
  auto out = autograd::checkpoint([&](const std::vector<Tensor>& in) { return f.fn(in); }, {x, y});
  ASSERT_TRUE(autograd::grad_fn(out[0]));
  EXPECT_EQ(autograd::grad_fn(out[0])->name(), "CheckpointBackward");
  EXPECT_EQ(autograd::grad_fn(out[1]), autograd::grad_fn(out[0]));
  // One edge per input: x's AccumulateGrad, none for y (it does not require grad).
  ASSERT_EQ(autograd::grad_fn(out[0])->next_edges().size(), 2u);
  EXPECT_TRUE(autograd::grad_fn(out[0])->next_edges()[0].valid());
  EXPECT_FALSE(autograd::grad_fn(out[0])->next_edges()[1].valid());
  autograd::backward({out[0]});
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(f.w.grad().defined());
}

TEST(Checkpoint, ErrorsAndFallbacks) {
  Tensor x = randn({3}).requires_grad_();
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    autograd::checkpoint(
                        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
                        {x});
                  }),
                  "is one of its inputs");
  // Modified in place between forward and backward: the recompute would see other values.
  Tensor a = mul(x, 1.0);
  auto out = autograd::checkpoint(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; }, {a});
  {
    autograd::NoGradGuard ng;
    a.add_(full_like(a, 1.0));
  }
  EXPECT_CONTAINS(error_of<ValueError>([&] { autograd::backward({sum(out[0])}); }),
                  "modified in place after the checkpoint saved it");
  // No input requires grad: fn runs recording as usual (the parameter still gets its gradient).
  Tensor w = randn({3}).requires_grad_();
  WarningsToStderr quiet(false);
  auto o2 = autograd::checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], w)}; },
      {randn({3})});
  EXPECT_NE(autograd::grad_fn(o2[0])->name(), "CheckpointBackward");
  bool warned = false;
  for (const Warning& wn : warnings())
    warned = warned || wn.key == "autograd.checkpoint.no_grad_inputs";
  EXPECT_TRUE(warned);
  autograd::backward({sum(o2[0])});
  EXPECT_TRUE(w.grad().defined());
  // Under NoGradGuard it just runs fn.
  autograd::NoGradGuard ng;
  auto o3 = autograd::checkpoint(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; }, {x});
  EXPECT_FALSE(o3[0].requires_grad());
}

}  // namespace
}  // namespace loom
