// Scaled dot-product attention: the operator users call (scaled_dot_product_attention, as
// torch.nn.functional's), the fused flash-attention operators it picks when they apply
// (_flash_attention and its backward; CPU kernels in cpu/attention_kernels.cpp, CUDA kernels in
// cuda/attention_kernels.cu), the composed "math" path otherwise, and the derivative.
//
// Note [Attention backends]
// scaled_dot_product_attention is CompositeImplicit: it decides, per call, between
//  - flash: _flash_attention(q, k, v, is_causal, scale) -> (out, lse). Tiled over queries and keys
//    with an online softmax; the (T x T) score matrix never exists in memory. It returns the
//    log-sum-exp of every query row (float32; float64 for float64 inputs), which is all the
//    backward needs to rebuild the probabilities tile by tile (_flash_attention_backward).
//  - math: softmax(q k^T * scale [causal mask]) [dropout] v with ordinary operators, which
//    autograd differentiates like any composition. It materialises the scores.
// attention_backend() states the choice and its reason; whenever math runs where a user may have
// expected flash (dropout, float32 on CUDA, an unsupported head size), a warning says why, once.
// The causal mask is PyTorch's: query i sees keys j <= i (top-left aligned when Tq != Tk).
//
// Note [Attention layouts]
// The fused operators return out, and the backward dq, dk and dv, as (batch, heads, length,
// head_dim) views of memory laid out (batch, length, heads, head_dim), as PyTorch's flash kernels
// do. A model transposes the heads back next to the channels (out.transpose(1, 2)) and merges
// them: on that layout the transpose is already contiguous, so neither the output projection's
// input nor the gradients flowing into the qkv projection need a copy. The CUDA kernels read q,
// k, v, out and grad_out at their strides and write their outputs at theirs; the CPU kernels
// compute contiguously and copy into the layout.
#include <cmath>
#include <limits>
#include <string>

#include "loom/derivatives.h"
#include "loom/ops.h"
#include "loom/warning.h"
#include "op_call.h"
#include "shapes.h"
#include "structured.h"

namespace loom {

namespace {

void check_qkv(const char* op, TensorMetaRef q, TensorMetaRef k, TensorMetaRef v) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "[", op,
             "] expected query, key and value of shape (batch, heads, length, head_dim) but got ",
             q.sizes, ", ", k.sizes, " and ", v.sizes);
  LOOM_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == q.size(1) &&
                 v.size(1) == q.size(1),
             "[", op, "] query, key and value must agree on batch and heads but got ", q.sizes,
             ", ", k.sizes, " and ", v.sizes);
  LOOM_CHECK(v.size(2) == k.size(2), "[", op, "] key and value must have one length but got ",
             k.sizes, " and ", v.sizes);
  LOOM_CHECK(k.size(3) == q.size(3) && v.size(3) == q.size(3), "[", op,
             "] query, key and value must have one head_dim but got ", q.sizes, ", ", k.sizes,
             " and ", v.sizes);
  LOOM_CHECK_TYPE(is_floating(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype, "[", op,
                  "] expected query, key and value of one floating dtype but got ", q.dtype, ", ",
                  k.dtype, " and ", v.dtype);
  LOOM_CHECK(k.device == q.device && v.device == q.device, "[", op,
             "] expected query, key and value on one device but got ", q.device, ", ", k.device,
             " and ", v.device);
}

// (b, h, t, d) sizes laid out (b, t, h, d): Note [Attention layouts].
TensorMeta heads_inside(IntArrayRef sizes, DType dt) {
  const int64_t h = sizes[1], t = sizes[2], d = sizes[3];
  const int64_t strides[] = {t * h * d, d, h * d, 1};
  return TensorMeta(sizes, IntArrayRef(strides, 4), dt);
}

DType lse_dtype(DType dt) {
  return dt == kFloat64 ? kFloat64 : kFloat32;
}

}  // namespace

std::array<TensorMeta, 2> flash_attention_shape(TensorMetaRef q, TensorMetaRef k, TensorMetaRef v,
                                                bool /*is_causal*/, double scale) {
  check_qkv("_flash_attention", q, k, v);
  LOOM_CHECK(std::isfinite(scale), "[_flash_attention] scale must be finite but got ", scale);
  const int64_t lse_sizes[] = {q.size(0), q.size(1), q.size(2)};
  return {heads_inside(q.sizes, q.dtype),
          TensorMeta(IntArrayRef(lse_sizes, 3), lse_dtype(q.dtype))};
}

