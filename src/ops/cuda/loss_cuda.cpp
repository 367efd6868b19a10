// CUDA kernels of nll_loss and nll_loss_backward (loops in loss_kernels.cu). Targets are checked on
// the device (Note [Device index checks]) with the CPU kernels' error; cross_entropy is a
// composition (log_softmax + nll_loss) and needs no kernel of its own.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/index_check.h"
#include "ops/cuda/loss_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

bool has(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

// (classes, spatial elements per sample) of an input nll_loss_shape accepted.
std::pair<int64_t, int64_t> nll_dims(const Tensor& input) {
  const int64_t classes = input.size(input.dim() == 1 ? 0 : 1);
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  return {classes, spatial};
}

Tensor checked_targets(const char* op, const char* name, const Tensor& target, int64_t classes,
                       int64_t ignore_index) {
  return cuda_ops::checked_indices(name, target, classes, ignore_index, [&](int64_t c) {
    LOOM_THROW(IndexError, "[", op, "] target ", c, " is out of bounds for ", classes,
               " classes (valid targets are 0..", classes - 1, " or ignore_index=", ignore_index,
               ")");
  });
}

Tensor class_weights(const std::optional<Tensor>& weight) {
  return has(weight) ? weight->to(kFloat64).contiguous() : Tensor();
}

const double* weight_ptr(const Tensor& w) {
  return w.defined() ? static_cast<const double*>(w.data_ptr()) : nullptr;
}

void nll_loss_loop(const Tensor& out, const Tensor& input, const Tensor& target,
                   const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index) {
  constexpr const char* name = "loom::nll_loss";
  const auto [classes, spatial] = nll_dims(input);
  const Tensor t = checked_targets("nll_loss", name, target, classes, ignore_index);
  const Tensor w = class_weights(weight);
  const Tensor x = input.contiguous();
  cuda_ops::check_launch(
      cuda_ops::launch_nll_loss(cuda_ops::code_of(input.dtype()), x.data_ptr(),
                                static_cast<const int64_t*>(t.data_ptr()), weight_ptr(w), t.numel(),
                                classes, spatial, reduction, ignore_index, out.data_ptr(),
                                cuda_ops::stream_of(input)),
      name);
}

void nll_loss_backward_loop(const Tensor& gi, const Tensor& grad_output, const Tensor& input,
                            const Tensor& target, const std::optional<Tensor>& weight,
                            int64_t reduction, int64_t ignore_index) {
  constexpr const char* name = "loom::nll_loss_backward";
  const auto [classes, spatial] = nll_dims(input);
  const Tensor t = checked_targets("nll_loss_backward", name, target, classes, ignore_index);
  const Tensor w = class_weights(weight);
  const Tensor go = grad_output.contiguous();
  cudaStream_t stream = cuda_ops::stream_of(input);
  if (gi.numel() > 0) LOOM_CUDA_CHECK(cudaMemsetAsync(gi.data_ptr(), 0, gi.nbytes(), stream), name);
  const Tensor scale = empty_tensor({1}, kFloat64, input.device());
  cuda_ops::check_launch(
      cuda_ops::launch_nll_loss_backward(
          cuda_ops::code_of(input.dtype()), go.data_ptr(),
          static_cast<const int64_t*>(t.data_ptr()), weight_ptr(w), t.numel(), classes, spatial,
          reduction, ignore_index, gi.data_ptr(), static_cast<double*>(scale.data_ptr()), stream),
      name);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&nll_loss_shape, &nll_loss_loop>::register_cuda(m, "nll_loss");
  CudaStructured<&nll_loss_backward_shape, &nll_loss_backward_loop>::register_cuda(
      m, "nll_loss_backward");
}

}  // namespace loom
