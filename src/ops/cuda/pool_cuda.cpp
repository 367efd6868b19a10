// CUDA kernels of 2-D max and average pooling and their gradients (loops in pool_kernels.cu, Note
// [CUDA pooling loops]); geometry, shapes and errors come from pool2d_geometry and the shape
// functions in pool.cpp, as on the CPU.
#include <tuple>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pool_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::check_launch;
using cuda_ops::code_of;
using cuda_ops::stream_of;

cuda_ops::PoolParams params_of(const PoolGeometry& g) {
  cuda_ops::PoolParams p;
  p.planes = g.N * g.C;
  p.H = g.H, p.W = g.W, p.Ho = g.Ho, p.Wo = g.Wo;
  p.kh = g.kh, p.kw = g.kw, p.sh = g.sh, p.sw = g.sw, p.ph = g.ph, p.pw = g.pw, p.dh = g.dh,
  p.dw = g.dw;
  return p;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices_cuda(const Tensor& self, IntArrayRef kernel_size,
                                                        IntArrayRef stride, IntArrayRef padding,
                                                        IntArrayRef dilation, bool ceil_mode) {
  const std::array<TensorMeta, 2> ms =
      max_pool2d_with_indices_shape(self, kernel_size, stride, padding, dilation, ceil_mode);
  const PoolGeometry g =
      pool2d_geometry("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  Tensor out = allocate_output(ms[0], self.device()), ind = allocate_output(ms[1], self.device());
  if (out.numel() == 0) return {out, ind};
  cuda_ops::KernelGuard guard(self);
  const Tensor x = self.contiguous();
  check_launch(cuda_ops::launch_max_pool(x.data_ptr(), out.data_ptr(), ind.data_ptr<int64_t>(),
                                         params_of(g), code_of(self.dtype()), stream_of(self)),
               "loom::max_pool2d_with_indices");
  return {out, ind};
}

Tensor max_pool2d_with_indices_backward_cuda(const Tensor& grad_output, const Tensor& self,
                                             IntArrayRef kernel_size, IntArrayRef stride,
                                             IntArrayRef padding, IntArrayRef dilation,
                                             bool ceil_mode, const Tensor& indices) {
  constexpr const char* op = "max_pool2d_with_indices_backward";
  const TensorMeta m = max_pool2d_with_indices_backward_shape(
      grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices);
  LOOM_CHECK(indices.device() == self.device(), "[", op, "] expected indices on ", self.device(),
             " (like self) but they are on ", indices.device());
  const PoolGeometry g =
      pool2d_geometry(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  Tensor gi = allocate_output(m, self.device());
  if (gi.numel() == 0) return gi;
  cuda_ops::KernelGuard guard(self);
  const Tensor go = grad_output.contiguous(), ind = indices.contiguous();
  check_launch(
      cuda_ops::launch_max_pool_backward(go.data_ptr(), ind.data_ptr<int64_t>(), gi.data_ptr(),
                                         params_of(g), code_of(self.dtype()), stream_of(self)),
      "loom::max_pool2d_with_indices_backward");
  return gi;
}

Tensor avg_pool2d_cuda(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                       IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                       std::optional<int64_t> divisor_override) {
  const TensorMeta m = avg_pool2d_shape(self, kernel_size, stride, padding, ceil_mode,
                                        count_include_pad, divisor_override);
  const int64_t one = 1;
  const PoolGeometry g =
      pool2d_geometry("avg_pool2d", self, kernel_size, stride, padding, one, ceil_mode);
  Tensor out = allocate_output(m, self.device());
  if (out.numel() == 0) return out;
  cuda_ops::KernelGuard guard(self);
  const Tensor x = self.contiguous();
  check_launch(cuda_ops::launch_avg_pool(x.data_ptr(), out.data_ptr(), params_of(g),
                                         count_include_pad, divisor_override.value_or(0),
                                         code_of(self.dtype()), stream_of(self)),
               "loom::avg_pool2d");
  return out;
}

Tensor avg_pool2d_backward_cuda(const Tensor& grad_output, const Tensor& self,
                                IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                                bool ceil_mode, bool count_include_pad,
                                std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool2d_backward";
  const TensorMeta m = avg_pool2d_backward_shape(grad_output, self, kernel_size, stride, padding,
                                                 ceil_mode, count_include_pad, divisor_override);
  const int64_t one = 1;
  const PoolGeometry g = pool2d_geometry(op, self, kernel_size, stride, padding, one, ceil_mode);
  Tensor gi = allocate_output(m, self.device());
  if (gi.numel() == 0) return gi;
  cuda_ops::KernelGuard guard(self);
  const Tensor go = grad_output.contiguous();
  check_launch(cuda_ops::launch_avg_pool_backward(go.data_ptr(), gi.data_ptr(), params_of(g),
                                                  count_include_pad, divisor_override.value_or(0),
                                                  code_of(self.dtype()), stream_of(self)),
               "loom::avg_pool2d_backward");
  return gi;
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("max_pool2d_with_indices", max_pool2d_with_indices_cuda);
  m.impl("max_pool2d_with_indices_backward", max_pool2d_with_indices_backward_cuda);
  m.impl("avg_pool2d", avg_pool2d_cuda);
  m.impl("avg_pool2d_backward", avg_pool2d_backward_cuda);
}

}  // namespace loom
