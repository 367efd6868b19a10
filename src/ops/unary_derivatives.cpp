// Derivatives of the operators in unary.cpp (see derivatives.h), kept in their own file only for
// size.
#include <algorithm>
#include <cmath>
#include "loom/derivatives.h"
#include "op_call.h"

namespace loom {

// ---- derivatives ----
// Note [Fused backward kernels]
// Without create_graph, the activations use their fused backward kernels (threshold_backward,
// sigmoid_backward, ...): one pass, no temporaries. With create_graph the derivative is written
// with ordinary differentiable operators, so it can be differentiated again. The backward kernels
// have derivatives of their own as well, so a graph that recorded one (relu's, always) stays
// differentiable.

namespace {
using autograd::BackwardContext;
using autograd::GradList;

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluBeta = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

Tensor one_minus(const Tensor& t) {
  return add(neg(t), 1.0);
}

// A unary derivative: the gradient of slot 0 from the context, or none if it is not needed.
template <class F>
GradList unary_grad(const BackwardContext& c, const F& f) {
  if (!c.needs(0) || !c.grad(0).defined()) return {Tensor()};
  return {f(c.grad(0))};
}

// Gradient of a possibly wrapped-number or integer input: none.
bool wants(const BackwardContext& c, size_t slot) {
  return c.needs(slot) && is_floating(c.input_dtype(slot));
}

// d/dx silu(x) = s (1 + x (1 - s)) and d2/dx2 = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x).
Tensor silu_grad(const Tensor& x) {
  const Tensor s = sigmoid(x);
  return mul(s, add(mul(x, one_minus(s)), 1.0));
}
Tensor silu_grad2(const Tensor& x) {
  const Tensor s = sigmoid(x);
  return mul(mul(s, one_minus(s)), add(mul(x, add(mul(s, -2.0), 1.0)), 2.0));
}

// The first and second derivatives of gelu (of the formula GeluErfOp / GeluTanhOp computes).
// erf:  Phi(x) + x phi(x) and phi(x) (2 - x^2).
// tanh: with u = beta (x + kappa x^3), t = tanh(u):  0.5 (1 + t) + 0.5 x (1 - t^2) u' and
//       (1 - t^2) (u' - x t u'^2 + 0.5 x u'').
Tensor gelu_grad(const Tensor& x, bool tanh_approx) {
  if (!tanh_approx) {
    const Tensor cdf = mul(add(erf(mul(x, kSqrtHalf)), 1.0), 0.5);
    const Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), kInvSqrt2Pi);
    return add(cdf, mul(x, pdf));
  }
  const Tensor x2 = mul(x, x);
  const Tensor t = tanh(mul(add(x, mul(mul(x2, x), kGeluKappa)), kGeluBeta));
  const Tensor du = mul(add(mul(x2, 3.0 * kGeluKappa), 1.0), kGeluBeta);
  return add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, one_minus(mul(t, t))), du), 0.5));
}
Tensor gelu_grad2(const Tensor& x, bool tanh_approx) {
  const Tensor x2 = mul(x, x);
  if (!tanh_approx) {
    const Tensor pdf = mul(exp(mul(x2, -0.5)), kInvSqrt2Pi);
    return mul(pdf, add(neg(x2), 2.0));
  }
  const Tensor t = tanh(mul(add(x, mul(mul(x2, x), kGeluKappa)), kGeluBeta));
  const Tensor du = mul(add(mul(x2, 3.0 * kGeluKappa), 1.0), kGeluBeta);
  const Tensor d2u = mul(x, 6.0 * kGeluBeta * kGeluKappa);
  const Tensor inner = add(sub(du, mul(mul(x, t), mul(du, du))), mul(mul(x, d2u), 0.5));
  return mul(one_minus(mul(t, t)), inner);
}

