// Derivatives of the operators in reduce.cpp (see derivatives.h), kept in their own file only for
// size.
#include <cmath>
#include "grad_utils.h"
#include "op_call.h"

namespace loom {

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

// A reduction's output (or its gradient) with the reduced dims put back as size 1, so that it
// broadcasts against the input. dim_pos/keepdim_pos: schema positions of dim and keepdim.
struct Reduced {
  std::vector<int64_t> dims;
  bool keepdim = false;
  int64_t rank = 0;
  Reduced(const BackwardContext& c, size_t dim_pos, size_t keepdim_pos, const char* op)
      : keepdim(c.bool_arg(keepdim_pos)), rank(static_cast<int64_t>(c.input_sizes(0).size())) {
    dims = grad_utils::reduced_dims(c.arg(dim_pos), rank, op);
  }
  // Every dim, not kept (max() and min()).
  explicit Reduced(int64_t rank_) : rank(rank_) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  Tensor operator()(const Tensor& t) const {
    return grad_utils::unsqueeze_reduced(t, rank, dims, keepdim);
  }
  IntArrayRef dim_ref() const { return IntArrayRef(dims); }
  int64_t count(IntArrayRef sizes) const {
    int64_t n = 1;
    for (int64_t d : dims) n *= sizes[static_cast<size_t>(d)];
    return n;
  }
};

// d/dx of max/min-like reductions: the gradient is split evenly between the elements equal to the
// result (ties), as PyTorch does for amax/amin and max()/min().
Tensor evenly_to_extremes(const Tensor& g, const Tensor& x, const Tensor& out, const Reduced& red) {
  const Tensor hit = eq(x, red(out)).to(g.dtype());
  return div(mul(red(g), hit), sum(hit, red.dim_ref(), /*keepdim=*/true));
}

// d/dx prod(x): prod / x without zeros. With zeros: at a zero, the product of the other elements
// when it is the only zero of its group (else 0); elsewhere 0.
Tensor prod_backward(const Tensor& g, const Tensor& x, const Tensor& out, const Reduced& red) {
  const Tensor is_zero = eq(x, 0.0);
  if (!loom::any(is_zero).item<bool>()) return mul(red(g), div(red(out), x));
  const Tensor safe = where(is_zero, 1.0, x);
  const Tensor others = prod(safe, red.dim_ref(), /*keepdim=*/true);  // product of the non-zeros
  const Tensor zeros_in_group = sum(is_zero, red.dim_ref(), /*keepdim=*/true);
  const Tensor at_zero = where(eq(zeros_in_group, 1), others, 0.0);
  const Tensor elsewhere = where(eq(zeros_in_group, 0), div(others, safe), 0.0);
  return mul(red(g), where(is_zero, at_zero, elsewhere));
}

// d/dx var(x) = 2 (x - mean) / (N - correction), for std divided by 2 std (0 where std is 0).
Tensor var_backward(const Tensor& g, const Tensor& x, const Reduced& red, int64_t correction) {
  const double denom = static_cast<double>(red.count(x.sizes()) - correction);
  return mul(red(g), div(sub(x, mean(x, red.dim_ref(), /*keepdim=*/true)), denom / 2.0));
}
Tensor std_backward(const Tensor& g, const Tensor& x, const Tensor& out, const Reduced& red,
                    int64_t correction) {
  const Tensor o = red(out);
  const Tensor zero = eq(o, 0.0);
  // Divide by a safe value and then mask, so that the second derivative has no NaN either.
  const Tensor scaled = masked_fill(div(red(g), mul(where(zero, 1.0, o), 2.0)), zero, 0);
  Reduced kept = red;
  kept.keepdim = true;
  return var_backward(scaled, x, kept, correction);
}

Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& out, const Reduced& red,
                     double p) {
  const Tensor go = red(g), o = red(out);
  if (p == 0.0) return zeros_like(x);
  if (p == 1.0) return mul(go, sign(x));
  const Tensor zero_norm = eq(o, 0.0);
  const Tensor safe_norm = where(zero_norm, 1.0, o);  // x is all zeros there: x / 1 = 0
  if (p == 2.0) return mul(go, div(x, safe_norm));
  if (std::isinf(p)) return mul(evenly_to_extremes(g, abs(x), out, red), sign(x));
  // sign(x) |x|^(p-1) / norm^(p-1); |x|^(p-1) is infinite at 0 for p < 1.
  Tensor scaled = mul(sign(x), pow(abs(x), p - 1.0));
  if (p < 1.0) scaled = masked_fill(scaled, eq(x, 0.0), 0);
  return masked_fill(mul(scaled, div(go, pow(safe_norm, p - 1.0))), zero_norm, 0);
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("sum", {}, [](const BackwardContext& c) -> GradList {
    const int64_t rank = static_cast<int64_t>(c.input_sizes(0).size());
    auto dims = grad_utils::reduced_dims(c.arg(1), rank, "sum");
    return {grad_utils::unreduce(c.grad(0), c.input_sizes(0), dims, c.bool_arg(2))};
  });
  m.def("mean", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef in = c.input_sizes(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    auto dims = grad_utils::reduced_dims(c.arg(1), rank, "mean");
    int64_t n = 1;
    for (int64_t d : dims) n *= in[static_cast<size_t>(d)];
    return {div(grad_utils::unreduce(c.grad(0), in, dims, c.bool_arg(2)), static_cast<double>(n))};
  });
  m.def("prod", autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
    if (!c.needs(0)) return {Tensor()};
    return {prod_backward(c.grad(0), c.input(0), c.output(0), Reduced(c, 1, 2, "prod"))};
  });
  for (const char* op : {"amax", "amin"}) {
    m.def(op, autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
      return {evenly_to_extremes(c.grad(0), c.input(0), c.output(0), Reduced(c, 1, 2, "amax"))};
    });
  }
  for (const char* op : {"max", "min"}) {
    m.def(op, autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
      const Reduced all_dims(static_cast<int64_t>(c.input_sizes(0).size()));
      return {evenly_to_extremes(c.grad(0), c.input(0), c.output(0), all_dims)};
    });
  }
  // The gradient goes to the element the index names (the first of ties).
  for (const char* op : {"max.dim", "min.dim"}) {
    m.def(op, autograd::saves({}, {1}), [](const BackwardContext& c) -> GradList {
      const IntArrayRef in = c.input_sizes(0);
      const int64_t rank = static_cast<int64_t>(in.size());
      const int64_t d = wrap_dim(c.int_arg(1), std::max<int64_t>(rank, 1), "max");
      Tensor g = c.grad(0), index = c.output(1);
      if (!c.bool_arg(2) && rank > 0) {
        g = g.unsqueeze(d);
        index = index.unsqueeze(d);
      }
      return {scatter(zeros(in, g.options()), d, index, g)};
    });
  }
  for (const char* op : {"argmax", "argmin", "all", "any"}) m.nondifferentiable(op);
  m.def("var", autograd::saves({0}), [](const BackwardContext& c) -> GradList {
    if (!c.needs(0)) return {Tensor()};
    return {var_backward(c.grad(0), c.input(0), Reduced(c, 1, 3, "var"), c.int_arg(2))};
  });
  m.def("std", autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
    if (!c.needs(0)) return {Tensor()};
    return {
        std_backward(c.grad(0), c.input(0), c.output(0), Reduced(c, 1, 3, "std"), c.int_arg(2))};
  });
  // d/dx logsumexp(x) = softmax(x) = exp(x - logsumexp(x)).
  m.def("logsumexp", autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
    if (!c.needs(0)) return {Tensor()};
    const Reduced red(c, 1, 2, "logsumexp");
    return {mul(red(c.grad(0)), exp(sub(c.input(0), red(c.output(0)))))};
  });
  m.def("norm", autograd::saves({0}, {0}), [](const BackwardContext& c) -> GradList {
    if (!c.needs(0)) return {Tensor()};
    return {norm_backward(c.grad(0), c.input(0), c.output(0), Reduced(c, 2, 3, "norm"),
                          c.scalar_arg(1).to<double>())};
  });
}

}  // namespace loom
