// CUDA kernels of the fused bias + GELU (loops in fused_gelu_kernels.cu; Note [Fused bias GELU] in
// fused_gelu.cpp).
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/fused_gelu_kernels.h"
#include "ops/fused_shapes.h"

namespace loom {
namespace {

void bias_gelu_loop(const Tensor& out, const Tensor& input, const Tensor& bias,
                    std::string_view approximate) {
  const bool tanh_form = gelu_is_tanh("_bias_gelu", approximate);
  if (out.numel() == 0) return;
  const Tensor x = input.contiguous(), b = bias.contiguous();
  cuda_ops::check_launch(cuda_ops::launch_bias_gelu(cuda_ops::code_of(x.dtype()), x.data_ptr(),
                                                    b.data_ptr(), x.numel(), x.size(-1), tanh_form,
                                                    out.data_ptr(), cuda_ops::stream_of(x)),
                         "loom::_bias_gelu");
}

void bias_gelu_backward_loop(const Tensor& out, const Tensor& grad, const Tensor& input,
                             const Tensor& bias, std::string_view approximate) {
  const bool tanh_form = gelu_is_tanh("_bias_gelu_backward", approximate);
  if (out.numel() == 0) return;
  const Tensor g = grad.contiguous(), x = input.contiguous(), b = bias.contiguous();
  cuda_ops::check_launch(
      cuda_ops::launch_bias_gelu_backward(cuda_ops::code_of(x.dtype()), g.data_ptr(), x.data_ptr(),
                                          b.data_ptr(), x.numel(), x.size(-1), tanh_form,
                                          out.data_ptr(), cuda_ops::stream_of(x)),
      "loom::_bias_gelu_backward");
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&bias_gelu_shape, &bias_gelu_loop>::register_cuda(m, "_bias_gelu");
  CudaStructured<&bias_gelu_backward_shape, &bias_gelu_backward_loop>::register_cuda(
      m, "_bias_gelu_backward");
}

}  // namespace loom
