// Derivatives of the operators in nn.cpp (see derivatives.h), kept in their own file only for size.
#include <cmath>
#include "grad_utils.h"
#include "loom/derivatives.h"
#include "op_call.h"

namespace loom {

// ---- derivatives ----
// layer_norm, dropout and cross_entropy are CompositeImplicit: autograd records the operators they
// call (native_layer_norm, native_dropout, log_softmax and nll_loss).

namespace {
using autograd::BackwardContext;
using autograd::GradList;

std::optional<Tensor> optional_of(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

Tensor accumulate(const Tensor& sum_so_far, const Tensor& term) {
  return sum_so_far.defined() ? add(sum_so_far, term) : term;
}

// The gradient of the class weights is not implemented (as in PyTorch): say so rather than return a
// silently missing gradient.
void check_no_weight_grad(const BackwardContext& c, size_t slot, const char* op) {
  if (c.needs(slot)) {
    LOOM_THROW(NotImplementedError, "[", op,
               "] the derivative with respect to weight is not "
               "implemented; detach() the class weights");
  }
}

// native_layer_norm's gradients from output 0 (see Note [Layer norm backward]) and from the mean
// and rstd outputs: d mean / dx = 1 / N and d rstd / dx = -rstd^3 (x - mean) / N over each row of
// N normalized elements. With create_graph everything is written with differentiable operators.
GradList layer_norm_backward(const BackwardContext& c) {
  const Tensor& g = c.grad(0);
  const Tensor x = c.input(0), w = c.input(1), mu = c.output(1), rs = c.output(2);
  const IntArrayRef normalized = c.int_list_arg(1);
  const int64_t rank = x.dim(), axis = rank - static_cast<int64_t>(normalized.size());
  std::vector<int64_t> row_dims, outer_dims;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? outer_dims : row_dims).push_back(d);
  const double n = static_cast<double>(multiply_sizes(normalized));
  GradList r(3);
  if (g.defined() && !c.create_graph()) {
    auto [gi, gw, gb] =
        native_layer_norm_backward(g, x, normalized, mu, rs, optional_of(w), std::nullopt,
                                   {c.needs(0), c.needs(1), c.needs(2)});
    r = {gi, gw, gb};
  } else if (g.defined()) {
    const Tensor xhat = mul(sub(x, mu), rs);
    auto over_rows = [&](const Tensor& t) {  // the affine parameters' gradients: sum over rows
      return outer_dims.empty() ? t : sum(t, IntArrayRef(outer_dims));
    };
    if (c.needs(0)) {
      const Tensor gw = w.defined() ? mul(g, w) : g;
      const Tensor centred = sub(gw, mean(gw, IntArrayRef(row_dims), /*keepdim=*/true));
      const Tensor proj = mul(xhat, mean(mul(gw, xhat), IntArrayRef(row_dims), /*keepdim=*/true));
      r[0] = mul(rs, sub(centred, proj));
    }
    if (c.needs(1)) r[1] = over_rows(mul(g, xhat));
    if (c.needs(2)) r[2] = over_rows(g);
  }
  if (c.needs(0) && c.grad(1).defined()) r[0] = accumulate(r[0], div(c.grad(1), n));
  if (c.needs(0) && c.grad(2).defined()) {
    const Tensor d_rstd = div(mul(mul(rs, rs), mul(sub(x, mu), rs)), -n);
    r[0] = accumulate(r[0], mul(c.grad(2), d_rstd));
  }
  if (r[0].defined() && r[0].sizes() != x.sizes()) r[0] = expand(r[0], x.sizes());
  return r;
}

// Note [Layer norm double backward]
// native_layer_norm_backward as a function of all its inputs (mean and rstd taken as independent):
// with a = grad_out * weight, xhat = (x - mean) rstd, means and sums over each row, and A, Wg, Bg
// the gradients of grad_input, grad_weight and grad_bias,
//   d a    = rstd (A - mean(A) - xhat mean(A xhat))       (grad_input's own form, for A)
//   d xhat = Wg grad_out - rstd (mean(a xhat) A + a mean(A xhat))
// and then  grad_out: d a * weight + Wg xhat + Bg,  weight: sum over rows of d a * grad_out,
//   input: d xhat rstd,  mean: -sum(d xhat) rstd,
//   rstd: sum(A (a - mean(a) - xhat mean(a xhat))) + sum(d xhat (x - mean)).
GradList layer_norm_double_backward(const BackwardContext& c) {
  const Tensor &ga = c.grad(0), &gw_out = c.grad(1), &gb_out = c.grad(2);
  const Tensor g = c.input(0), x = c.input(1), w = c.input(4);
  const IntArrayRef normalized = c.int_list_arg(2);
  const int64_t rank = x.dim(), axis = rank - static_cast<int64_t>(normalized.size());
  std::vector<int64_t> row_dims, outer_dims, stat_shape;
  for (int64_t d = 0; d < rank; ++d) {
    (d < axis ? outer_dims : row_dims).push_back(d);
    stat_shape.push_back(d < axis ? x.size(d) : 1);
  }
  const Tensor mu = c.input(2).reshape(stat_shape), rs = c.input(3).reshape(stat_shape);
  auto row_mean = [&](const Tensor& t) { return mean(t, IntArrayRef(row_dims), /*keepdim=*/true); };
  auto row_sum = [&](const Tensor& t) { return sum(t, IntArrayRef(row_dims), /*keepdim=*/true); };
  const Tensor xhat = mul(sub(x, mu), rs);
  const Tensor a = w.defined() ? mul(g, w) : g;
  Tensor da, dxhat;
  if (ga.defined()) {
    const Tensor mean_ga_xhat = row_mean(mul(ga, xhat));
    da = mul(rs, sub(sub(ga, row_mean(ga)), mul(xhat, mean_ga_xhat)));
    if (c.needs(1) || c.needs(2) || c.needs(3)) {
      dxhat = neg(mul(rs, add(mul(row_mean(mul(a, xhat)), ga), mul(a, mean_ga_xhat))));
    }
  }
  if (gw_out.defined() && (c.needs(1) || c.needs(2) || c.needs(3))) {
    dxhat = accumulate(dxhat, mul(gw_out, g));
  }
  GradList r(6);
  if (c.needs(0)) {
    if (da.defined()) r[0] = w.defined() ? mul(da, w) : da;
    if (gw_out.defined()) r[0] = accumulate(r[0], mul(gw_out, xhat));
    if (gb_out.defined()) r[0] = accumulate(r[0], gb_out);
    if (r[0].defined() && r[0].sizes() != g.sizes()) r[0] = expand(r[0], g.sizes());
  }
  if (dxhat.defined()) {
    if (c.needs(1)) r[1] = mul(dxhat, rs);
    if (c.needs(2)) r[2] = neg(mul(row_sum(dxhat), rs)).reshape(c.input_sizes(2));
  }
  if (c.needs(3)) {
    if (ga.defined()) {
      const Tensor centred = sub(sub(a, row_mean(a)), mul(xhat, row_mean(mul(a, xhat))));
      r[3] = row_sum(mul(ga, centred));
    }
    if (dxhat.defined()) r[3] = accumulate(r[3], row_sum(mul(dxhat, sub(x, mu))));
    if (r[3].defined()) r[3] = r[3].reshape(c.input_sizes(3));
  }
  if (c.needs(4) && da.defined()) {
    const Tensor t = mul(da, g);
    r[4] = outer_dims.empty() ? t : sum(t, IntArrayRef(outer_dims));
  }
  return r;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("native_layer_norm", autograd::saves({0, 1}, {1, 2}), layer_norm_backward);
  m.def("native_layer_norm_backward", autograd::saves({0, 1, 2, 3, 4}), layer_norm_double_backward);
  // The output is input * mask * scale; the mask (output 1) says which elements were kept.
  m.def("native_dropout", autograd::saves({}, {1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    if (!c.needs(0) || !g.defined()) return {Tensor()};
    const double p = c.double_arg(1);
    if (!c.bool_arg(2) || p == 0.0) return {g};  // the identity
    return {native_dropout_backward(g, c.output(1), p == 1.0 ? 0.0 : 1.0 / (1.0 - p))};
  });
  // Linear in grad_output: its gradient is the same map applied to the incoming gradient.
  m.def("native_dropout_backward", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (c.needs(0) && c.grad(0).defined()) {
      r[0] = native_dropout_backward(c.grad(0), c.input(1), c.double_arg(2));
    }
    return r;
  });
  // nll_loss is linear in self, and nll_loss_backward is its adjoint: each is the other's
  // derivative, so the pair is differentiable to any order. self is needed only for its shape.
  m.def("nll_loss", autograd::saves({1, 2}), [](const BackwardContext& c) -> GradList {
    check_no_weight_grad(c, 2, "nll_loss");
    const Tensor& g = c.grad(0);
    GradList r(3);
    if (!c.needs(0) || !g.defined()) return r;
    const Tensor self = grad_utils::shape_only(c.input_sizes(0), c.input_dtype(0), g.device());
    r[0] = nll_loss_backward(g, self, c.input(1), optional_of(c.input(2)),
                             static_cast<Reduction>(c.int_arg(3)), c.int_arg(4));
    return r;
  });
  m.def("nll_loss_backward", autograd::saves({2, 3}), [](const BackwardContext& c) -> GradList {
    check_no_weight_grad(c, 3, "nll_loss_backward");
    const Tensor& gg = c.grad(0);
    GradList r(4);
    if (!c.needs(0) || !gg.defined()) return r;
    r[0] = nll_loss(gg, c.input(2), optional_of(c.input(3)), static_cast<Reduction>(c.int_arg(4)),
                    c.int_arg(5));
    if (r[0].sizes() != c.input_sizes(0)) r[0] = r[0].reshape(c.input_sizes(0));  // [] vs [1]
    return r;
  });
}

}  // namespace loom
