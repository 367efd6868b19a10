// Operators (ops layer): the eager tensor API, as free functions. Every function here goes through
// the dispatcher (so autograd, graph capture and the profiler see it); `loom ops` lists the
// schemas. Names, arguments and semantics follow PyTorch (torch.* / at::*). In-place variants end
// in `_` and return their first argument; `*_out` variants write into `out` (resized if it has the
// wrong shape) and return it. Bad input throws a typed loom::Error whose message starts with
// "[op]". Thread-safe in the same sense as PyTorch: concurrent calls on different tensors are fine.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "loom/error.h"
#include "loom/export.h"
#include "loom/generator.h"
#include "loom/scalar.h"
#include "loom/tensor.h"

namespace loom {

// ---- factories ----
LOOM_API Tensor empty(IntArrayRef size, TensorOptions options = {});
LOOM_API Tensor empty_strided(IntArrayRef size, IntArrayRef stride, TensorOptions options = {});
LOOM_API Tensor zeros(IntArrayRef size, TensorOptions options = {});
LOOM_API Tensor ones(IntArrayRef size, TensorOptions options = {});
LOOM_API Tensor full(IntArrayRef size, const Scalar& value, TensorOptions options = {});
// [start, end) by step; dtype defaults to int64 if all three are integers, else the default dtype.
LOOM_API Tensor arange(const Scalar& end, TensorOptions options = {});
LOOM_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
                       TensorOptions options = {});
LOOM_API Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps,
                         TensorOptions options = {});
LOOM_API Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});
// Uniform [0, 1), standard normal, and integers in [low, high), from `gen` or the default
// generator.
LOOM_API Tensor rand(IntArrayRef size, TensorOptions options = {},
                     const std::optional<Generator>& gen = std::nullopt);
LOOM_API Tensor randn(IntArrayRef size, TensorOptions options = {},
                      const std::optional<Generator>& gen = std::nullopt);
LOOM_API Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options = {},
                        const std::optional<Generator>& gen = std::nullopt);
LOOM_API Tensor empty_like(const Tensor& t, TensorOptions options = {});
LOOM_API Tensor zeros_like(const Tensor& t, TensorOptions options = {});
LOOM_API Tensor ones_like(const Tensor& t, TensorOptions options = {});
LOOM_API Tensor full_like(const Tensor& t, const Scalar& value, TensorOptions options = {});
LOOM_API Tensor rand_like(const Tensor& t, const std::optional<Generator>& gen = std::nullopt);
LOOM_API Tensor randn_like(const Tensor& t, const std::optional<Generator>& gen = std::nullopt);
// A 0-dim tensor holding a value (not a wrapped number; dtype from the scalar unless given).
LOOM_API Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});

// ---- copies and casts ----
LOOM_API const Tensor& copy_(const Tensor& self, const Tensor& src);  // broadcasts, casts
LOOM_API const Tensor& fill_(const Tensor& self, const Scalar& value);
LOOM_API const Tensor& zero_(const Tensor& self);
LOOM_API Tensor clone(const Tensor& self);
LOOM_API Tensor contiguous(const Tensor& self);
// Returns self when nothing changes, else a copy.
LOOM_API Tensor to(const Tensor& self, TensorOptions options, bool copy = false);

// ---- views (share storage with self) ----
LOOM_API Tensor view(const Tensor& self, IntArrayRef size);     // one size may be -1
LOOM_API Tensor reshape(const Tensor& self, IntArrayRef size);  // a view when possible, else a copy
LOOM_API Tensor permute(const Tensor& self, IntArrayRef dims);
LOOM_API Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1);
LOOM_API Tensor t(const Tensor& self);  // 2-D transpose (0-D and 1-D unchanged)
LOOM_API Tensor slice(const Tensor& self, int64_t dim = 0,
                      std::optional<int64_t> start = std::nullopt,
                      std::optional<int64_t> end = std::nullopt, int64_t step = 1);
