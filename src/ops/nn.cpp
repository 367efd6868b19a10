// Neural-network operators: layer norm, dropout and the classification losses (nll_loss,
// cross_entropy): schemas, shape functions and decompositions. The CPU kernels (16-bit floats
// computed in float, sums accumulated in double) are in cpu/nn_kernels.cpp.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "loom/parallel.h"
#include "loops.h"
#include "op_call.h"
#include "shapes.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

bool has(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

// ---- layer norm ----

std::string star_shape(IntArrayRef shape) {
  std::ostringstream os;
  os << "[*";
  for (int64_t s : shape) os << ", " << s;
  os << "]";
  return os.str();
}

void check_affine(const char* op, const char* arg, const OptionalTensorMetaRef& t,
                  TensorMetaRef input, IntArrayRef normalized_shape) {
  if (!t.has_value()) return;
  LOOM_CHECK(t->sizes == normalized_shape, "[", op, "] expected ", arg, " of shape ",
             normalized_shape, " (normalized_shape) but got ", t->sizes);
  LOOM_CHECK(t->device == input.device, "[", op, "] expected ", arg, " on ", input.device,
             " (like input) but it is on ", t->device);
}

// The number of normalized elements per row, after checking input against normalized_shape.
int64_t check_normalized_shape(const char* op, TensorMetaRef input, IntArrayRef normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  LOOM_CHECK(k >= 1, "[", op, "] normalized_shape must have at least one dimension");
  const int64_t axis = input.dim() - k;
  LOOM_CHECK(axis >= 0 && input.sizes.slice(static_cast<size_t>(axis)) == normalized_shape, "[", op,
             "] given normalized_shape=", normalized_shape, ", expected input with shape ",
             star_shape(normalized_shape), " but got input of shape ", input.sizes);
  return multiply_sizes(normalized_shape);
}

// (output, mean, rstd). mean and rstd keep the normalized dims as size 1, as PyTorch's CPU kernel:
// input [2, 3, 4] with normalized_shape [4] gives mean of shape [2, 3, 1].
}  // namespace

std::array<TensorMeta, 3> native_layer_norm_shape(TensorMetaRef input, IntArrayRef normalized_shape,
                                                  const OptionalTensorMetaRef& weight,
                                                  const OptionalTensorMetaRef& bias, double eps) {
  check_normalized_shape("native_layer_norm", input, normalized_shape);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const int64_t axis = input.dim() - k;
  check_affine("native_layer_norm", "weight", weight, input, normalized_shape);
  check_affine("native_layer_norm", "bias", bias, input, normalized_shape);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[native_layer_norm] expected a floating input but got ", dt);
  DimVector stat_shape;
  for (int64_t d = 0; d < axis; ++d) stat_shape.push_back(input.size(d));
  for (int64_t d = 0; d < k; ++d) stat_shape.push_back(1);
  return {TensorMeta(input.sizes, dt), TensorMeta(stat_shape, dt), TensorMeta(stat_shape, dt)};
}

std::array<TensorMeta, 3> native_layer_norm_backward_shape(
    TensorMetaRef grad_out, TensorMetaRef input, IntArrayRef normalized_shape, TensorMetaRef mean,
    TensorMetaRef rstd, const OptionalTensorMetaRef& weight, const OptionalTensorMetaRef& bias,
    bool input_mask, bool weight_mask, bool bias_mask) {
  constexpr const char* op = "native_layer_norm_backward";
  check_normalized_shape(op, input, normalized_shape);
  check_affine(op, "weight", weight, input, normalized_shape);
  check_affine(op, "bias", bias, input, normalized_shape);
  LOOM_CHECK(grad_out.sizes == input.sizes, "[", op, "] expected grad_out of shape ", input.sizes,
             " (the shape of input) but got ", grad_out.sizes);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt) && grad_out.dtype == dt, "[", op,
                  "] expected grad_out and input of one floating dtype but got ", grad_out.dtype,
                  " and ", dt);
  const int64_t rows =
      multiply_sizes(input.sizes.slice(0, input.sizes.size() - normalized_shape.size()));
  for (const TensorMetaRef* t : {&mean, &rstd}) {
    LOOM_CHECK(t->numel() == rows, "[", op, "] expected ", t == &mean ? "mean" : "rstd", " with ",
               rows, " elements (one per normalized row of input ", input.sizes, ") but got ",
               t->sizes);
    LOOM_CHECK_TYPE(t->dtype == dt, "[", op, "] expected ", t == &mean ? "mean" : "rstd",
                    " of dtype ", dt, " (like input) but got ", t->dtype);
  }
  return {input_mask ? TensorMeta(input.sizes, dt) : undefined_meta(),
          weight_mask ? TensorMeta(normalized_shape, weight.has_value() ? weight->dtype : dt)
                      : undefined_meta(),
          bias_mask ? TensorMeta(normalized_shape, bias.has_value() ? bias->dtype : dt)
                    : undefined_meta()};
}

