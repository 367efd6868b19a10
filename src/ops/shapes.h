// Shape functions of the operators (ops layer, internal): pure functions from the inputs' metadata
// and the non-tensor arguments to the outputs' sizes, strides and dtypes (Note [Shape functions
// and kernels] in structured.h). Each is defined in its family's operator file; the Meta key runs
// them, CPU kernels run them before their loops, and tests call them directly.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "loom/generator.h"

#include "loom/export.h"
#include "structured.h"

namespace loom {

// ---- binary (binary.cpp) ----
struct BinaryTraits {
  const char* name;
  bool int_to_float = false;  // integer inputs give the default float dtype (div)
  bool bool_output = false;   // comparisons and logical ops
  bool is_sub = false;        // bool - bool is refused
};
LOOM_API TensorMeta binary_shape(const BinaryTraits& op, TensorMetaRef self, TensorMetaRef other,
                                 const Scalar& alpha);
LOOM_API TensorMeta where_shape(TensorMetaRef condition, TensorMetaRef self, TensorMetaRef other);

// ---- unary (unary.cpp) ----
// How a unary op's result dtype follows from its input dtype (PyTorch's rules).
enum class UnaryDtypes {
  IntToFloat,    // integer and bool inputs give the default float dtype (exp, sqrt, ...)
  Keep,          // the input dtype; bool inputs are rejected (neg, abs, relu)
  KeepWithBool,  // the input dtype, bool included (sign)
  FloatOnly,     // floating inputs only (silu, gelu)
  BoolOut,       // any input, a bool result (logical_not)
};
// Rejects input dtypes the op does not take; returns the dtype it computes in. Inline: the CPU
// kernels' fast path calls it for every small tensor.
inline DType unary_compute_dtype(const char* op, UnaryDtypes kind, DType in) {
  switch (kind) {
    case UnaryDtypes::Keep:
      LOOM_CHECK_TYPE(in != kBool || std::string_view(op) != "neg",
                      "[neg] negation, the `-` operator, on a bool tensor is not "
                      "supported; to invert a mask use logical_not() instead");
      LOOM_CHECK_TYPE(in != kBool, "[", op, "] is not implemented for bool tensors");
      return in;
    case UnaryDtypes::FloatOnly:
      LOOM_CHECK_TYPE(is_floating(in), "[", op, "] expected a floating point tensor but got ", in);
      return in;
    case UnaryDtypes::IntToFloat:
      return is_floating(in) ? in : default_dtype();
    case UnaryDtypes::KeepWithBool:
    case UnaryDtypes::BoolOut:
      return in;
  }
  return in;
}
LOOM_API TensorMeta unary_shape(const char* op, UnaryDtypes kind, TensorMetaRef self);
LOOM_API TensorMeta gelu_shape(TensorMetaRef self, std::string_view approximate);
LOOM_API TensorMeta pow_scalar_shape(TensorMetaRef self, const Scalar& exponent);
LOOM_API TensorMeta pow_tensor_shape(TensorMetaRef self, TensorMetaRef exponent);
LOOM_API TensorMeta clamp_shape(TensorMetaRef self, const std::optional<Scalar>& min,
                                const std::optional<Scalar>& max);

// ---- linalg (linalg.cpp) ----
LOOM_API TensorMeta mm_shape(TensorMetaRef self, TensorMetaRef mat2);
LOOM_API TensorMeta bmm_shape(TensorMetaRef self, TensorMetaRef mat2);
LOOM_API TensorMeta addmm_shape(TensorMetaRef self, TensorMetaRef mat1, TensorMetaRef mat2,
                                const Scalar& beta, const Scalar& alpha);
LOOM_API TensorMeta dot_shape(TensorMetaRef self, TensorMetaRef other);

// ---- softmax (softmax.cpp) ----
template <bool kLog>
LOOM_API TensorMeta softmax_shape(TensorMetaRef self, int64_t dim, std::optional<DType> dtype);
template <bool kLog>
LOOM_API TensorMeta softmax_backward_shape(TensorMetaRef grad_output, TensorMetaRef output,
                                           int64_t dim, DType input_dtype);

// ---- pool (pool.cpp) ----
struct PoolGeometry {
  int64_t N, C, H, W;  // N = 1 for an unbatched (C, H, W) input
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t Ho, Wo;
  bool batched;
};
// Checks a 2-D pooling call's arguments (errors name `op`) and returns its geometry; output sizes
// and ceil_mode follow PyTorch's pooling_output_shape.
LOOM_API PoolGeometry pool2d_geometry(const char* op, TensorMetaRef self, IntArrayRef kernel_size,
                                      IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                                      bool ceil_mode);
LOOM_API std::array<TensorMeta, 2> max_pool2d_with_indices_shape(
    TensorMetaRef self, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
    IntArrayRef dilation, bool ceil_mode);
LOOM_API TensorMeta max_pool2d_with_indices_backward_shape(
    TensorMetaRef grad_output, TensorMetaRef self, IntArrayRef kernel_size, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, bool ceil_mode, TensorMetaRef indices);
LOOM_API TensorMeta avg_pool2d_shape(TensorMetaRef self, IntArrayRef kernel_size,
                                     IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                                     bool count_include_pad,
                                     std::optional<int64_t> divisor_override);
LOOM_API TensorMeta avg_pool2d_backward_shape(TensorMetaRef grad_output, TensorMetaRef self,
                                              IntArrayRef kernel_size, IntArrayRef stride,
                                              IntArrayRef padding, bool ceil_mode,
                                              bool count_include_pad,
                                              std::optional<int64_t> divisor_override);

// ---- conv (conv.cpp) ----
struct ConvGeometry {
  int64_t N, C, H, W;    // input (N = 1 for an unbatched input)
  int64_t Cout, kh, kw;  // weight
  int64_t Ho, Wo;        // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool batched;
};
// Checks a conv2d call's arguments (errors name `op`) and returns its geometry.
LOOM_API ConvGeometry conv2d_geometry(const char* op, TensorMetaRef input, TensorMetaRef weight,
                                      const OptionalTensorMetaRef& bias, IntArrayRef stride,
                                      IntArrayRef padding, IntArrayRef dilation, int64_t groups);
LOOM_API TensorMeta conv2d_shape(TensorMetaRef input, TensorMetaRef weight,
                                 const OptionalTensorMetaRef& bias, IntArrayRef stride,
                                 IntArrayRef padding, IntArrayRef dilation, int64_t groups);
LOOM_API std::array<TensorMeta, 3> convolution_backward_shape(
    TensorMetaRef grad_output, TensorMetaRef input, TensorMetaRef weight, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, int64_t groups, bool input_mask, bool weight_mask,
    bool bias_mask);

// ---- reduce (reduce.cpp): the reduced dims are dropped, or kept as 1 with keepdim ----
LOOM_API TensorMeta sum_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                              std::optional<DType> dtype);
LOOM_API TensorMeta prod_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                               std::optional<DType> dtype);
LOOM_API TensorMeta mean_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                               std::optional<DType> dtype);
LOOM_API TensorMeta amax_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim);
LOOM_API TensorMeta amin_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim);
template <bool kMax>
LOOM_API TensorMeta extreme_all_shape(TensorMetaRef self);
template <bool kMax>
LOOM_API std::array<TensorMeta, 2> extreme_dim_shape(TensorMetaRef self, int64_t dim, bool keepdim);
template <bool kMax>
LOOM_API TensorMeta arg_extreme_shape(TensorMetaRef self, std::optional<int64_t> dim, bool keepdim);
template <bool kStd>
LOOM_API TensorMeta var_shape(TensorMetaRef self, std::optional<IntArrayRef> dim,
                              int64_t correction, bool keepdim);
