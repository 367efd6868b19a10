// The joint forward/backward graph (Note [Joint graph] in src/compiler/joint.h): backends aot and
// inductor differentiate a whole compiled function as one graph, split by a min cut. Every value
// and gradient is checked against the same function run eagerly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"
#include "temp_dir.h"

namespace loom {
namespace {

using Tensors = std::vector<Tensor>;

// The pass line that describes the joint graph, or "".
std::string joint_line(const CompileReport& r) {
  for (const std::string& p : r.graphs.at(0).passes)
    if (p.rfind("joint graph", 0) == 0) return p;
  return "";
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  EXPECT_TRUE(equal(got, want)) << what << ": compiled " << got << " eager " << want;
}

// sin is cheap: the backward recomputes it from x rather than keeping it, so the forward saves
// one tensor (x) where eager autograd keeps two (x for sin, sin(x) for cos).
TEST(Joint, CheapPointwiseIsRecomputedRatherThanSaved) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {sum(cos(sin(in[0])))}; };
  CompiledFunction f = compile(fn, {.backend = CompileBackend::Aot, .name = "sincos"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({64, 32}).requires_grad_(true);
    const Tensor got = f({x})[0];
    const Tensor gx = autograd::grad({got}, {x})[0];
    const Tensor want = fn({x})[0];
    const Tensor wx = autograd::grad({want}, {x})[0];
    expect_equal(got, want, "value, call " + std::to_string(call));
    expect_equal(gx, wx, "gradient, call " + std::to_string(call));
  }
  const CompileReport r = f.report();
  EXPECT_EQ(r.graphs[0].replays, 2);
  const std::string line = joint_line(r);
  EXPECT_NE(line.find("saves 1 tensor(s) (8.0 KiB: input 0)"), std::string::npos) << line;
  EXPECT_NE(line.find("recomputes 1 node(s) in the backward (loom::sin)"), std::string::npos)
      << line;
  // The recomputed sin(x), and cos's derivative -sin(sin(x)).
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::sin (backward)"), 2) << r.str();
  EXPECT_NE(r.graphs[0].code.find("backward:"), std::string::npos) << r.graphs[0].code;
}

// A matrix product is not recomputed; parameters the function reaches (constants) get their
// gradients through .grad, accumulated across calls as eagerly.
TEST(Joint, MatrixProductsAreSavedAndParametersAccumulate) {
  const Tensor w = randn({16, 8}).requires_grad_(true), b = randn({8}).requires_grad_(true);
  const Tensor w2 = w.detach().clone().requires_grad_(true),
               b2 = b.detach().clone().requires_grad_(true);
  auto body = [](const Tensor& x, const Tensor& w_, const Tensor& b_) {
    return sum(mul(relu(add(mm(x, w_), b_)), 0.5));
  };
  CompiledFunction f = compile([&](const Tensors& in) -> Tensors { return {body(in[0], w, b)}; },
                               {.backend = CompileBackend::Aot, .name = "mlp"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({4, 16});
    const Tensor got = f({x})[0];
    got.backward();
    const Tensor want = body(x, w2, b2);
    want.backward();
    expect_equal(got, want, "value");
    EXPECT_TRUE(allclose(w.grad(), w2.grad(), 1e-6, 1e-6)) << "w.grad after call " << call;
    EXPECT_TRUE(allclose(b.grad(), b2.grad(), 1e-6, 1e-6)) << "b.grad after call " << call;
  }
  const std::string line = joint_line(f.report());
  // The relu's result (for its mask) and x (transposed, for the gradient of w): the product is
  // not recomputed, and neither is the relu, which costs as many bytes as its input.
  EXPECT_NE(line.find("saves 2 tensor(s) (384 B: loom::relu, loom::transpose)"), std::string::npos)
      << line;
  EXPECT_NE(line.find("recomputes 0 node(s)"), std::string::npos) << line;
}

// Under autocast the joint graph's backward runs as an eager backward after the autocast region
// (Note [Joint graph]): the gradients are eager's bit for bit, and the backward casts are eager's
// four (the float32 loss's gradient to bfloat16, then x's, w's and b's gradients to float32).
// With autocast on during the capture, the bias gradient's sum took the float32 policy and came
// back through two more casts.
TEST(Joint, UnderAutocastTheBackwardHasTheEagerCasts) {
  const Tensor w = randn({8, 16}).requires_grad_(true), b = randn({8}).requires_grad_(true);
  const Tensor w2 = w.detach().clone().requires_grad_(true),
               b2 = b.detach().clone().requires_grad_(true);
  auto body = [](const Tensor& x, const Tensor& w_, const Tensor& b_) {
    return sum(linear(x, w_, b_));  // _linear in bfloat16, sum in float32
  };
  CompiledFunction f = compile([&](const Tensors& in) -> Tensors { return {body(in[0], w, b)}; },
                               {.backend = CompileBackend::Aot, .name = "autocast linear"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({4, 16}).requires_grad_(true);
    const Tensor x2 = x.detach().clone().requires_grad_(true);
    Tensor got, want;
    {
      AutocastGuard autocast(DeviceType::CPU, kBFloat16);
      got = f({x})[0];
      want = body(x2, w2, b2);
    }
    got.backward();
    want.backward();
    const std::string when = " after call " + std::to_string(call);
    expect_equal(got, want, "value" + when);
    expect_equal(x.grad(), x2.grad(), "x.grad" + when);
    expect_equal(w.grad(), w2.grad(), "w.grad" + when);
    expect_equal(b.grad(), b2.grad(), "b.grad" + when);
    EXPECT_EQ(x.grad().dtype(), kFloat32);
  }
  const CompileReport r = f.report();
  const GraphInfo& g = r.graphs.at(0);
  EXPECT_EQ(g.op_counts.at("loom::_to_copy (backward)"), 4) << g.code;
  EXPECT_EQ(g.code.find("float32)  # float32 [1, 8]"), std::string::npos)
      << "the bias gradient was summed in float32:\n"
      << g.code;
}

TEST(Joint, SavedTensorsWrittenInPlaceAndSecondBackwardsAreErrors) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {sum(mul(in[0], in[1]))}; };
  CompiledFunction f = compile(fn, {.backend = CompileBackend::Aot});
  const Tensor x = randn({8}).requires_grad_(true), y = randn({8});
  f({x, y});
  const Tensor out = f({x, y})[0];  // a replay
  {
    autograd::NoGradGuard no_grad;
    add_(y, 1.0);
  }
  try {
    autograd::grad({out}, {x});
    FAIL() << "a saved input written in place was not noticed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"), std::string::npos)
        << e.what();
  }
  const Tensor out2 = f({x, y})[0];
  const Tensor g1 = autograd::grad({out2}, {x}, {}, /*retain_graph=*/true)[0];
  const Tensor g2 = autograd::grad({out2}, {x})[0];
  expect_equal(g1, y, "first backward");
  expect_equal(g2, y, "second backward, the graph retained");
  EXPECT_THROW(autograd::grad({out2}, {x}), ValueError);
  const Tensor out3 = f({x, y})[0];
  EXPECT_THROW(autograd::grad({out3}, {x}, {}, std::nullopt, /*create_graph=*/true),
               NotImplementedError);
}