namespace {

Tensor layer_norm_kernel(const Tensor& input, IntArrayRef normalized_shape,
                         const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                         double eps) {
  return std::get<0>(native_layer_norm(input, normalized_shape, weight, bias, eps));
}

// ---- dropout ----

void check_dropout_p(const char* op, double p) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "[", op,
             "] dropout probability has to be between 0 and 1, "
             "but got ",
             p);
}

}  // namespace

// The generator is the loop's business: the shape function neither reads nor advances it.
std::array<TensorMeta, 2> native_dropout_shape(TensorMetaRef input, double p, bool train,
                                               const std::optional<Generator>& gen) {
  check_dropout_p("native_dropout", p);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[native_dropout] expected a floating input but got ", dt);
  return {TensorMeta(input.sizes, dt), TensorMeta(input.sizes, kBool)};
}

TensorMeta native_dropout_backward_shape(TensorMetaRef grad_output, TensorMetaRef mask,
                                         double scale) {
  constexpr const char* op = "native_dropout_backward";
  LOOM_CHECK(mask.sizes == grad_output.sizes, "[", op, "] expected mask of shape ",
             grad_output.sizes, " (the shape of grad_output) but got ", mask.sizes);
  LOOM_CHECK_TYPE(is_floating(grad_output.dtype), "[", op,
                  "] expected a floating grad_output but got ", grad_output.dtype);
  LOOM_CHECK_TYPE(mask.dtype == kBool, "[", op, "] expected a bool mask but got ", mask.dtype);
  const TensorMetaRef in[2] = {grad_output, mask};
  common_device(op, in, 2);
  return TensorMeta(grad_output.sizes, grad_output.dtype);
}

