// CUDA kernels of the fused cross-entropy (loops in fused_loss_kernels.cu, Note [Device fused
// cross-entropy]). Targets are checked on the device first (Note [Device index checks]); a bad one
// raises the CPU kernel's IndexError, naming its row.
#include <limits>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/fused_loss_kernels.h"
#include "ops/cuda/index_check.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"

namespace loom {
namespace {

Tensor checked_targets(const char* op, const char* name, const Tensor& target, int64_t classes,
                       int64_t ignore) {
  return cuda_ops::checked_indices(name, target, classes, ignore, [&](int64_t bad) {
    // Only on failure: the row of the first bad value, found on the host.
    const Tensor host = target.to(kCPU).contiguous();
    const int64_t* t = host.data_ptr<int64_t>();
    int64_t row = 0;
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (t[i] != ignore && (t[i] < 0 || t[i] >= classes)) {
        row = i;
        bad = t[i];
        break;
      }
    }
    LOOM_THROW(IndexError, "[", op, "] target ", bad, " of row ", row, " is out of bounds for ",
               classes, " classes (valid targets are 0..", classes - 1, " or ignore_index=", ignore,
               ")");
  });
}

// The CUDA kernels keep lse in float32; float64 logits take cross_entropy's composition.
void refuse_float64(const char* name, const Tensor& logits) {
  LOOM_CHECK_AS(NotImplementedError, logits.dtype() != kFloat64, "[", name,
                "] float64 logits have no CUDA kernel (it keeps the log-sum-exp in float32); "
                "cross_entropy runs the composition for them");
}

void fused_cross_entropy_loop(const std::array<Tensor, 2>& outs, const Tensor& logits,
                              const Tensor& target, int64_t ignore_index, double smoothing) {
  constexpr const char* name = "loom::_fused_cross_entropy";
  refuse_float64(name, logits);
  const int64_t n = logits.size(0), v = logits.size(1);
  cudaStream_t stream = cuda_ops::stream_of(logits);
  if (n == 0) {  // the mean of no rows: NaN, as PyTorch
    outs[0].fill_(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Tensor t = checked_targets("_fused_cross_entropy", name, target, v, ignore_index);
  const Tensor x = logits.contiguous();
  if (v == 0) {
    // No classes: every row must be ignored (checked above), so the loss is 0/0.
    outs[0].fill_(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Tensor row_loss = empty_tensor({n}, kFloat64, logits.device());
  cuda_ops::check_launch(
      cuda_ops::launch_fused_cross_entropy(
          cuda_ops::code_of(x.dtype()), x.data_ptr(), static_cast<const int64_t*>(t.data_ptr()), n,
          v, ignore_index, smoothing, static_cast<float*>(outs[1].data_ptr()),
          static_cast<double*>(row_loss.data_ptr()), outs[0].data_ptr(), stream),
      name);
}

void fused_cross_entropy_backward_loop(const Tensor& gi, const Tensor& grad, const Tensor& logits,
                                       const Tensor& target, const Tensor& lse,
                                       int64_t ignore_index, double smoothing) {
  constexpr const char* name = "loom::_fused_cross_entropy_backward";
  refuse_float64(name, logits);
  const int64_t n = logits.size(0), v = logits.size(1);
  if (gi.numel() == 0) return;
  const Tensor t = checked_targets("_fused_cross_entropy_backward", name, target, v, ignore_index);
  const Tensor x = logits.contiguous(), l = lse.contiguous();
  const Tensor g = grad.to(logits.dtype()).contiguous();
  const Tensor count = empty_tensor({1}, kInt64, logits.device());
  cuda_ops::check_launch(
      cuda_ops::launch_fused_cross_entropy_backward(
          cuda_ops::code_of(x.dtype()), g.data_ptr(), x.data_ptr(),
          static_cast<const int64_t*>(t.data_ptr()), static_cast<const float*>(l.data_ptr()), n, v,
          ignore_index, smoothing, static_cast<int64_t*>(count.data_ptr()), gi.data_ptr(),
          cuda_ops::stream_of(logits)),
      name);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&fused_cross_entropy_shape, &fused_cross_entropy_loop>::register_cuda(
      m, "_fused_cross_entropy");
  CudaStructured<&fused_cross_entropy_backward_shape, &fused_cross_entropy_backward_loop>::
      register_cuda(m, "_fused_cross_entropy_backward");
}

}  // namespace loom