LOOM_API Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
LOOM_API Tensor select(const Tensor& self, int64_t dim, int64_t index);
LOOM_API Tensor expand(const Tensor& self, IntArrayRef size);  // -1 keeps a size
LOOM_API Tensor squeeze(const Tensor& self, std::optional<int64_t> dim = std::nullopt);
LOOM_API Tensor unsqueeze(const Tensor& self, int64_t dim);
LOOM_API Tensor flatten(const Tensor& self, int64_t start_dim = 0, int64_t end_dim = -1);
LOOM_API Tensor as_strided(const Tensor& self, IntArrayRef size, IntArrayRef stride,
                           std::optional<int64_t> storage_offset = std::nullopt);
LOOM_API Tensor broadcast_to(const Tensor& self, IntArrayRef size);
LOOM_API std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b);

// ---- joining and splitting ----
LOOM_API Tensor cat(TensorList tensors, int64_t dim = 0);
LOOM_API Tensor stack(TensorList tensors, int64_t dim = 0);
LOOM_API std::vector<Tensor> split(const Tensor& self, int64_t split_size, int64_t dim = 0);
LOOM_API std::vector<Tensor> split_with_sizes(const Tensor& self, IntArrayRef sizes,
                                              int64_t dim = 0);
LOOM_API std::vector<Tensor> chunk(const Tensor& self, int64_t chunks, int64_t dim = 0);
LOOM_API std::vector<Tensor> unbind(const Tensor& self, int64_t dim = 0);

// ---- pointwise unary (each also has name_ in place and name_out) ----
#define LOOM_DECLARE_UNARY(name)                      \
  LOOM_API Tensor name(const Tensor& self);           \
  LOOM_API const Tensor& name##_(const Tensor& self); \
  LOOM_API const Tensor& name##_out(const Tensor& out, const Tensor& self);
LOOM_DECLARE_UNARY(neg)
LOOM_DECLARE_UNARY(abs)
LOOM_DECLARE_UNARY(exp)
LOOM_DECLARE_UNARY(log)
LOOM_DECLARE_UNARY(log1p)
LOOM_DECLARE_UNARY(sqrt)
LOOM_DECLARE_UNARY(rsqrt)
LOOM_DECLARE_UNARY(sin)
LOOM_DECLARE_UNARY(cos)
LOOM_DECLARE_UNARY(tanh)
LOOM_DECLARE_UNARY(sigmoid)
LOOM_DECLARE_UNARY(relu)
LOOM_DECLARE_UNARY(silu)
LOOM_DECLARE_UNARY(erf)
LOOM_DECLARE_UNARY(sign)
LOOM_DECLARE_UNARY(reciprocal)
LOOM_DECLARE_UNARY(logical_not)
#undef LOOM_DECLARE_UNARY
// approximate: "none" (erf) or "tanh".
LOOM_API Tensor gelu(const Tensor& self, std::string_view approximate = "none");
LOOM_API const Tensor& gelu_(const Tensor& self, std::string_view approximate = "none");
LOOM_API Tensor pow(const Tensor& self, const Scalar& exponent);
LOOM_API Tensor pow(const Tensor& self, const Tensor& exponent);
LOOM_API Tensor pow(const Scalar& self, const Tensor& exponent);
LOOM_API const Tensor& pow_(const Tensor& self, const Scalar& exponent);
LOOM_API Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
                      const std::optional<Scalar>& max = std::nullopt);
LOOM_API const Tensor& clamp_(const Tensor& self, const std::optional<Scalar>& min,
                              const std::optional<Scalar>& max = std::nullopt);

