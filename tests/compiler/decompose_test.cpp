// Note [Decompositions] (src/compiler/decompose.cpp): the activations' backward operators are
// captured as primitives, which fuse; the fused kernels compute what the eager operators did, to
// the rounding of one FMA the eager kernels' compiler may form where the generated code does not.
#include <gtest/gtest.h>

#include <functional>
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

// Within the rounding differences of a contracted multiply-add (a cancellation in gelu's tanh
// form magnifies them in float64); NaNs where eager has them.
void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  const bool f32 = want.dtype() == kFloat32;
  EXPECT_TRUE(allclose(got, want, f32 ? 1e-5 : 1e-11, f32 ? 1e-6 : 1e-14, /*equal_nan=*/true))
      << what << "\ncompiled " << got << "\neager " << want;
}

using Backward = std::function<Tensor(const Tensor&, const Tensor&)>;

const std::vector<std::pair<std::string, Backward>>& backwards() {
  static const std::vector<std::pair<std::string, Backward>> b = {
      {"tanh_backward", [](const Tensor& g, const Tensor& y) { return tanh_backward(g, y); }},
      {"sigmoid_backward", [](const Tensor& g, const Tensor& y) { return sigmoid_backward(g, y); }},
      {"silu_backward", [](const Tensor& g, const Tensor& x) { return silu_backward(g, x); }},
      {"gelu_backward", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x); }},
      {"gelu_backward tanh",
       [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, "tanh"); }},
      {"threshold_backward",
       [](const Tensor& g, const Tensor& x) { return threshold_backward(g, x, 0.25); }},
  };
  return b;
}

// Each operator, called directly after a multiply (so that its group has two nodes), compiled
// and eager, on inputs with zeros, infinities and NaNs, in float32 and float64. sigmoid's and
// threshold's formulas leave nothing to contract: those agree bit for bit.
TEST(Decompose, EachDecomposedOperatorFusesAndMatchesEager) {
  FreshCache cache;
  for (const auto& [name, op] : backwards()) {
    for (DType dt : {kFloat32, kFloat64}) {
      TensorFunction fn = [op = op](const Tensors& in) -> Tensors {
        return {op(mul(in[0], 1.5), in[1])};
      };
      CompiledFunction f = compile(fn, {.name = name});
      for (int call = 0; call < 2; ++call) {
        const Tensor g = randn({9, 31}, dt), x = edgy({9, 31}, dt);
        const Tensor got = f({g, x})[0], want = fn({g, x})[0];
        const std::string what = name + " " + dtype_name(dt) + " call " + std::to_string(call);
        if (name == "sigmoid_backward" || name == "threshold_backward") {
          expect_bitwise(got, want, what);
        } else {
          expect_near(got, want, what);
        }
      }
      const CompileReport r = f.report();
      ASSERT_EQ(r.graphs.size(), 1u);
      EXPECT_EQ(r.graphs[0].op_counts, (std::map<std::string, int64_t>{{"fused", 1}}))
          << name << "\n"
          << r.str();
    }
  }
}

// In a joint graph the decomposed tanh_backward fuses: the min cut even moves 1 - y*y into the
// forward kernel (it saves that instead of y, the same bytes nearer the backward), and the backward
// kernel multiplies the gradients. With decompose=false the operator stays, alone, unfused.
TEST(Decompose, TheJointBackwardFusesTheActivationsGradient) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {mul(tanh(mm(in[0], in[1])), in[2])};
  };
  for (bool decompose : {true, false}) {
    CompiledFunction f = compile(fn, {.name = "layer", .decompose = decompose});
    for (int call = 0; call < 2; ++call) {
      const Tensor x = randn({8, 16}), w0 = randn({16, 32}), s = randn({8, 32});
      Tensor w = w0.clone().requires_grad_(true), we = w0.clone().requires_grad_(true);
      const Tensor got = f({x, w, s})[0], want = fn({x, we, s})[0];
      expect_bitwise(got, want, "forward");
      autograd::backward({sum(got)});
      autograd::backward({sum(want)});
      expect_near(w.grad(), we.grad(), "grad of W");
    }
    const CompileReport r = f.report();
    ASSERT_EQ(r.graphs.size(), 1u);
    const auto& ops = r.graphs[0].op_counts;
    EXPECT_EQ(ops.count("loom::tanh_backward (backward)"), decompose ? 0u : 1u) << r.str();
    EXPECT_EQ(ops.count("fused (backward)"), decompose ? 1u : 0u) << r.str();
  }
}

// Backend aot keeps the operators: it has no fusion to feed.
TEST(Decompose, BackendAotKeepsTheOperators) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {sum(sigmoid(in[0]))}; };
  CompiledFunction f = compile(fn, {.backend = CompileBackend::Aot, .name = "aot"});
  Tensor x = randn({4, 4}).requires_grad_(true);
  f({x});
  EXPECT_EQ(f.report().graphs[0].op_counts.count("loom::sigmoid_backward (backward)"), 1u)
      << f.report().str();
}

}  // namespace
}  // namespace loom