std::array<TensorMeta, 3> flash_attention_backward_shape(TensorMetaRef grad_out, TensorMetaRef q,
                                                         TensorMetaRef k, TensorMetaRef v,
                                                         TensorMetaRef out, TensorMetaRef lse,
                                                         bool /*is_causal*/, double /*scale*/) {
  constexpr const char* op = "_flash_attention_backward";
  check_qkv(op, q, k, v);
  LOOM_CHECK(grad_out.sizes == q.sizes && out.sizes == q.sizes, "[", op,
             "] expected grad_out and out of the query's shape ", q.sizes, " but got ",
             grad_out.sizes, " and ", out.sizes);
  LOOM_CHECK_TYPE(grad_out.dtype == q.dtype && out.dtype == q.dtype, "[", op,
                  "] expected grad_out and out of dtype ", q.dtype, " but got ", grad_out.dtype,
                  " and ", out.dtype);
  LOOM_CHECK(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(1) &&
                 lse.size(2) == q.size(2) && lse.dtype == lse_dtype(q.dtype),
             "[", op, "] expected lse of shape [", q.size(0), ", ", q.size(1), ", ", q.size(2),
             "] and dtype ", lse_dtype(q.dtype), " (from _flash_attention) but got ", lse.sizes,
             " of ", lse.dtype);
  return {heads_inside(q.sizes, q.dtype), heads_inside(k.sizes, k.dtype),
          heads_inside(v.sizes, v.dtype)};
}

AttentionBackend attention_backend(const Tensor& q, const Tensor& k, const Tensor& v,
                                   double dropout_p) {
  (void)k;
  (void)v;
  if (dropout_p > 0.0)
    return {false, "dropout_p > 0: the fused kernels have no dropout; the composed path runs"};
  if (q.device().is_cuda()) {
    const DType dt = q.dtype();
    if (dt != kBFloat16 && dt != kFloat16)
      return {false, std::string("a ") + dtype_name(dt) +
                         " input on CUDA: the fused kernel runs bfloat16/float16 on tensor cores "
                         "(use autocast); the composed path runs"};
    const int64_t d = q.size(-1);
    if (d != 32 && d != 64 && d != 128)
      return {false, "head_dim " + std::to_string(d) +
                         " on CUDA: the fused kernel has head_dim 32, 64 or 128; the composed "
                         "path runs"};
    return {true, "flash (CUDA, tensor cores)"};
  }
  return {true, q.device().is_cpu() ? "flash (CPU)" : "flash"};
}

Tensor attention_math(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                      bool is_causal, double scale) {
  Tensor att = mul(matmul(q, transpose(k, -2, -1)), scale);
  if (is_causal) {
    const int64_t tq = q.size(-2), tk = k.size(-2);
    const TensorOptions o = TensorOptions(kInt64).with_device(q.device());
    const Tensor future = gt(unsqueeze(arange(tk, o), 0), unsqueeze(arange(tq, o), 1));
    att = masked_fill(att, future, -std::numeric_limits<double>::infinity());
  }
  att = softmax(att, -1);
  if (dropout_p > 0.0) att = dropout(att, dropout_p, true);
  return matmul(att, v);
}

namespace {

Tensor sdpa_kernel(const Tensor& query, const Tensor& key, const Tensor& value, double dropout_p,
                   bool is_causal, std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  LOOM_CHECK(query.dim() == key.dim() && query.dim() == value.dim() &&
                 (query.dim() == 3 || query.dim() == 4),
             "[", op,
             "] expected query, key and value of shape (batch, heads, length, head_dim) or "
             "(batch, length, head_dim) but got ",
             query.shape_str(), ", ", key.shape_str(), " and ", value.shape_str());
  LOOM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "[", op, "] dropout_p must be in [0, 1) but got ",
             dropout_p);
  const bool three = query.dim() == 3;
  const Tensor q = three ? unsqueeze(query, 0) : query;
  const Tensor k = three ? unsqueeze(key, 0) : key;
  const Tensor v = three ? unsqueeze(value, 0) : value;
  check_qkv(op, q, k, v);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const AttentionBackend b = attention_backend(q, k, v, dropout_p);
  Tensor out;
  if (b.fused) {
    out = std::get<0>(_flash_attention(q, k, v, is_causal, s));
  } else {
    warn_once(std::string("attention.math:") + b.reason, std::string("[") + op + "] " + b.reason);
    out = attention_math(q, k, v, dropout_p, is_causal, s);
  }
  return three ? squeeze(out, 0) : out;
}