// ---- pointwise binary (broadcasting, type promotion) ----
LOOM_API Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
LOOM_API Tensor add(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
LOOM_API const Tensor& add_(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
LOOM_API const Tensor& add_(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
LOOM_API const Tensor& add_out(const Tensor& out, const Tensor& self, const Tensor& other,
                               const Scalar& alpha = 1);
LOOM_API Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
LOOM_API Tensor sub(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
LOOM_API const Tensor& sub_(const Tensor& self, const Tensor& other, const Scalar& alpha = 1);
LOOM_API const Tensor& sub_(const Tensor& self, const Scalar& other, const Scalar& alpha = 1);
LOOM_API const Tensor& sub_out(const Tensor& out, const Tensor& self, const Tensor& other,
                               const Scalar& alpha = 1);
#define LOOM_DECLARE_BINARY(name)                                          \
  LOOM_API Tensor name(const Tensor& self, const Tensor& other);           \
  LOOM_API Tensor name(const Tensor& self, const Scalar& other);           \
  LOOM_API const Tensor& name##_(const Tensor& self, const Tensor& other); \
  LOOM_API const Tensor& name##_(const Tensor& self, const Scalar& other); \
  LOOM_API const Tensor& name##_out(const Tensor& out, const Tensor& self, const Tensor& other);
LOOM_DECLARE_BINARY(mul)
LOOM_DECLARE_BINARY(div)  // true division: integer inputs give the default float dtype
LOOM_DECLARE_BINARY(maximum)
LOOM_DECLARE_BINARY(minimum)
// Comparisons and logical ops return bool tensors.
LOOM_DECLARE_BINARY(eq)
LOOM_DECLARE_BINARY(ne)
LOOM_DECLARE_BINARY(lt)
LOOM_DECLARE_BINARY(le)
LOOM_DECLARE_BINARY(gt)
LOOM_DECLARE_BINARY(ge)
LOOM_DECLARE_BINARY(logical_and)
LOOM_DECLARE_BINARY(logical_or)
LOOM_DECLARE_BINARY(logical_xor)
#undef LOOM_DECLARE_BINARY
// Elements of self where condition is true, else of other (all three broadcast).
LOOM_API Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other);
LOOM_API Tensor where(const Tensor& condition, const Scalar& self, const Tensor& other);
LOOM_API Tensor where(const Tensor& condition, const Tensor& self, const Scalar& other);

// ---- reductions (dim = nullopt or {} reduces everything; negative dims allowed) ----
LOOM_API Tensor sum(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                    bool keepdim = false, std::optional<DType> dtype = std::nullopt);
LOOM_API Tensor mean(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                     bool keepdim = false, std::optional<DType> dtype = std::nullopt);
LOOM_API Tensor prod(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                     bool keepdim = false, std::optional<DType> dtype = std::nullopt);
LOOM_API Tensor amax(const Tensor& self, IntArrayRef dim = {}, bool keepdim = false);
LOOM_API Tensor amin(const Tensor& self, IntArrayRef dim = {}, bool keepdim = false);
LOOM_API Tensor max(const Tensor& self);  // of all elements
LOOM_API Tensor min(const Tensor& self);
// (values, indices) along dim; ties pick the first index.
LOOM_API std::tuple<Tensor, Tensor> max(const Tensor& self, int64_t dim, bool keepdim = false);
LOOM_API std::tuple<Tensor, Tensor> min(const Tensor& self, int64_t dim, bool keepdim = false);
LOOM_API Tensor argmax(const Tensor& self, std::optional<int64_t> dim = std::nullopt,
                       bool keepdim = false);
LOOM_API Tensor argmin(const Tensor& self, std::optional<int64_t> dim = std::nullopt,
                       bool keepdim = false);
// correction = 1 is Bessel's correction (unbiased), as torch.var's default.
LOOM_API Tensor var(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                    int64_t correction = 1, bool keepdim = false);
LOOM_API Tensor std(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                    int64_t correction = 1, bool keepdim = false);
LOOM_API Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim = false);
LOOM_API Tensor norm(const Tensor& self, const Scalar& p = 2,
                     std::optional<IntArrayRef> dim = std::nullopt, bool keepdim = false);
LOOM_API Tensor all(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                    bool keepdim = false);
LOOM_API Tensor any(const Tensor& self, std::optional<IntArrayRef> dim = std::nullopt,
                    bool keepdim = false);
LOOM_API Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype = std::nullopt);
LOOM_API Tensor log_softmax(const Tensor& self, int64_t dim,
                            std::optional<DType> dtype = std::nullopt);

// ---- linear algebra (float32: loom's AVX-512 kernel where the CPU has one, else OpenBLAS;
// float64: OpenBLAS; float16/bfloat16 computed in float32) ---- Which kernel runs float32 products
// in this process (LOOM_GEMM=blas forces OpenBLAS), in words.
LOOM_API std::string gemm_backend();
struct GemmInfo {
  bool loom_kernel = false;  // loom's AVX-512 sgemm runs products in [min_macs, max_macs)
  int64_t tile_rows = 0, tile_cols = 0;  // its micro-kernel's tile of c
  int64_t min_macs = 0, max_macs = 0;
  std::string reason;  // why OpenBLAS runs everything ("" when loom_kernel)
};
LOOM_API GemmInfo gemm_info();
LOOM_API Tensor mm(const Tensor& self, const Tensor& mat2);
LOOM_API Tensor bmm(const Tensor& self, const Tensor& mat2);
LOOM_API Tensor matmul(const Tensor& self, const Tensor& other);  // torch.matmul semantics
// beta * self + alpha * (mat1 @ mat2), self broadcast to the result.
LOOM_API Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                      const Scalar& beta = 1, const Scalar& alpha = 1);
LOOM_API Tensor linear(const Tensor& input, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt);
LOOM_API Tensor dot(const Tensor& self, const Tensor& other);

