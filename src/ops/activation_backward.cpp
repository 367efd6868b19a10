// Backward operators of the activations (threshold/relu, sigmoid, tanh, silu, gelu), one fused pass
// each, used by the derivatives in unary_derivatives.cpp when no graph of the backward is needed:
// schemas, the shape function they share and the Meta kernels (the CPU loops are in
// cpu/activation_backward_kernels.cpp).
#include <string_view>

#include "op_call.h"
#include "structured.h"

namespace loom {
namespace {

// Shape function of every activation backward: grad_output and the saved tensor share a shape and
// one floating dtype, which the result has.
TensorMeta activation_backward_shape(const char* op, TensorMetaRef grad_output, TensorMetaRef x,
                                     const char* x_name) {
  LOOM_CHECK(grad_output.sizes == x.sizes, "[", op, "] expected grad_output of shape ", x.sizes,
             " (the shape of ", x_name, ") but got ", grad_output.sizes);
  LOOM_CHECK_TYPE(is_floating(x.dtype) && grad_output.dtype == x.dtype, "[", op,
                  "] expected grad_output and ", x_name, " of one floating dtype but got ",
                  grad_output.dtype, " and ", x.dtype);
  return TensorMeta(x.sizes, x.dtype);
}
Tensor threshold_backward_meta(const Tensor& grad_output, const Tensor& self, const Scalar&) {
  return meta_output(activation_backward_shape("threshold_backward", grad_output, self, "self"));
}
Tensor sigmoid_backward_meta(const Tensor& grad_output, const Tensor& output) {
  return meta_output(activation_backward_shape("sigmoid_backward", grad_output, output, "output"));
}
Tensor tanh_backward_meta(const Tensor& grad_output, const Tensor& output) {
  return meta_output(activation_backward_shape("tanh_backward", grad_output, output, "output"));
}
Tensor silu_backward_meta(const Tensor& grad_output, const Tensor& self) {
  return meta_output(activation_backward_shape("silu_backward", grad_output, self, "self"));
}
Tensor gelu_backward_meta(const Tensor& grad_output, const Tensor& self,
                          std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu_backward] approximate argument must be either 'none' or 'tanh' but got '",
             approximate, "'");
  return meta_output(activation_backward_shape("gelu_backward", grad_output, self, "self"));
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor");
  m.def("sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor");
  m.def("tanh_backward(Tensor grad_output, Tensor output) -> Tensor");
  m.def("silu_backward(Tensor grad_output, Tensor self) -> Tensor");
  m.def("gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor");
  m.impl("threshold_backward", DispatchKey::Meta, threshold_backward_meta);
  m.impl("sigmoid_backward", DispatchKey::Meta, sigmoid_backward_meta);
  m.impl("tanh_backward", DispatchKey::Meta, tanh_backward_meta);
  m.impl("silu_backward", DispatchKey::Meta, silu_backward_meta);
  m.impl("gelu_backward", DispatchKey::Meta, gelu_backward_meta);
}

using ActivationBackwardSig = Tensor(const Tensor&, const Tensor&);
Tensor threshold_backward(const Tensor& grad_output, const Tensor& self, const Scalar& threshold) {
  LOOM_CALL_OP("loom::threshold_backward", Tensor(const Tensor&, const Tensor&, const Scalar&),
               grad_output, self, threshold);
}
Tensor sigmoid_backward(const Tensor& grad_output, const Tensor& output) {
  LOOM_CALL_OP("loom::sigmoid_backward", ActivationBackwardSig, grad_output, output);
}
Tensor tanh_backward(const Tensor& grad_output, const Tensor& output) {
  LOOM_CALL_OP("loom::tanh_backward", ActivationBackwardSig, grad_output, output);
}
Tensor silu_backward(const Tensor& grad_output, const Tensor& self) {
  LOOM_CALL_OP("loom::silu_backward", ActivationBackwardSig, grad_output, self);
}
Tensor gelu_backward(const Tensor& grad_output, const Tensor& self, std::string_view approximate) {
  LOOM_CALL_OP("loom::gelu_backward", Tensor(const Tensor&, const Tensor&, std::string_view),
               grad_output, self, approximate);
}

}  // namespace loom
