// Fused bias + GELU (loom::_bias_gelu, its backward, and loom::_linear_gelu): schemas, shape
// functions, public functions and derivatives. CPU loops in cpu/fused_gelu_kernels.cpp, CUDA ones
// in cuda/fused_gelu_kernels.cu.
//
// Note [Fused bias GELU]
//   A GPT MLP computes gelu(x W^T + b). Unfused that is a product, a bias add and a GELU: the
//   (N, 4C) activation is written by the product, read and written by the bias add (or by the
//   GEMM's bias epilogue), read and written by the GELU, and both tensors are kept for backward.
//   _linear_gelu runs the product without bias and then _bias_gelu, which reads the product once,
//   adds the bias in float and applies GELU in the same pass; autograd keeps only the product
//   (the pre-activation minus bias) and the bias. Its backward is one more pass producing the
//   gradient of the pre-activation, g * gelu'(x + b); the bias gradient is that summed over rows
//   and the product's gradients are the usual two matrix products. Both approximations are exact
//   to their own formula: "tanh" uses the tanh formula and "none" the erf one; neither falls back
//   to the other. Why not cuBLASLt's GELU_AUX_BIAS epilogue on CUDA: it folds the same pointwise
//   pass into the product's store, saving one read and one write of the activation (on an
//   H100/H200 at GPT-2 sizes, a few percent of the MLP's time, since the product dominates), but
//   only for the tanh formula, only with alignment and leading-dimension rules on the auxiliary
//   output that views do not always meet, and its backward (DGELU_BGRAD) needs the auxiliary
//   buffer in cuBLASLt's layout; the pointwise kernel takes every case with one code path and
//   exact-erf GELU too. It is the next step where the MLP is measured to be bandwidth-bound.
#include "loom/derivatives.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"

namespace loom {

bool gelu_is_tanh(const char* op, std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", "[", op,
             "] approximate argument must be either 'none' or 'tanh' but got '", approximate, "'");
  return approximate == "tanh";
}

namespace {

void check_bias_gelu(const char* op, TensorMetaRef input, TensorMetaRef bias,
                     std::string_view approximate) {
  gelu_is_tanh(op, approximate);
  LOOM_CHECK_TYPE(is_floating(input.dtype), "[", op, "] expected floating input but got ",
                  input.dtype);
  LOOM_CHECK(input.dim() >= 1, "[", op,
             "] expected input of shape (..., M) but got a 0-dim tensor");
  LOOM_CHECK(bias.dim() == 1 && bias.size(0) == input.size(-1), "[", op,
             "] expected bias of shape [", input.size(-1), "] (input's last dim) but got ",
             bias.sizes);
  LOOM_CHECK_TYPE(bias.dtype == input.dtype, "[", op, "] expected bias of dtype ", input.dtype,
                  " (like input) but got ", bias.dtype);
  LOOM_CHECK(bias.device == input.device, "[", op, "] expected bias on ", input.device,
             " (like input) but it is on ", bias.device);
}

}  // namespace

TensorMeta bias_gelu_shape(TensorMetaRef input, TensorMetaRef bias, std::string_view approximate) {
  check_bias_gelu("_bias_gelu", input, bias, approximate);
  return TensorMeta(input.sizes, input.dtype);
}

TensorMeta bias_gelu_backward_shape(TensorMetaRef grad, TensorMetaRef input, TensorMetaRef bias,
                                    std::string_view approximate) {
  constexpr const char* op = "_bias_gelu_backward";
  check_bias_gelu(op, input, bias, approximate);
  LOOM_CHECK(grad.sizes == input.sizes && grad.dtype == input.dtype, "[", op,
             "] expected grad of shape ", input.sizes, " and dtype ", input.dtype, " but got ",
             grad.sizes, " ", grad.dtype);
  LOOM_CHECK(grad.device == input.device, "[", op, "] expected grad on ", input.device,
             " (like input) but it is on ", grad.device);
  return TensorMeta(input.sizes, input.dtype);
}

namespace {

Tensor linear_gelu_kernel(const Tensor& input, const Tensor& weight,
                          const std::optional<Tensor>& bias, std::string_view approximate) {
  gelu_is_tanh("_linear_gelu", approximate);
  if (!bias.has_value() || !bias->defined()) return gelu(linear(input, weight), approximate);
  return _bias_gelu(linear(input, weight), *bias, approximate);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("_bias_gelu(Tensor input, Tensor bias, str approximate='tanh') -> Tensor");
  m.def(
      "_bias_gelu_backward(Tensor grad, Tensor input, Tensor bias, str approximate='tanh') -> "
      "Tensor");
  m.def(
      "_linear_gelu(Tensor input, Tensor weight, Tensor? bias=None, str approximate='tanh') -> "
      "Tensor");
  MetaKernel<&bias_gelu_shape>::register_meta(m, "_bias_gelu");
  MetaKernel<&bias_gelu_backward_shape>::register_meta(m, "_bias_gelu_backward");
  m.impl("_linear_gelu", DispatchKey::CompositeImplicit, linear_gelu_kernel);
}

Tensor _bias_gelu(const Tensor& input, const Tensor& bias, std::string_view approximate) {
  LOOM_CALL_OP("loom::_bias_gelu", Tensor(const Tensor&, const Tensor&, std::string_view), input,
               bias, approximate);
}
Tensor _bias_gelu_backward(const Tensor& grad, const Tensor& input, const Tensor& bias,
                           std::string_view approximate) {
  LOOM_CALL_OP("loom::_bias_gelu_backward",
               Tensor(const Tensor&, const Tensor&, const Tensor&, std::string_view), grad, input,
               bias, approximate);
}
Tensor _linear_gelu(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                    std::string_view approximate) {
  LOOM_CALL_OP("loom::_linear_gelu",
               Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, std::string_view),
               input, weight, bias, approximate);
}

// ---- derivatives ----
namespace {
using autograd::BackwardContext;
using autograd::GradList;

// Over every dim but the last: the bias's share of a gradient of input's shape.
Tensor sum_rows(const Tensor& g) {
  if (g.dim() == 1) return g;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d + 1 < g.dim(); ++d) dims.push_back(d);
  return sum(g, IntArrayRef(dims));
}

GradList bias_gelu_derivative(const BackwardContext& c) {
  const Tensor& g = c.grad(0);
  GradList r(2);
  if (!g.defined() || (!c.needs(0) && !c.needs(1))) return r;
  const Tensor x = c.input(0), b = c.input(1);
  const std::string approximate = c.arg(2).to_string();
  // With create_graph, the composition (gelu_backward has its own derivative).
  const Tensor gp = c.create_graph() ? gelu_backward(g, add(x, b), approximate)
                                     : _bias_gelu_backward(g, x, b, approximate);
  if (c.needs(0)) r[0] = gp;
  if (c.needs(1)) r[1] = sum_rows(gp);
  return r;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("_bias_gelu", autograd::saves({0, 1}), bias_gelu_derivative);
  // Reached from the derivative above only without create_graph (which writes gelu_backward of
  // the sum instead, differentiable), so its own outputs never need a gradient.
  m.nondifferentiable("_bias_gelu_backward");
}

}  // namespace loom