// ---- indexing ----
LOOM_API Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index);
LOOM_API Tensor gather(const Tensor& self, int64_t dim, const Tensor& index);
LOOM_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
LOOM_API Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value);
LOOM_API Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index,
                            const Tensor& src);
LOOM_API const Tensor& scatter_(const Tensor& self, int64_t dim, const Tensor& index,
                                const Tensor& src);
LOOM_API const Tensor& scatter_add_(const Tensor& self, int64_t dim, const Tensor& index,
                                    const Tensor& src);
LOOM_API Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
LOOM_API Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value);
LOOM_API const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, const Scalar& value);
LOOM_API Tensor one_hot(const Tensor& self, int64_t num_classes = -1);

// ---- neural network ----
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };
LOOM_API Tensor conv2d(const Tensor& input, const Tensor& weight,
                       const std::optional<Tensor>& bias = std::nullopt,
                       IntArrayRef stride = {1, 1}, IntArrayRef padding = {0, 0},
                       IntArrayRef dilation = {1, 1}, int64_t groups = 1);
// stride {} means stride = kernel_size.
LOOM_API Tensor max_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = {0, 0}, IntArrayRef dilation = {1, 1},
                           bool ceil_mode = false);
// (output, indices into each flattened H*W plane), for the backward pass.
LOOM_API std::tuple<Tensor, Tensor> max_pool2d_with_indices(
    const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride = {},
    IntArrayRef padding = {0, 0}, IntArrayRef dilation = {1, 1}, bool ceil_mode = false);
LOOM_API Tensor avg_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride = {},
                           IntArrayRef padding = {0, 0}, bool ceil_mode = false,
                           bool count_include_pad = true);
LOOM_API Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                           const std::optional<Tensor>& weight = std::nullopt,
                           const std::optional<Tensor>& bias = std::nullopt, double eps = 1e-5);
// (output, mean, rstd) with mean/rstd shaped like input's leading dims, for the backward pass.
LOOM_API std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input,
                                                              IntArrayRef normalized_shape,
                                                              const std::optional<Tensor>& weight,
                                                              const std::optional<Tensor>& bias,
                                                              double eps);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when train is true.
LOOM_API Tensor dropout(const Tensor& input, double p, bool train,
                        const std::optional<Generator>& gen = std::nullopt);
// (output, keep mask as bool), for the backward pass.
LOOM_API std::tuple<Tensor, Tensor> native_dropout(
    const Tensor& input, double p, bool train, const std::optional<Generator>& gen = std::nullopt);
// input: (N, C) or (N, C, d1, ...) log-probabilities; target: class indices (N) or (N, d1, ...).
LOOM_API Tensor nll_loss(const Tensor& input, const Tensor& target,
                         const std::optional<Tensor>& weight = std::nullopt,
                         Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);