LOOM_API TensorMeta logsumexp_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim);
LOOM_API TensorMeta norm_shape(TensorMetaRef self, const Scalar& p, std::optional<IntArrayRef> dim,
                               bool keepdim);
template <bool kAll>
LOOM_API TensorMeta all_any_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim);

// ---- attention (attention.cpp) ----
LOOM_API std::array<TensorMeta, 2> flash_attention_shape(TensorMetaRef q, TensorMetaRef k,
                                                         TensorMetaRef v, bool is_causal,
                                                         double scale);
LOOM_API std::array<TensorMeta, 3> flash_attention_backward_shape(
    TensorMetaRef grad_out, TensorMetaRef q, TensorMetaRef k, TensorMetaRef v, TensorMetaRef out,
    TensorMetaRef lse, bool is_causal, double scale);

// ---- join (join.cpp) ----
LOOM_API TensorMeta cat_shape(TensorMetaList tensors, int64_t dim);

// ---- nn (nn.cpp) ----
LOOM_API std::array<TensorMeta, 3> native_layer_norm_shape(TensorMetaRef input,
                                                           IntArrayRef normalized_shape,
                                                           const OptionalTensorMetaRef& weight,
                                                           const OptionalTensorMetaRef& bias,
                                                           double eps);
LOOM_API std::array<TensorMeta, 3> native_layer_norm_backward_shape(
    TensorMetaRef grad_out, TensorMetaRef input, IntArrayRef normalized_shape, TensorMetaRef mean,
    TensorMetaRef rstd, const OptionalTensorMetaRef& weight, const OptionalTensorMetaRef& bias,
    bool input_mask, bool weight_mask, bool bias_mask);