// What cannot be a joint graph says why, and still differentiates correctly (per operator).
TEST(Joint, AFunctionThatWritesInPlaceSaysWhyAndStillDifferentiates) {
  WarningsToStderr quiet(false);
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    Tensor t = mul(in[0], 2.0);
    add_(t, 1.0);
    return {sum(exp(t))};
  };
  CompiledFunction f = compile(fn, {.backend = CompileBackend::Aot});
  const Tensor x = randn({5}).requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor gx = autograd::grad({f({x})[0]}, {x})[0];
    expect_equal(gx, autograd::grad({fn({x})[0]}, {x})[0], "gradient");
  }
  EXPECT_EQ(joint_line(f.report()),
            "joint graph: not built: the function writes in place (loom::add_)");
}

// Backend inductor fuses each half: the backward's pointwise operators become generated kernels.
TEST(Joint, InductorFusesTheForwardAndTheBackward) {
  testing::TempDir dir{"loom-kernels"};
  config::set("LOOM_CACHE_DIR", dir.path());
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(tanh(mul(sigmoid(add(in[0], in[2])), in[1])))};
  };
  CompiledFunction f = compile(fn, {.name = "fused"});
  const Tensor x = randn({4, 8}).requires_grad_(true), y = randn({4, 8}),
               bias = randn({8}).requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = f({x, y, bias})[0];
    const Tensors g = autograd::grad({got}, {x, bias});
    const Tensor want = fn({x, y, bias})[0];
    const Tensors w = autograd::grad({want}, {x, bias});
    EXPECT_TRUE(allclose(got, want, 1e-6, 1e-6)) << "value, call " << call;
    EXPECT_TRUE(allclose(g[0], w[0], 1e-6, 1e-6)) << "gradient of x, call " << call;
    EXPECT_TRUE(allclose(g[1], w[1], 1e-5, 1e-6)) << "gradient of the bias, call " << call;
  }
  const CompileReport r = f.report();
  EXPECT_NE(joint_line(r).find("joint graph: "), std::string::npos) << r.str();
  bool backward_kernel = false;
  for (const KernelInfo& k : r.graphs[0].kernels)
    backward_kernel = backward_kernel || k.name.find("(backward)") != std::string::npos;
  EXPECT_TRUE(backward_kernel) << r.str();
  config::set("LOOM_CACHE_DIR", "");
}

// Under no_grad the guards fail (grad mode) and the recapture is a plain inference graph.
TEST(Joint, NoGradCallsRecaptureWithoutABackward) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {exp(in[0])}; };
  CompiledFunction f = compile(fn, {.backend = CompileBackend::Aot});
  const Tensor x = randn({3}).requires_grad_(true);
  f({x});
  autograd::NoGradGuard no_grad;
  const Tensor y = f({x})[0];
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(f.report().graphs.size(), 2u);
  EXPECT_EQ(f.report().graphs[1].passes.size(), 0u);
}

}  // namespace
}  // namespace loom