namespace {

Tensor dropout_kernel(const Tensor& input, double p, bool train,
                      const std::optional<Generator>& gen) {
  check_defined(input, "dropout", "input");
  check_dropout_p("dropout", p);
  if (!train || p == 0.0) return input;
  return std::get<0>(native_dropout(input, p, train, gen));
}

// ---- losses ----

void check_reduction(const char* op, int64_t reduction) {
  LOOM_CHECK(reduction >= 0 && reduction <= 2, "[", op,
             "] reduction must be 0 (none), 1 (mean) "
             "or 2 (sum) but got ",
             reduction);
}

void check_class_weight(const char* op, const OptionalTensorMetaRef& weight, TensorMetaRef input,
                        int64_t classes) {
  if (!weight.has_value()) return;
  LOOM_CHECK(weight->dim() == 1 && weight->numel() == classes, "[", op,
             "] expected weight to be "
             "a 1-D tensor with one element per class (",
             classes, ") but got shape ", weight->sizes);
  LOOM_CHECK(weight->device == input.device, "[", op, "] expected weight on ", input.device,
             " (like input) but it is on ", weight->device);
}

// input (C), (N, C) or (N, C, d1, ...): log-probabilities; target the class of each sample.
// Mean divides by the summed weights of the targets that are not ignored (PyTorch's weighted mean).
// The shapes of an nll_loss call, after checking its arguments.
struct NllShape {
  int64_t classes = 0;
  int64_t spatial = 1;  // elements of d1, ...: sample i = n * spatial + s
  DimVector target_shape;
};

NllShape check_nll(const char* op, TensorMetaRef input, TensorMetaRef target,
                   const OptionalTensorMetaRef& weight, int64_t reduction) {
  check_reduction(op, reduction);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[", op,
                  "] expected floating input (log-probabilities) but "
                  "got ",
                  dt);
  LOOM_CHECK_TYPE(target.dtype == kInt64 || target.dtype == kUInt8, "[", op,
                  "] expected "
                  "target to hold class indices of dtype int64 but got ",
                  target.dtype);
  LOOM_CHECK(input.dim() >= 1, "[", op,
             "] expected input of shape (C), (N, C) or "
             "(N, C, d1, ...) but got a 0-dim tensor");
  LOOM_CHECK(target.device == input.device, "[", op, "] expected target on ", input.device,
             " (like input) but it is on ", target.device);
  NllShape shape;
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  shape.classes = input.size(class_dim);
  shape.target_shape = DimVector(input.sizes);
  shape.target_shape.erase(static_cast<size_t>(class_dim));
  LOOM_CHECK(target.sizes == shape.target_shape.ref(), "[", op, "] expected target of shape ",
             shape.target_shape.ref(), " for input of shape ", input.sizes, " but got ",
             target.sizes);
  check_class_weight(op, weight, input, shape.classes);
  for (int64_t d = 2; d < input.dim(); ++d) shape.spatial *= input.size(d);
  return shape;
}

}  // namespace

TensorMeta nll_loss_shape(TensorMetaRef input, TensorMetaRef target,
                          const OptionalTensorMetaRef& weight, int64_t reduction,
                          int64_t ignore_index) {
  const NllShape shape = check_nll("nll_loss", input, target, weight, reduction);
  return TensorMeta(reduction == 0 ? shape.target_shape.ref() : IntArrayRef(), input.dtype);
}

TensorMeta nll_loss_backward_shape(TensorMetaRef grad_output, TensorMetaRef input,
                                   TensorMetaRef target, const OptionalTensorMetaRef& weight,
                                   int64_t reduction, int64_t ignore_index) {
  constexpr const char* op = "nll_loss_backward";
  const NllShape shape = check_nll(op, input, target, weight, reduction);
  if (reduction == 0) {
    LOOM_CHECK(grad_output.sizes == shape.target_shape.ref(), "[", op,
               "] expected grad_output of shape ", shape.target_shape.ref(),
               " (the loss per sample, reduction none) but got ", grad_output.sizes);
  } else {
    LOOM_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1, "[", op,
               "] expected a single-element grad_output (a reduced loss) but got shape ",
               grad_output.sizes);
  }
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(grad_output.dtype == dt, "[", op, "] expected grad_output of dtype ", dt,
                  " (like input) but got ", grad_output.dtype);
  return TensorMeta(input.sizes, dt);
}

namespace {

// input: logits (C), (N, C) or (N, C, d1, ...). target: class indices (the shape of input without
// the class dim) or class probabilities (the shape of input). Decomposes into log_softmax, nll_loss
// and pointwise ops/sums, following PyTorch's cross_entropy_loss (LossNLL.cpp) term by term.
Tensor cross_entropy_kernel(const Tensor& input, const Tensor& target,
                            const std::optional<Tensor>& weight, int64_t reduction,
                            int64_t ignore_index, double label_smoothing) {
  check_defined(input, "cross_entropy", "input");
  check_defined(target, "cross_entropy", "target");
  check_reduction("cross_entropy", reduction);
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "[cross_entropy] label_smoothing "
             "must be between 0.0 and 1.0 but got ",
             label_smoothing);
  LOOM_CHECK(input.dim() >= 1,
             "[cross_entropy] expected input of shape (C), (N, C) or "
             "(N, C, d1, ...) but got a 0-dim tensor");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  check_class_weight("cross_entropy", weight, input, classes);
  // The weight shaped to broadcast along the class dim.
  Tensor w;
  if (has(weight)) {
    DimVector ws(static_cast<size_t>(input.dim()), 1);
    ws[static_cast<size_t>(class_dim)] = classes;
    w = reshape(*weight, ws);
  }
  // (N, V) logits with class indices and a plain mean: the fused kernel, which never writes the
  // (N, V) log-probabilities (Note [Fused cross-entropy] in fused_loss.cpp). float64 keeps the
  // composition (the fused kernel keeps its log-sum-exp in float32).
  const DType dt = input.dtype();
  if (input.dim() == 2 && target.dim() == 1 && target.dtype() == kInt64 && reduction == 1 &&
      !has(weight) && (dt == kFloat32 || dt == kBFloat16 || dt == kFloat16) &&
      (input.is_cpu() || input.is_cuda()) && target.device() == input.device()) {
    // The loss comes in float32 for 16-bit logits; cross_entropy returns their dtype, as PyTorch.
    return std::get<0>(_fused_cross_entropy(input, target, ignore_index, label_smoothing)).to(dt);
  }
  const Tensor logp = log_softmax(input, class_dim, input.dtype());

