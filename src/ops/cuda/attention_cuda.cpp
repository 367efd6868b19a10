// CUDA kernels of _flash_attention and _flash_attention_backward (Note [Flash attention on tensor
// cores] in attention_kernels.cu). They take bfloat16 and float16 with head_dim 32, 64 or 128;
// scaled_dot_product_attention sends anything else to the composed path (and says so), and a
// direct call with other inputs is a NotImplementedError.
#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

cuda_ops::AttentionArgs args_of(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                double scale) {
  cuda_ops::AttentionArgs a;
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = q.stride(i);
    a.k_stride[i] = k.stride(i);
    a.v_stride[i] = v.stride(i);
  }
  a.b = q.size(0);
  a.h = q.size(1);
  a.tq = q.size(2);
  a.tk = k.size(2);
  a.d = q.size(3);
  a.causal = causal;
  a.scale = static_cast<float>(scale);
  return a;
}

bool last_dim_dense(const Tensor& t) {
  return t.stride(3) == 1 || t.size(3) == 1;
}

// The kernels' arguments for q, k, v, copying an input to contiguous memory when its layout does
// not suit them (a last dim that is not dense, strides that are not multiples of 8 elements).
cuda_ops::AttentionArgs prepare(const char* op, Tensor& q, Tensor& k, Tensor& v, bool causal,
                                double scale) {
  const cuda_ops::ScalarCode code = cuda_ops::code_of(q.dtype());
  LOOM_CHECK_AS(NotImplementedError,
                (q.dtype() == kBFloat16 || q.dtype() == kFloat16) &&
                    (q.size(3) == 32 || q.size(3) == 64 || q.size(3) == 128),
                "[", op, "] the CUDA kernel takes bfloat16 or float16 with head_dim 32, 64 or 128 ",
                "but got ", q.dtype(), " with head_dim ", q.size(3),
                "; scaled_dot_product_attention runs the composed path for these");
  for (Tensor* t : {&q, &k, &v})
    if (!last_dim_dense(*t)) *t = t->contiguous();
  cuda_ops::AttentionArgs a = args_of(q, k, v, causal, scale);
  if (!cuda_ops::flash_attention_supported(code, a)) {
    q = q.contiguous();
    k = k.contiguous();
    v = v.contiguous();
    a = args_of(q, k, v, causal, scale);
  }
  LOOM_CHECK_AS(NotImplementedError, cuda_ops::flash_attention_supported(code, a), "[", op,
                "] batch x heads = ", a.b * a.h, " is more than the kernel's grid takes (65535)");
  return a;
}

void set_strides(int64_t (&dst)[3], const Tensor& t) {
  for (int i = 0; i < 3; ++i) dst[i] = t.stride(i);
}

// Whether the kernels can read or write t in place: a dense last dim, 16-byte aligned, strides
// multiples of 8 elements (else the caller copies it to contiguous memory).
bool kernel_layout(const Tensor& t) {
  if (!last_dim_dense(t) || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int i = 0; i < 3; ++i)
    if (t.stride(i) % 8 != 0) return false;
  return true;
}

void flash_attention_loop(const std::array<Tensor, 2>& outs, const Tensor& query, const Tensor& key,
                          const Tensor& value, bool is_causal, double scale) {
  constexpr const char* name = "loom::_flash_attention";
  Tensor q = query, k = key, v = value;
  cuda_ops::AttentionArgs a = prepare(name, q, k, v, is_causal, scale);
  // The output's layout (Note [Attention layouts] in attention.cpp): written in place when the
  // kernel can, else through a contiguous buffer.
  const bool direct = kernel_layout(outs[0]);
  const Tensor o = direct ? outs[0] : empty_tensor(outs[0].sizes(), outs[0].dtype(), q.device());
  set_strides(a.o_stride, o);
  cuda_ops::check_launch(
      cuda_ops::launch_flash_attention(cuda_ops::code_of(q.dtype()), a, o.data_ptr(),
                                       outs[1].data_ptr<float>(), cuda_ops::stream_of(q)),
      name);
  if (!direct) outs[0].copy_(o);
}

void flash_attention_backward_loop(const std::array<Tensor, 3>& grads, const Tensor& grad_out,
                                   const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& out, const Tensor& lse, bool is_causal,
                                   double scale) {
  constexpr const char* name = "loom::_flash_attention_backward";
  Tensor q = query, k = key, v = value;
  cuda_ops::AttentionArgs a = prepare(name, q, k, v, is_causal, scale);
  // grad_out and out are read at their strides, the gradients written at theirs (Note [Attention
  // layouts]); what the kernels cannot take in place goes through contiguous memory.
  const Tensor go = kernel_layout(grad_out) ? grad_out : grad_out.contiguous();
  const Tensor o = kernel_layout(out) ? out : out.contiguous();
  const Tensor ls = lse.contiguous();
  std::array<Tensor, 3> g;
  for (size_t i = 0; i < 3; ++i)
    g[i] = kernel_layout(grads[i]) ? grads[i]
                                   : empty_tensor(grads[i].sizes(), grads[i].dtype(), q.device());
  set_strides(a.o_stride, o);
  set_strides(a.go_stride, go);
  set_strides(a.dq_stride, g[0]);
  set_strides(a.dk_stride, g[1]);
  set_strides(a.dv_stride, g[2]);
  const size_t bytes = cuda_ops::flash_attention_backward_workspace_bytes(a);
  const Tensor workspace =
      empty_tensor({static_cast<int64_t>(bytes / sizeof(float))}, kFloat32, q.device());
  cuda_ops::check_launch(cuda_ops::launch_flash_attention_backward(
                             cuda_ops::code_of(q.dtype()), a, go.data_ptr(), o.data_ptr(),
                             ls.data_ptr<float>(), g[0].data_ptr(), g[1].data_ptr(),
                             g[2].data_ptr(), workspace.data_ptr(), cuda_ops::stream_of(q)),
                         name);
  for (size_t i = 0; i < 3; ++i)
    if (!g[i].is_same(grads[i])) grads[i].copy_(g[i]);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  cuda_ops::CudaStructured<&flash_attention_shape, &flash_attention_loop>::register_cuda(
      m, "_flash_attention");
  cuda_ops::CudaStructured<&flash_attention_backward_shape, &flash_attention_backward_loop>::
      register_cuda(m, "_flash_attention_backward");
}

}  // namespace loom
