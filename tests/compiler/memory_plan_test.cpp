// Note [Memory planning] (src/compiler/memory_plan.cpp): generated kernels write into the buffers
// of values that died before them, or in place over an input that dies at them, but only while
// nothing else holds that buffer. Results are checked against the same function run eagerly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/test_util.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/ops.h"

namespace loom {
namespace {

using Tensors = std::vector<Tensor>;

// Gradients sum their parts in another order than eager's: float32 rounding apart.
void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  EXPECT_TRUE(allclose(got, want, 1e-4, 1e-5))
      << what << "\ncompiled " << got << "\neager " << want;
}

std::string passes(const CompileReport& r) {
  std::string s;
  for (const GraphInfo& g : r.graphs)
    for (const std::string& p : g.passes) s += p + "\n";
  return s;
}

// tanh(2x + 1) @ W, relu(.) * 3 + 1, @ W again, then two results over the last product: every
// value is [64, 32], so the kernels can cycle through the buffers of the dead ones.
Tensors chain(const Tensors& in) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor t = tanh(add(mul(x, 2.0), 1.0));
  const Tensor m = mm(t, w);
  const Tensor u = add(mul(relu(m), 3.0), 1.0);
  const Tensor v = mm(u, w);
  const Tensor a = sigmoid(v);
  return {a, add(mul(a, 2.0), v)};
}

TEST(MemoryPlan, KernelsWriteInPlaceAndIntoDeadBuffers) {
  FreshCache cache;
  CompiledFunction f = compile(chain, {.name = "chain"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({64, 32}), w = randn({32, 32});
    const Tensors got = f({x, w}), want = chain({x, w});
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < got.size(); ++i)
      expect_equal(got[i], want[i],
                   "call " + std::to_string(call) + " result " + std::to_string(i));
    EXPECT_NE(got[0].data_ptr(), got[1].data_ptr());
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u);
  ASSERT_EQ(r.graphs[0].kernels.size(), 3u) << r.str();
  // The relu kernel writes over the product it reads; the last kernel's two results take the
  // buffers of tanh's result (dead at the first product) and of the relu kernel's (the second).
  const std::string p = passes(r);
  EXPECT_NE(p.find("memory plan: 3 of 4 kernel output(s) reuse a dead buffer (1 in place)"),
            std::string::npos)
      << p;
  // The first call captured; the two replays took three buffers each.
  EXPECT_NE(p.find("memory plan at run time: 6 buffer(s) taken, 0 refused"), std::string::npos)
      << p;
}

// A view of the product outlives it: its buffer is not the relu kernel's to overwrite.
TEST(MemoryPlan, ABufferSomethingElseHoldsIsNotTaken) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor m = mm(tanh(add(mul(in[0], 2.0), 1.0)), in[1]);
    const Tensor flat = m.view({-1});
    return {add(mul(relu(m), 3.0), 1.0), flat};
  };
  CompiledFunction f = compile(fn, {.name = "held"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({16, 8}), w = randn({8, 16});
    const Tensors got = f({x, w}), want = fn({x, w});
    expect_equal(got[0], want[0], "relu result");
    expect_equal(got[1], want[1], "the product's view");
  }
  const std::string p = passes(f.report());
  EXPECT_NE(p.find("(1 in place)"), std::string::npos) << p;
  EXPECT_NE(p.find("0 buffer(s) taken, 2 refused"), std::string::npos) << p;
}

// With per-kernel backward nodes (no joint graph) a kernel that records its backward keeps its
// inputs: none of them may be overwritten, and the gradients stay eager's.
TEST(MemoryPlan, AKernelThatSavesItsInputsForBackwardIsNotWrittenInPlace) {
  FreshCache cache;
  CompiledFunction f = compile(chain, {.name = "grad", .joint = false});
  for (int call = 0; call < 2; ++call) {
    const Tensor x0 = randn({64, 32}), w0 = randn({32, 32});
    Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    Tensor xe = x0.clone().requires_grad_(true), we = w0.clone().requires_grad_(true);
    const Tensors got = f({x, w}), want = chain({xe, we});
    autograd::backward({sum(add(got[0], got[1]))});
    autograd::backward({sum(add(want[0], want[1]))});
    expect_equal(got[1], want[1], "result");
    expect_equal(x.grad(), xe.grad(), "grad of x");
    expect_equal(w.grad(), we.grad(), "grad of w");
  }
  const std::string p = passes(f.report());
  EXPECT_NE(p.find("(1 in place)"), std::string::npos) << p;
  EXPECT_EQ(p.find(" 0 refused"), std::string::npos) << p;
}

}  // namespace
}  // namespace loom