using autograd::BackwardContext;
using autograd::GradList;

// The gradients of _flash_attention. Without create_graph the fused backward runs (it rebuilds the
// probabilities from lse); with create_graph they are written with differentiable operators so
// that they can be differentiated again.
GradList flash_attention_derivative(const BackwardContext& c) {
  const Tensor& g = c.grad(0);
  if (!g.defined()) return GradList(3);
  const Tensor q = c.input(0), k = c.input(1), v = c.input(2);
  const bool causal = c.bool_arg(3);
  const double scale = c.double_arg(4);
  if (!c.create_graph()) {
    auto [dq, dk, dv] =
        _flash_attention_backward(g, q, k, v, c.output(0), c.output(1), causal, scale);
    return {dq, dk, dv};
  }
  Tensor att = mul(matmul(q, transpose(k, -2, -1)), scale);
  if (causal) {
    const TensorOptions o = TensorOptions(kInt64).with_device(q.device());
    const Tensor future =
        gt(unsqueeze(arange(k.size(2), o), 0), unsqueeze(arange(q.size(2), o), 1));
    att = masked_fill(att, future, -std::numeric_limits<double>::infinity());
  }
  const Tensor p = softmax(att, -1);
  const Tensor dp = matmul(g, transpose(v, -2, -1));
  const Tensor ds = mul(p, sub(dp, sum(mul(dp, p), IntArrayRef{-1}, /*keepdim=*/true)));
  return {c.needs(0) ? mul(matmul(ds, k), scale) : Tensor(),
          c.needs(1) ? mul(matmul(transpose(ds, -2, -1), q), scale) : Tensor(),
          c.needs(2) ? matmul(transpose(p, -2, -1), g) : Tensor()};
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, float dropout_p=0.0, "
      "bool is_causal=False, *, float? scale=None) -> Tensor");
  m.def(
      "_flash_attention(Tensor query, Tensor key, Tensor value, bool is_causal, float scale) -> "
      "(Tensor, Tensor)");
  m.def(
      "_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
      "Tensor out, Tensor lse, bool is_causal, float scale) -> (Tensor, Tensor, Tensor)");
  MetaKernel<&flash_attention_shape>::register_meta(m, "_flash_attention");
  MetaKernel<&flash_attention_backward_shape>::register_meta(m, "_flash_attention_backward");
  m.impl("scaled_dot_product_attention", DispatchKey::CompositeImplicit, sdpa_kernel);
}

LOOM_DERIVATIVES(m) {
  m.def("_flash_attention", autograd::saves({0, 1, 2}, {0, 1}), flash_attention_derivative);
  m.nondifferentiable("_flash_attention_backward");
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  LOOM_CALL_OP(
      "loom::scaled_dot_product_attention",
      Tensor(const Tensor&, const Tensor&, const Tensor&, double, bool, std::optional<double>),
      query, key, value, dropout_p, is_causal, scale);
}

std::tuple<Tensor, Tensor> _flash_attention(const Tensor& query, const Tensor& key,
                                            const Tensor& value, bool is_causal, double scale) {
  using Sig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, bool, double);
  LOOM_CALL_OP("loom::_flash_attention", Sig, query, key, value, is_causal, scale);
}

std::tuple<Tensor, Tensor, Tensor> _flash_attention_backward(const Tensor& grad_out,
                                                             const Tensor& query, const Tensor& key,
                                                             const Tensor& value, const Tensor& out,
                                                             const Tensor& lse, bool is_causal,
                                                             double scale) {
  using Sig =
      std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, bool, double);
  LOOM_CALL_OP("loom::_flash_attention_backward", Sig, grad_out, query, key, value, out, lse,
               is_causal, scale);
}

}  // namespace loom
