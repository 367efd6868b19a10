// CUDA kernels of softmax, log_softmax, _softmax_backward_data and _log_softmax_backward_data
// (Note [Device softmax] in softmax_kernels.cu). As on the CPU, the input is made contiguous (and
// cast to dtype=) first, and a backward computes in the output's dtype, then casts to input_dtype.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/softmax_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

// [outer, d, inner] around dim of `sizes` (a 0-dim tensor is one row of one element).
std::array<int64_t, 3> split_at(IntArrayRef sizes, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= sizes[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(dim) + 1; i < sizes.size(); ++i) inner *= sizes[i];
  const int64_t d = sizes.empty() ? 1 : sizes[static_cast<size_t>(dim)];
  return {outer, d, inner};
}

template <bool kLog>
void softmax_loop(const Tensor& out, const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const Tensor x = (dtype && *dtype != self.dtype() ? self.to(*dtype) : self).contiguous();
  const auto [outer, n, inner] = split_at(x.sizes(), d);
  cuda_ops::check_launch(
      cuda_ops::launch_softmax(cuda_ops::code_of(x.dtype()), kLog, x.data_ptr(), out.data_ptr(),
                               outer, n, inner, cuda_ops::stream_of(out)),
      kLog ? "loom::log_softmax" : "loom::softmax");
}

template <bool kLog>
void softmax_backward_loop(const Tensor& out, const Tensor& grad_output, const Tensor& output,
                           int64_t dim, DType input_dtype) {
  const char* op = kLog ? "_log_softmax_backward_data" : "_softmax_backward_data";
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, output.dim(), op);
  const DType dt = output.dtype();
  const Tensor result = input_dtype == dt ? out : empty_tensor(output.sizes(), dt, out.device());
  const Tensor g = grad_output.contiguous(), y = output.contiguous();
  const auto [outer, n, inner] = split_at(y.sizes(), d);
  cuda_ops::check_launch(
      cuda_ops::launch_softmax_backward(cuda_ops::code_of(dt), kLog, g.data_ptr(), y.data_ptr(),
                                        result.data_ptr(), outer, n, inner,
                                        cuda_ops::stream_of(out)),
      kLog ? "loom::_log_softmax_backward_data" : "loom::_softmax_backward_data");
  if (result.impl() != out.impl()) out.copy_(result);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&softmax_shape<false>, &softmax_loop<false>>::register_cuda(m, "softmax");
  CudaStructured<&softmax_shape<true>, &softmax_loop<true>>::register_cuda(m, "log_softmax");
  CudaStructured<&softmax_backward_shape<false>, &softmax_backward_loop<false>>::register_cuda(
      m, "_softmax_backward_data");
  CudaStructured<&softmax_backward_shape<true>, &softmax_backward_loop<true>>::register_cuda(
      m, "_log_softmax_backward_data");
}

}  // namespace loom
