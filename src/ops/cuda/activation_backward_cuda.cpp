// CUDA kernels of the activation backwards (threshold, sigmoid, tanh, silu, gelu): the CPU
// kernels' checks and messages (cpu/activation_backward_kernels.cpp), then one device loop over the
// TensorIterator of (grad_output, x).
#include <string_view>

#include "ops/cuda/activation_backward_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_call.h"

namespace loom {
namespace {

using cuda_ops::ActivationBackwardOp;

// grad_input = op(grad_output, x) elementwise; x_name is the schema's name of x.
Tensor activation_backward(ActivationBackwardOp op, const char* name, const Tensor& grad_output,
                           const Tensor& x, const char* x_name, double threshold = 0) {
  check_defined(grad_output, name, "grad_output");
  check_defined(x, name, x_name);
  LOOM_CHECK(grad_output.sizes() == x.sizes(), "[", name, "] expected grad_output of shape ",
             x.sizes(), " (the shape of ", x_name, ") but got ", grad_output.sizes());
  const DType dt = x.dtype();
  LOOM_CHECK_TYPE(is_floating(dt) && grad_output.dtype() == dt, "[", name,
                  "] expected grad_output and ", x_name, " of one floating dtype but got ",
                  grad_output.dtype(), " and ", dt);
  TensorIteratorConfig cfg;
  cfg.op = name;
  cfg.outputs = {Tensor()};
  cfg.inputs = {grad_output, x};
  TensorIterator it(std::move(cfg));
  cuda_ops::launch_iter(it, name, [&](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_activation_backward(op, a, threshold, s);
  });
  it.finish();
  return it.output(0);
}

Tensor threshold_backward_kernel(const Tensor& grad_output, const Tensor& self,
                                 const Scalar& threshold) {
  return activation_backward(ActivationBackwardOp::Threshold, "threshold_backward", grad_output,
                             self, "self", threshold.to_double());
}
Tensor sigmoid_backward_kernel(const Tensor& grad_output, const Tensor& output) {
  return activation_backward(ActivationBackwardOp::Sigmoid, "sigmoid_backward", grad_output, output,
                             "output");
}
Tensor tanh_backward_kernel(const Tensor& grad_output, const Tensor& output) {
  return activation_backward(ActivationBackwardOp::Tanh, "tanh_backward", grad_output, output,
                             "output");
}
Tensor silu_backward_kernel(const Tensor& grad_output, const Tensor& self) {
  return activation_backward(ActivationBackwardOp::Silu, "silu_backward", grad_output, self,
                             "self");
}
Tensor gelu_backward_kernel(const Tensor& grad_output, const Tensor& self,
                            std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu_backward] approximate argument must be either 'none' or 'tanh' but got '",
             approximate, "'");
  return activation_backward(
      approximate == "tanh" ? ActivationBackwardOp::GeluTanh : ActivationBackwardOp::GeluErf,
      "gelu_backward", grad_output, self, "self");
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("threshold_backward", threshold_backward_kernel);
  m.impl("sigmoid_backward", sigmoid_backward_kernel);
  m.impl("tanh_backward", tanh_backward_kernel);
  m.impl("silu_backward", silu_backward_kernel);
  m.impl("gelu_backward", gelu_backward_kernel);
}

}  // namespace loom
