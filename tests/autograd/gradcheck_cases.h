// A registry of gradcheck cases, one or more per differentiable operator, filled from several files
// and run by gradcheck_test.cpp. coverage: every operator with a registered derivative must have a
// case.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/ops.h"

namespace loom::testing {

struct GradCase {
  std::string op;  // operator name as registered with LOOM_DERIVATIVES: "mul", "pow.Tensor_Scalar"
  std::string label;  // what this case exercises: "broadcast", "non-contiguous", ...
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  std::function<std::vector<Tensor>()> inputs;  // float64; those that require grad are checked
  bool gradgrad = false;                        // also check the second derivative
  double atol = 1e-5, rtol = 1e-3;
};

std::vector<GradCase>& grad_cases();
struct RegisterGradCases {
  explicit RegisterGradCases(std::vector<GradCase> cases) {
    for (auto& c : cases) grad_cases().push_back(std::move(c));
  }
};

// Random float64 tensor in [lo, hi) that requires grad, from a fixed seed per call site.
inline Tensor rnd(std::vector<int64_t> shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                  bool requires_grad = true) {
  Tensor t = add(mul(rand(shape, DType::Float64, Generator(seed)), hi - lo), lo);
  if (requires_grad) t.requires_grad_();
  return t;
}
// The same values laid out non-contiguously (a transposed copy, transposed back): a leaf.
inline Tensor noncontig(std::vector<int64_t> shape, uint64_t seed, double lo = -1.0,
                        double hi = 1.0) {
  Tensor base = rnd(shape, seed, lo, hi, false);
  Tensor t = base.dim() >= 2 ? base.transpose(0, 1).contiguous().transpose(0, 1) : base;
  if (base.dim() < 2) {
    Tensor wide = empty({base.numel() * 2}, DType::Float64);
    t = wide.slice(0, 0, std::nullopt, 2);
    t.copy_(base);
  }
  t.requires_grad_();
  return t;
}

}  // namespace loom::testing