LOOM_API std::array<TensorMeta, 2> native_dropout_shape(TensorMetaRef input, double p, bool train,
                                                        const std::optional<Generator>& gen);
LOOM_API TensorMeta native_dropout_backward_shape(TensorMetaRef grad_output, TensorMetaRef mask,
                                                  double scale);
LOOM_API TensorMeta nll_loss_shape(TensorMetaRef input, TensorMetaRef target,
                                   const OptionalTensorMetaRef& weight, int64_t reduction,
                                   int64_t ignore_index);
LOOM_API TensorMeta nll_loss_backward_shape(TensorMetaRef grad_output, TensorMetaRef input,
                                            TensorMetaRef target,
                                            const OptionalTensorMetaRef& weight, int64_t reduction,
                                            int64_t ignore_index);

// ---- index (index.cpp) ----
// Sizes with a 0-dim tensor seen as shape [1] (gather and scatter treat it so).
inline DimVector nonempty_sizes(TensorMetaRef t) {
  return t.dim() == 0 ? DimVector{1} : DimVector(t.sizes);
}
LOOM_API TensorMeta index_select_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index);
LOOM_API TensorMeta embedding_shape(TensorMetaRef weight, TensorMetaRef indices,
                                    int64_t padding_idx);
LOOM_API TensorMeta embedding_dense_backward_shape(TensorMetaRef grad_output, TensorMetaRef indices,
                                                   int64_t num_weights, int64_t padding_idx);
LOOM_API TensorMeta gather_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index);
LOOM_API TensorMeta scatter_src_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                      TensorMetaRef src);
LOOM_API TensorMeta scatter_value_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                        const Scalar& value);
LOOM_API TensorMeta scatter_add_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                      TensorMetaRef src);
// scatter_ and scatter_add_ write self: their result is self's geometry.
LOOM_API TensorMeta scatter_inplace_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                          TensorMetaRef src);
LOOM_API TensorMeta scatter_add_inplace_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                              TensorMetaRef src);
LOOM_API TensorMeta masked_fill_shape(TensorMetaRef self, TensorMetaRef mask, const Scalar& value);
LOOM_API TensorMeta one_hot_shape(TensorMetaRef self, int64_t num_classes);
// one_hot's argument checks, which its CPU kernel (sizing its own output) shares.
LOOM_API void one_hot_check(TensorMetaRef self, int64_t num_classes);

// ---- factory (factory.cpp): no tensor inputs; the device argument picked the backend ----
LOOM_API TensorMeta arange_shape(const Scalar& start, const Scalar& end, const Scalar& step,
                                 std::optional<DType> dtype, std::optional<Device> device);
LOOM_API TensorMeta linspace_shape(const Scalar& start, const Scalar& end, int64_t steps,
                                   std::optional<DType> dtype, std::optional<Device> device);
LOOM_API TensorMeta eye_shape(int64_t n, std::optional<int64_t> m, std::optional<DType> dtype,
                              std::optional<Device> device);
LOOM_API TensorMeta rand_shape(IntArrayRef size, const std::optional<Generator>& gen,
                               std::optional<DType> dtype, std::optional<Device> device);
LOOM_API TensorMeta randn_shape(IntArrayRef size, const std::optional<Generator>& gen,
                                std::optional<DType> dtype, std::optional<Device> device);
LOOM_API TensorMeta randint_shape(int64_t low, int64_t high, IntArrayRef size,
                                  const std::optional<Generator>& gen, std::optional<DType> dtype,
                                  std::optional<Device> device);

// ---- copy (copy.cpp) ----
LOOM_API TensorMeta copy_shape(TensorMetaRef self, TensorMetaRef src);
LOOM_API TensorMeta to_copy_shape(TensorMetaRef self, std::optional<DType> dtype,
                                  std::optional<Device> device);
LOOM_API TensorMeta clone_shape(TensorMetaRef self);

}  // namespace loom