// input: logits; target: class indices, or class probabilities with the same shape as input.
LOOM_API Tensor cross_entropy(const Tensor& input, const Tensor& target,
                              const std::optional<Tensor>& weight = std::nullopt,
                              Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                              double label_smoothing = 0.0);

// ---- attention (attention.cpp, Note [Attention backends]) ----
// As torch.nn.functional.scaled_dot_product_attention: softmax(query key^T * scale) value over
// (batch, heads, length, head_dim) or (batch, length, head_dim) inputs; scale defaults to
// 1 / sqrt(head_dim); is_causal masks keys after the query (top-left aligned). Runs the fused flash
// kernel when it applies, else the composed path (and says why, once).
LOOM_API Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key,
                                             const Tensor& value, double dropout_p = 0.0,
                                             bool is_causal = false,
                                             std::optional<double> scale = std::nullopt);
// Which path scaled_dot_product_attention takes for these 4-D inputs, and why.
struct AttentionBackend {
  bool fused = false;
  std::string reason;
};
LOOM_API AttentionBackend attention_backend(const Tensor& query, const Tensor& key,
                                            const Tensor& value, double dropout_p = 0.0);
// The composed path (also the reference of the fused kernels' tests).
LOOM_API Tensor attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                               double dropout_p, bool is_causal, double scale);
// The fused kernels on 4-D inputs: (out, lse) with lse the log-sum-exp of each query row's scaled
// scores (batch, heads, length) in float32 (float64 for float64 inputs); the backward rebuilds the
// probabilities from it and returns (grad_query, grad_key, grad_value).
LOOM_API std::tuple<Tensor, Tensor> _flash_attention(const Tensor& query, const Tensor& key,
                                                     const Tensor& value, bool is_causal,
                                                     double scale);
LOOM_API std::tuple<Tensor, Tensor, Tensor> _flash_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& out, const Tensor& lse, bool is_causal, double scale);

// ---- backward kernels (used by autograd formulas; PyTorch names) ----
// Each takes grad_output (the gradient of the forward op's result) plus what the forward saved and
// returns the gradient of the forward's input(s), with the dtype of grad_output. grad_output must
// have exactly the forward result's shape and dtype (no broadcasting, no promotion).
// grad_output where self > threshold, else 0 (relu: threshold 0, with relu's input or output).
LOOM_API Tensor threshold_backward(const Tensor& grad_output, const Tensor& self,
                                   const Scalar& threshold);
LOOM_API Tensor sigmoid_backward(const Tensor& grad_output, const Tensor& output);  // g*y*(1-y)
LOOM_API Tensor tanh_backward(const Tensor& grad_output, const Tensor& output);     // g*(1-y^2)
LOOM_API Tensor silu_backward(const Tensor& grad_output, const Tensor& self);
LOOM_API Tensor gelu_backward(const Tensor& grad_output, const Tensor& self,
                              std::string_view approximate = "none");
// output: softmax's (log_softmax's) result; the gradient is cast to input_dtype, the dtype of the
// forward's input.
LOOM_API Tensor _softmax_backward_data(const Tensor& grad_output, const Tensor& output, int64_t dim,
                                       DType input_dtype);
LOOM_API Tensor _log_softmax_backward_data(const Tensor& grad_output, const Tensor& output,
                                           int64_t dim, DType input_dtype);
// nll_loss does not return the summed weight of the non-ignored targets, so Mean recomputes it.
LOOM_API Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self,
                                  const Tensor& target, const std::optional<Tensor>& weight,
                                  Reduction reduction, int64_t ignore_index);
// indices: max_pool2d_with_indices's second result.
LOOM_API Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Tensor& self,
                                                 IntArrayRef kernel_size, IntArrayRef stride,
                                                 IntArrayRef padding, IntArrayRef dilation,
                                                 bool ceil_mode, const Tensor& indices);
LOOM_API Tensor avg_pool2d_backward(const Tensor& grad_output, const Tensor& self,
                                    IntArrayRef kernel_size, IntArrayRef stride,
                                    IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                    std::optional<int64_t> divisor_override = std::nullopt);
