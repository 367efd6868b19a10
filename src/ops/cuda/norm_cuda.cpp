// CUDA kernels of native_layer_norm and native_layer_norm_backward (Note [Device layer norm] in
// norm_kernels.cu); outputs, dtypes and the affine parameters' handling are the CPU kernels'
// (cpu/nn_kernels.cpp): weight and bias are cast to the compute type, mean and rstd keep the
// normalized dims as size 1, and grad_weight / grad_bias come in the parameters' dtypes.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/norm_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

bool has(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

// float for the 16-bit floats, the dtype itself otherwise.
DType compute_dtype(DType dt) {
  return dt == kFloat16 || dt == kBFloat16 ? kFloat32 : dt;
}

Tensor as_compute(const std::optional<Tensor>& t, DType dt) {
  return has(t) ? t->to(compute_dtype(dt)).contiguous() : Tensor();
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

void native_layer_norm_loop(const std::array<Tensor, 3>& outs, const Tensor& input,
                            IntArrayRef normalized_shape, const std::optional<Tensor>& weight,
                            const std::optional<Tensor>& bias, double eps) {
  const Tensor &out = outs[0], &mean = outs[1], &rstd = outs[2];
  const int64_t cols = multiply_sizes(normalized_shape);
  const int64_t rows = mean.numel();
  if (rows == 0) return;
  const DType dt = input.dtype();
  const Tensor x = input.contiguous();
  const Tensor w = as_compute(weight, dt), b = as_compute(bias, dt);
  cuda_ops::check_launch(
      cuda_ops::launch_layer_norm(cuda_ops::code_of(dt), x.data_ptr(), ptr_or_null(w),
                                  ptr_or_null(b), out.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                                  rows, cols, eps, cuda_ops::stream_of(input)),
      "loom::native_layer_norm");
}

void native_layer_norm_backward_loop(const std::array<Tensor, 3>& grads, const Tensor& grad_out,
                                     const Tensor& input, IntArrayRef normalized_shape,
                                     const Tensor& mean, const Tensor& rstd,
                                     const std::optional<Tensor>& weight,
                                     const std::optional<Tensor>&, bool, bool, bool) {
  constexpr const char* name = "loom::native_layer_norm_backward";
  const Tensor &gi = grads[0], &gw = grads[1], &gb = grads[2];
  const int64_t cols = multiply_sizes(normalized_shape);
  const int64_t rows = mean.numel();
  const DType dt = input.dtype();
  const cuda_ops::ScalarCode code = cuda_ops::code_of(dt);
  cudaStream_t stream = cuda_ops::stream_of(input);
  const Tensor x = input.contiguous(), g = grad_out.contiguous();
  const Tensor mu = mean.contiguous(), rs = rstd.contiguous();
  if (gi.defined() && gi.numel() > 0) {
    const Tensor w = as_compute(weight, dt);
    cuda_ops::check_launch(cuda_ops::launch_layer_norm_backward_input(
                               code, g.data_ptr(), x.data_ptr(), mu.data_ptr(), rs.data_ptr(),
                               ptr_or_null(w), gi.data_ptr(), rows, cols, stream),
                           name);
  }
  if (!gw.defined() && !gb.defined()) return;
  // The column sums in the accumulation type (float, double for float64), cast into the results.
  const DType acc = dt == kFloat64 ? kFloat64 : kFloat32;
  const Tensor sw = gw.defined()
                        ? (gw.dtype() == acc ? gw : empty_tensor(gw.sizes(), acc, gw.device()))
                        : Tensor();
  const Tensor sb = gb.defined()
                        ? (gb.dtype() == acc ? gb : empty_tensor(gb.sizes(), acc, gb.device()))
                        : Tensor();
  const size_t bytes = cuda_ops::layer_norm_backward_workspace_bytes(code, rows, cols);
  const Tensor workspace = empty_tensor({static_cast<int64_t>(bytes)}, kUInt8, input.device());
  cuda_ops::check_launch(
      cuda_ops::launch_layer_norm_backward_params(
          code, g.data_ptr(), x.data_ptr(), mu.data_ptr(), rs.data_ptr(),
          sw.defined() ? sw.data_ptr() : nullptr, sb.defined() ? sb.data_ptr() : nullptr, rows,
          cols, workspace.data_ptr(), stream),
      name);
  if (sw.defined() && sw.impl() != gw.impl()) gw.copy_(sw);
  if (sb.defined() && sb.impl() != gb.impl()) gb.copy_(sb);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&native_layer_norm_shape, &native_layer_norm_loop>::register_cuda(
      m, "native_layer_norm");
  CudaStructured<&native_layer_norm_backward_shape,
                 &native_layer_norm_backward_loop>::register_cuda(m, "native_layer_norm_backward");
}

}  // namespace loom