  if (target.sizes() == input.sizes()) {  // class probabilities
    LOOM_CHECK_TYPE(is_floating(target.dtype()),
                    "[cross_entropy] a target of the input's shape "
                    "holds class probabilities and must be floating, but got ",
                    target.dtype());
    LOOM_CHECK(ignore_index < 0,
               "[cross_entropy] ignore_index is not supported for class-"
               "probability targets (got ",
               ignore_index, ")");
    Tensor p = target;
    if (label_smoothing > 0.0) {
      p = add(mul(target, 1.0 - label_smoothing), label_smoothing / static_cast<double>(classes));
    }
    Tensor terms = mul(logp, p);
    if (w.defined()) terms = mul(terms, w);
    if (reduction == 0) return mul(sum(terms, IntArrayRef{class_dim}), -1.0);
    Tensor total = mul(sum(terms), -1.0);
    if (reduction == 2) return total;
    // Mean over samples (numel / C); an empty input gives 0/0 = NaN, as PyTorch.
    const int64_t samples = classes > 0 ? input.numel() / classes : 0;
    return div(total, static_cast<double>(samples));
  }

  Tensor nll = nll_loss(logp, target, weight, static_cast<Reduction>(reduction), ignore_index);
  if (label_smoothing == 0.0) return nll;
  // Smoothing spreads label_smoothing of the target mass uniformly over the classes: its term is
  // the (weighted) sum of -log p over classes, zero where the target is ignored.
  const Tensor ignored = eq(target, ignore_index);
  Tensor smooth = mul(sum(w.defined() ? mul(logp, w) : logp, IntArrayRef{class_dim}), -1.0);
  smooth = masked_fill(smooth, ignored, 0.0);
  Tensor ret;
  if (reduction == 0) {
    ret = smooth;
  } else if (reduction == 2) {
    ret = sum(smooth);
  } else if (w.defined()) {
    // Normalised by the summed weights of the non-ignored targets, like nll_loss's mean.
    Tensor safe_target = masked_fill(target, ignored, 0);
    Tensor tw = reshape(index_select(*weight, 0, reshape(safe_target, {-1})), target.sizes());
    ret = div(sum(smooth), sum(masked_fill(tw, ignored, 0.0)));
  } else {
    ret = div(sum(smooth), sum(ne(target, ignore_index)));
  }
  return add(mul(nll, 1.0 - label_smoothing),
             mul(ret, label_smoothing / static_cast<double>(classes)));
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "native_layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor)");
  m.def(
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor");
  m.def(
      "native_dropout(Tensor input, float p, bool train, *, Generator? generator=None) -> "
      "(Tensor, Tensor)");
  m.def("dropout(Tensor input, float p, bool train, *, Generator? generator=None) -> Tensor");
  m.def(
      "nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, "
      "int ignore_index=-100) -> Tensor");
  m.def(
      "cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, "
      "int ignore_index=-100, float label_smoothing=0.0) -> Tensor");
  m.def(
      "native_layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, "
      "Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool grad_input_mask, "
      "bool grad_weight_mask, bool grad_bias_mask) -> (Tensor, Tensor, Tensor)");
  m.def("native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor");
  m.def(
      "nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, "
      "int reduction, int ignore_index) -> Tensor");
  MetaKernel<&native_layer_norm_shape>::register_meta(m, "native_layer_norm");
  MetaKernel<&native_layer_norm_backward_shape>::register_meta(m, "native_layer_norm_backward");
  MetaKernel<&native_dropout_shape>::register_meta(m, "native_dropout");
  m.impl("native_dropout_backward", DispatchKey::Meta,
         MetaKernel<&native_dropout_backward_shape>::run);
  MetaKernel<&nll_loss_shape>::register_meta(m, "nll_loss");
  MetaKernel<&nll_loss_backward_shape>::register_meta(m, "nll_loss_backward");
  m.impl("layer_norm", DispatchKey::CompositeImplicit, layer_norm_kernel);
  m.impl("dropout", DispatchKey::CompositeImplicit, dropout_kernel);
  m.impl("cross_entropy", DispatchKey::CompositeImplicit, cross_entropy_kernel);
}

Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  LOOM_CALL_OP("loom::layer_norm",
               Tensor(const Tensor&, IntArrayRef, const std::optional<Tensor>&,
                      const std::optional<Tensor>&, double),
               input, normalized_shape, weight, bias, eps);
}
std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input,
                                                     IntArrayRef normalized_shape,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias,
                                                     double eps) {
  using Sig =
      std::tuple<Tensor, Tensor, Tensor>(const Tensor&, IntArrayRef, const std::optional<Tensor>&,
                                         const std::optional<Tensor>&, double);
  LOOM_CALL_OP("loom::native_layer_norm", Sig, input, normalized_shape, weight, bias, eps);
}
Tensor dropout(const Tensor& input, double p, bool train, const std::optional<Generator>& gen) {
  LOOM_CALL_OP("loom::dropout",
               Tensor(const Tensor&, double, bool, const std::optional<Generator>&), input, p,
               train, gen);
}
std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, bool train,
                                          const std::optional<Generator>& gen) {
  using Sig =
      std::tuple<Tensor, Tensor>(const Tensor&, double, bool, const std::optional<Generator>&);
  LOOM_CALL_OP("loom::native_dropout", Sig, input, p, train, gen);
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                Reduction reduction, int64_t ignore_index) {
  LOOM_CALL_OP("loom::nll_loss",
               Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t, int64_t),
               input, target, weight, static_cast<int64_t>(reduction), ignore_index);
}
Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                     Reduction reduction, int64_t ignore_index, double label_smoothing) {
  LOOM_CALL_OP(
      "loom::cross_entropy",
      Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t, int64_t, double),
      input, target, weight, static_cast<int64_t>(reduction), ignore_index, label_smoothing);
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, IntArrayRef normalized_shape, const Tensor& mean,
    const Tensor& rstd, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
    std::array<bool, 3> output_mask) {
  using Sig = std::tuple<Tensor, Tensor, Tensor>(
      const Tensor&, const Tensor&, IntArrayRef, const Tensor&, const Tensor&,
      const std::optional<Tensor>&, const std::optional<Tensor>&, bool, bool, bool);
  LOOM_CALL_OP("loom::native_layer_norm_backward", Sig, grad_out, input, normalized_shape, mean,
               rstd, weight, bias, output_mask[0], output_mask[1], output_mask[2]);
}
Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask, double scale) {
  LOOM_CALL_OP("loom::native_dropout_backward", Tensor(const Tensor&, const Tensor&, double),
               grad_output, mask, scale);
}
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const std::optional<Tensor>& weight, Reduction reduction,
                         int64_t ignore_index) {
  using Sig = Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&,
                     int64_t, int64_t);
  LOOM_CALL_OP("loom::nll_loss_backward", Sig, grad_output, self, target, weight,
               static_cast<int64_t>(reduction), ignore_index);
}

}  // namespace loom