// conv2d's (grad_input, grad_weight, grad_bias); an entry whose output_mask is false is undefined.
LOOM_API std::tuple<Tensor, Tensor, Tensor> convolution_backward(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, int64_t groups, std::array<bool, 3> output_mask);
// mean, rstd: native_layer_norm's; (grad_input, grad_weight, grad_bias), undefined where the mask
// is false (grad_weight and grad_bias have normalized_shape even without weight or bias).
LOOM_API std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, IntArrayRef normalized_shape, const Tensor& mean,
    const Tensor& rstd, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
    std::array<bool, 3> output_mask);
// The (num_weights, embedding_dim) gradient of embedding's weight; rows at padding_idx stay zero
// (padding_idx < 0: none, as aten's).
LOOM_API Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices,
                                         int64_t num_weights, int64_t padding_idx);
// grad_output * mask * scale, mask native_dropout's (bool).
LOOM_API Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask,
                                        double scale);

// ---- operators as C++ operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, const Scalar& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Scalar& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Scalar& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Scalar& b) {
  return div(a, b);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}

// True when all elements of a and b (same shape) are within atol + rtol * |b|; NaNs compare equal
// only if equal_nan.
LOOM_API bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
                       bool equal_nan = false);
LOOM_API bool equal(const Tensor& a, const Tensor& b);  // same shape and elements

// Why operator `op` (e.g. "loom::softmax") has no kernel for `backend` although it has a CPU one:
// the reason the backend gives (`loom ops --missing cuda` prints it). "" for backends that keep no
// such list.
LOOM_API std::string missing_kernel_reason(const std::string& op, DispatchKey backend);

// ---- fused training kernels (Note [Fused cross-entropy], Note [Fused bias GELU], Note
// [Multi-tensor Adam]) ----
// logits (N, V), target (N) int64 class indices: (mean cross-entropy over the rows whose target is
// not ignore_index, each row's log-sum-exp), both float32 (float64 for float64 logits): 16-bit
// logits are read as they are and give a float32 loss. No (N, V) intermediate.
LOOM_API std::tuple<Tensor, Tensor> _fused_cross_entropy(const Tensor& logits, const Tensor& target,
                                                         int64_t ignore_index = -100,
                                                         double label_smoothing = 0.0);
// grad_logits = (softmax - (1 - s) onehot - s / V) * grad / count, zero on ignored rows, in the
// logits' dtype; lse is the forward's second output.
LOOM_API Tensor _fused_cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                              const Tensor& target, const Tensor& lse,
                                              int64_t ignore_index = -100,
                                              double label_smoothing = 0.0);
// gelu(input + bias) in one pass; input (..., M), bias (M). approximate: "none" or "tanh".
LOOM_API Tensor _bias_gelu(const Tensor& input, const Tensor& bias,
                           std::string_view approximate = "tanh");
// The gradient of input + bias's pre-activation (its bias gradient is the sum over rows).
LOOM_API Tensor _bias_gelu_backward(const Tensor& grad, const Tensor& input, const Tensor& bias,
                                    std::string_view approximate = "tanh");
// gelu(linear(input, weight, bias)): on CUDA the product and the bias + GELU run as one cuBLASLt
// call when approximate is "tanh" (its epilogue's approximation), else product + _bias_gelu.
LOOM_API Tensor _linear_gelu(const Tensor& input, const Tensor& weight,
                             const std::optional<Tensor>& bias = std::nullopt,
                             std::string_view approximate = "tanh");
// One Adam / AdamW step over lists of parameters (torch's _fused_adamw_): params, exp_avgs,
// exp_avg_sqs (and max_exp_avg_sqs with amsgrad, else an empty list) are updated in place; steps
// holds each parameter's step count after this step's increment. All float32 (or float64 on the
// CPU), dense, contiguous, on one device.
LOOM_API void _fused_adam_(TensorList params, TensorList grads, TensorList exp_avgs,
                           TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, double lr,
                           double beta1, double beta2, double weight_decay, double eps,
                           bool amsgrad, bool maximize, bool decoupled, IntArrayRef steps);

}  // namespace loom
