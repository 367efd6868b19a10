// Decompositions of the inductor backend: composite operators captured as the primitives the
// fusion pass can write.
//
// Note [Decompositions]
//   Fusion writes a fixed set of pointwise primitives (Note [Pointwise fusion]); an operator
//   outside it ends a fused group, however simple its math. The backward formulas of the
//   activations are the common case: tanh's gradient is one tanh_backward operator, so the backward
//   half of a joint graph (Note [Joint graph]) stopped at it. A decomposition rewrites such an
//   operator, while the graph is captured, into primitives: the Capture key's fallback calls the
//   decomposition instead of the operator, and since the Capture key is still active, the
//   primitives it calls are recorded in its place (and run, so that capture goes on with real
//   values). Decompositions apply to captures of backend inductor (CompileOptions::decompose),
//   including the probes of dynamic shapes and the joint graph's backward; backends eager and aot
//   keep the operators.
//
//   Each decomposition follows its eager kernel's formula operation for operation (the functors
//   of src/ops/cpu/activation_backward_kernels.cpp), with constants rounded to the dtype as the
//   kernel's are. The fused kernel then computes what the eager operator did up to one rounding:
//   the eager kernel's compiler may contract `1 - y * y` into one FMA, which generated code never
//   does (-ffp-contract=off); sigmoid's formula has nothing to contract and agrees bit for bit.
//   They apply to float32 and float64 operands of one dtype, device and shape; other operands run
//   the operator itself. relu's backward, threshold_backward, needs no decomposition: it is one of
//   fusion's primitives.
#include <cmath>
#include <map>
#include <string>

#include "compiler/graph.h"
#include "loom/ops.h"

namespace loom::compiler {
namespace {

using Decomposition = Tensor (*)(const Stack& args);

// A constant of the kernel's type T, as the kernel rounds it (a double for a float64 kernel).
double in_type(double v, DType d) {
  return d == kFloat32 ? static_cast<double>(static_cast<float>(v)) : v;
}

// 1 - t, written as -t + 1: the same IEEE result, from primitives the fusion writes.
Tensor one_minus(const Tensor& t) {
  return add(neg(t), 1.0);
}

// SigmoidBackwardOp: g * (1 - y) * y.
Tensor sigmoid_backward_decomposed(const Stack& a) {
  const Tensor& g = a[0].to_tensor();
  const Tensor& y = a[1].to_tensor();
  return mul(mul(g, one_minus(y)), y);
}

// TanhBackwardOp: g * (1 - y * y).
Tensor tanh_backward_decomposed(const Stack& a) {
  const Tensor& g = a[0].to_tensor();
  const Tensor& y = a[1].to_tensor();
  return mul(g, one_minus(mul(y, y)));
}

// SiluBackwardOp: g * s * (1 + x * (1 - s)), s = sigmoid(x).
Tensor silu_backward_decomposed(const Stack& a) {
  const Tensor& g = a[0].to_tensor();
  const Tensor& x = a[1].to_tensor();
  const Tensor s = sigmoid(x);
  return mul(mul(g, s), add(mul(x, one_minus(s)), 1.0));
}

// GeluErfBackwardOp: g * (cdf + x * k * exp(-0.5 * x * x)), cdf = 0.5 * (1 + erf(x * sqrt(1/2)));
// GeluTanhBackwardOp: g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner), t = tanh(inner),
// inner = beta * (x + kappa * x * x * x), d_inner = beta * (1 + 3 * kappa * x * x).
Tensor gelu_backward_decomposed(const Stack& a) {
  const Tensor& g = a[0].to_tensor();
  const Tensor& x = a[1].to_tensor();
  const DType d = x.dtype();
  if (a[2].to_string() == "none") {
    const Tensor cdf = mul(add(erf(mul(x, 0.70710678118654752440)), 1.0), 0.5);
    const Tensor pdf = exp(mul(mul(x, -0.5), x));
    return mul(g, add(cdf, mul(mul(x, 0.39894228040143267794), pdf)));
  }
  const double beta = 0.79788456080286535588, kappa = 0.044715;
  const Tensor inner = mul(add(mul(mul(mul(x, kappa), x), x), x), beta);
  const Tensor t = tanh(inner);
  // T(3) * kKappa is folded by the C++ compiler in T.
  const double three_kappa =
      d == kFloat32 ? static_cast<double>(3.0f * static_cast<float>(kappa)) : 3.0 * kappa;
  const Tensor d_inner = mul(add(mul(mul(x, in_type(three_kappa, d)), x), 1.0), beta);
  const Tensor left = mul(add(t, 1.0), 0.5);
  const Tensor right = mul(mul(mul(x, 0.5), one_minus(mul(t, t))), d_inner);
  return mul(g, add(left, right));
}

const std::map<std::string, Decomposition>& table() {
  static const std::map<std::string, Decomposition> t = {
      {"loom::sigmoid_backward", &sigmoid_backward_decomposed},
      {"loom::tanh_backward", &tanh_backward_decomposed},
      {"loom::silu_backward", &silu_backward_decomposed},
      {"loom::gelu_backward", &gelu_backward_decomposed},
  };
  return t;
}

}  // namespace

bool decompose(const OperatorHandle& op, Stack* stack) {
  const auto it = table().find(op.schema().full_name());
  if (it == table().end()) return false;
  const size_t nargs = op.schema().arguments.size();
  const Stack args(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  const Tensor& first = args[0].to_tensor();
  for (const IValue& v : args) {
    if (!v.is_tensor()) continue;
    const Tensor& t = v.to_tensor();
    if (!t.defined() || t.dtype() != first.dtype() || t.device() != first.device() ||
        (t.dtype() != kFloat32 && t.dtype() != kFloat64) || t.sizes() != first.sizes())
      return false;
  }
  Tensor out = it->second(args);
  stack->resize(stack->size() - nargs);
  stack->emplace_back(std::move(out));
  return true;
}

std::vector<std::string> decomposed_operators() {
  std::vector<std::string> names;
  for (const auto& [name, f] : table()) names.push_back(name);
  return names;
}

}  // namespace loom::compiler