bool approximate_is_tanh(const BackwardContext& c, size_t pos) {
  return c.arg(pos).to_string() == "tanh";  // validated by the forward op
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("neg", {}, [](const BackwardContext& c) {
    return unary_grad(c, [](const Tensor& g) { return neg(g); });
  });
  m.def("abs", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return mul(g, sign(c.input(0))); });
  });
  m.def("exp", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return mul(g, c.output(0)); });
  });
  m.def("log", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return div(g, c.input(0)); });
  });
  m.def("log1p", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return div(g, add(c.input(0), 1.0)); });
  });
  m.def("sqrt", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return div(g, mul(c.output(0), 2.0)); });
  });
  // d/dx x^(-1/2) = -x^(-3/2) / 2 = -rsqrt(x)^3 / 2.
  m.def("rsqrt", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor y = c.output(0);
      return mul(g, mul(mul(y, mul(y, y)), -0.5));
    });
  });
  m.def("sin", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return mul(g, cos(c.input(0))); });
  });
  m.def("cos", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return neg(mul(g, sin(c.input(0)))); });
  });
  m.def("tanh", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor y = c.output(0);
      return c.create_graph() ? mul(g, one_minus(mul(y, y))) : tanh_backward(g, y);
    });
  });
  m.def("sigmoid", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor y = c.output(0);
      return c.create_graph() ? mul(g, mul(y, one_minus(y))) : sigmoid_backward(g, y);
    });
  });
  // relu's output is positive exactly where its input is, so the output serves (and relu_ needs no
  // copy of its input). threshold_backward is differentiable, so this holds with create_graph too.
  m.def("relu", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) { return threshold_backward(g, c.output(0), 0); });
  });
  m.def("silu", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor x = c.input(0);
      return c.create_graph() ? mul(g, silu_grad(x)) : silu_backward(g, x);
    });
  });
  m.def("gelu", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor x = c.input(0);
      if (!c.create_graph()) return gelu_backward(g, x, c.arg(1).to_string());
      return mul(g, gelu_grad(x, approximate_is_tanh(c, 1)));
    });
  });
  m.def("erf", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor x = c.input(0);
      return mul(g, mul(exp(neg(mul(x, x))), kTwoOverSqrtPi));
    });
  });
  m.def("sign", {}, [](const BackwardContext& c) {
    return unary_grad(c, [](const Tensor& g) { return zeros_like(g); });
  });
  m.def("reciprocal", autograd::saves({}, {0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor y = c.output(0);
      return neg(mul(g, mul(y, y)));
    });
  });
  m.nondifferentiable("logical_not");

  // d/dx x^e = e x^(e-1); 0 for e == 0 (also at x == 0, where x^(e-1) is infinite), as PyTorch.
  m.def("pow.Tensor_Scalar", autograd::saves({0}), [](const BackwardContext& c) -> GradList {
    if (!wants(c, 0) || !c.grad(0).defined()) return {Tensor()};
    const Tensor& g = c.grad(0);
    const double e = c.scalar_arg(1).to<double>();
    if (e == 0.0) return {zeros_like(g)};
    if (e == 1.0) return {g};
    const Tensor x = c.input(0);
    if (e == 2.0) return {mul(g, mul(x, 2.0))};
    return {mul(g, mul(pow(x, e - 1.0), e))};
  });
  // d/dx x^e = e x^(e-1) (0 where e == 0); d/de x^e = x^e log(x) (0 where x == 0 and e >= 0, the
  // limit from the right), as PyTorch.
  m.def("pow.Tensor_Tensor", autograd::saves({0, 1}, {0}),
        [](const BackwardContext& c) -> GradList {
          const Tensor& g = c.grad(0);
          GradList r(2);
          if (!g.defined()) return r;
          const Tensor x = c.input(0), e = c.input(1);
          if (wants(c, 0)) {
            r[0] = where(eq(e, 0.0), 0.0, mul(g, mul(e, pow(x, sub(e, 1.0)))));
          }
          if (wants(c, 1)) {
            // The base may be a wrapped number (pow(2.5, t)) of another dtype: log it in g's.
            const Tensor xg = x.dtype() == g.dtype() ? x : x.to(g.dtype());
            r[1] =
                where(logical_and(eq(xg, 0.0), ge(e, 0.0)), 0.0, mul(g, mul(c.output(0), log(xg))));
          }
          return r;
        });
  m.alias("pow_.Scalar", "pow.Tensor_Scalar");
  m.alias("pow_.Tensor", "pow.Tensor_Tensor");
  // The gradient passes where min <= x <= max (both ends included, as PyTorch), else 0.
  m.def("clamp", autograd::saves({0}), [](const BackwardContext& c) {
    return unary_grad(c, [&](const Tensor& g) {
      const Tensor x = c.input(0);
      Tensor keep;
      if (!c.arg(1).is_none()) keep = ge(x, c.scalar_arg(1));
      if (!c.arg(2).is_none()) {
        const Tensor below_max = le(x, c.scalar_arg(2));
        keep = keep.defined() ? logical_and(keep, below_max) : below_max;
      }
      return where(keep, g, 0.0);
    });
  });

  // The backward kernels: linear in grad_output (slot 0), so its gradient is the same kernel
  // applied to the incoming gradient; the second slot gets the second derivative's term.
  m.def("threshold_backward", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    // Piecewise constant in self: no gradient for it.
    GradList r(2);
    if (c.needs(0) && c.grad(0).defined()) {
      r[0] = threshold_backward(c.grad(0), c.input(1), c.scalar_arg(2));
    }
    return r;
  });
  m.def("sigmoid_backward", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!gg.defined()) return r;
    const Tensor y = c.input(1);
    if (c.needs(0)) {
      r[0] = c.create_graph() ? mul(gg, mul(y, one_minus(y))) : sigmoid_backward(gg, y);
    }
    if (c.needs(1)) r[1] = mul(mul(gg, c.input(0)), add(mul(y, -2.0), 1.0));  // d/dy y (1 - y)
    return r;
  });
  m.def("tanh_backward", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!gg.defined()) return r;
    const Tensor y = c.input(1);
    if (c.needs(0)) r[0] = c.create_graph() ? mul(gg, one_minus(mul(y, y))) : tanh_backward(gg, y);
    if (c.needs(1)) r[1] = mul(mul(gg, c.input(0)), mul(y, -2.0));  // d/dy (1 - y^2)
    return r;
  });
  m.def("silu_backward", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!gg.defined()) return r;
    const Tensor x = c.input(1);
    if (c.needs(0)) r[0] = c.create_graph() ? mul(gg, silu_grad(x)) : silu_backward(gg, x);
    if (c.needs(1)) r[1] = mul(mul(gg, c.input(0)), silu_grad2(x));
    return r;
  });
  m.def("gelu_backward", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!gg.defined()) return r;
    const Tensor x = c.input(1);
    const bool tanh_approx = approximate_is_tanh(c, 2);
    if (c.needs(0)) {
      r[0] = c.create_graph() ? mul(gg, gelu_grad(x, tanh_approx))
                              : gelu_backward(gg, x, c.arg(2).to_string());
    }
    if (c.needs(1)) r[1] = mul(mul(gg, c.input(0)), gelu_grad2(x, tanh_approx));
    return r;
  });
}

}  // namespace loom
