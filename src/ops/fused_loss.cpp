// The fused cross-entropy (loom::_fused_cross_entropy and its backward): schemas, shape functions,
// public functions and the derivative. The CPU loops are in cpu/fused_loss_kernels.cpp, the CUDA
// ones in cuda/fused_loss_kernels.cu; cross_entropy (nn.cpp) calls it when it applies.
//
// Note [Fused cross-entropy]
//   cross_entropy over (N, V) logits with class-index targets, mean reduction and no class weight
//   is, per non-ignored row i with target t and lse_i = log sum_c exp(x_ic),
//     loss_i = (1 - s) (lse_i - x_it) + (s / V) sum_c (lse_i - x_ic)      (s: label_smoothing)
//   and loss = sum_i loss_i / count (count: the rows not ignored; 0/0 = NaN when all are, as
//   PyTorch's mean). Its gradient is
//     d loss / d x_ic = g / count * (softmax_ic - (1 - s) [c == t] - s / V),  zero on ignored rows.
//   The composition (log_softmax + nll_loss) writes an (N, V) log-probability tensor and reads it
//   back, twice more in backward; at V = 50304 that tensor is as large as the logits. The fused
//   forward reads each row once, keeping a running maximum and a running sum of exp(x - max) in
//   float (rescaled when the maximum grows), plus x_it and sum_c x_ic, and keeps only lse (N
//   floats) for backward. The backward reads each row once more and writes the gradient directly in
//   the logits' dtype: no float copy of the logits, no (N, V) intermediate. 16-bit logits are
//   computed in float and give a float32 loss (cross_entropy casts it back to their dtype; under
//   autocast it stays float32 without a float32 copy of the logits: Note [Autocast] in
//   autograd/autocast.cpp); the per-row losses are summed in double in row order, so results do not
//   depend on the thread count. Bad targets raise IndexError naming the row and the value before
//   anything is written.
#include <cmath>

#include "loom/derivatives.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"

namespace loom {
namespace {

void check_ce_args(const char* op, TensorMetaRef logits, TensorMetaRef target,
                   double label_smoothing) {
  LOOM_CHECK(logits.dim() == 2, "[", op, "] expected logits of shape (N, V) but got ",
             logits.sizes);
  LOOM_CHECK_TYPE(is_floating(logits.dtype), "[", op, "] expected floating logits but got ",
                  logits.dtype);
  LOOM_CHECK_TYPE(target.dtype == kInt64, "[", op,
                  "] expected target of class indices of dtype int64 but got ", target.dtype);
  LOOM_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), "[", op,
             "] expected target of shape [", logits.size(0), "] for logits of shape ", logits.sizes,
             " but got ", target.sizes);
  LOOM_CHECK(target.device == logits.device, "[", op, "] expected target on ", logits.device,
             " (like logits) but it is on ", target.device);
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "[", op,
             "] label_smoothing must be between 0.0 and 1.0 but got ", label_smoothing);
}

}  // namespace

std::array<TensorMeta, 2> fused_cross_entropy_shape(TensorMetaRef logits, TensorMetaRef target,
                                                    int64_t /*ignore_index*/,
                                                    double label_smoothing) {
  check_ce_args("_fused_cross_entropy", logits, target, label_smoothing);
  // The loss and lse in float32 (float64 for float64 logits, which only the CPU kernel takes):
  // 16-bit logits give a float32 loss, summed in float (cross_entropy casts it back to their
  // dtype; autocast keeps it, as PyTorch's autocast returns a float32 loss).
  const DType lse_dtype = logits.dtype == kFloat64 ? kFloat64 : kFloat32;
  return {TensorMeta(IntArrayRef(), lse_dtype), TensorMeta({logits.size(0)}, lse_dtype)};
}

TensorMeta fused_cross_entropy_backward_shape(TensorMetaRef grad, TensorMetaRef logits,
                                              TensorMetaRef target, TensorMetaRef lse,
                                              int64_t /*ignore_index*/, double label_smoothing) {
  constexpr const char* op = "_fused_cross_entropy_backward";
  check_ce_args(op, logits, target, label_smoothing);
  LOOM_CHECK(grad.numel() == 1 && grad.dim() <= 1, "[", op,
             "] expected a single-element grad (the mean loss's) but got shape ", grad.sizes);
  LOOM_CHECK(grad.device == logits.device, "[", op, "] expected grad on ", logits.device,
             " (like logits) but it is on ", grad.device);
  const DType lse_dtype = logits.dtype == kFloat64 ? kFloat64 : kFloat32;
  LOOM_CHECK(lse.dim() == 1 && lse.size(0) == logits.size(0) && lse.dtype == lse_dtype, "[", op,
             "] expected lse of shape [", logits.size(0), "] and dtype ", lse_dtype, " but got ",
             lse.sizes, " ", lse.dtype);
  LOOM_CHECK(lse.device == logits.device, "[", op, "] expected lse on ", logits.device,
             " (like logits) but it is on ", lse.device);
  return TensorMeta(logits.sizes, logits.dtype);
}

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "_fused_cross_entropy(Tensor logits, Tensor target, int ignore_index=-100, "
      "float label_smoothing=0.0) -> (Tensor, Tensor)");
  m.def(
      "_fused_cross_entropy_backward(Tensor grad, Tensor logits, Tensor target, Tensor lse, "
      "int ignore_index=-100, float label_smoothing=0.0) -> Tensor");
  MetaKernel<&fused_cross_entropy_shape>::register_meta(m, "_fused_cross_entropy");
  MetaKernel<&fused_cross_entropy_backward_shape>::register_meta(m,
                                                                 "_fused_cross_entropy_backward");
}

std::tuple<Tensor, Tensor> _fused_cross_entropy(const Tensor& logits, const Tensor& target,
                                                int64_t ignore_index, double label_smoothing) {
  check_defined(logits, "_fused_cross_entropy", "logits");
  check_defined(target, "_fused_cross_entropy", "target");
  using Sig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, double);
  LOOM_CALL_OP("loom::_fused_cross_entropy", Sig, logits, target, ignore_index, label_smoothing);
}

Tensor _fused_cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                                     const Tensor& lse, int64_t ignore_index,
                                     double label_smoothing) {
  using Sig = Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double);
  LOOM_CALL_OP("loom::_fused_cross_entropy_backward", Sig, grad, logits, target, lse, ignore_index,
               label_smoothing);
}

// ---- derivatives ----
namespace {
using autograd::BackwardContext;
using autograd::GradList;

// The loss's gradient by the fused kernel; lse (output 1) is not differentiated (it is a by-product
// kept for backward). With create_graph the gradient is written with differentiable operators
// (softmax of the logits), so it can be differentiated again.
GradList fused_cross_entropy_derivative(const BackwardContext& c) {
  const Tensor& g = c.grad(0);
  GradList r(2);
  if (!c.needs(0) || !g.defined()) return r;
  const Tensor x = c.input(0), t = c.input(1);
  const int64_t ignore = c.int_arg(2);
  const double s = c.double_arg(3);
  if (!c.create_graph()) {
    r[0] = _fused_cross_entropy_backward(g, x, t, c.output(1), ignore, s);
    return r;
  }
  const int64_t v = x.size(1);
  const Tensor keep = ne(t, ignore);
  const Tensor safe_t = masked_fill(t, logical_not(keep), 0);
  Tensor delta = mul(one_hot(safe_t, v).to(x.dtype()), 1.0 - s);
  if (s > 0.0) delta = add(delta, s / static_cast<double>(v));
  const Tensor rows = unsqueeze(keep.to(x.dtype()), 1);
  const Tensor per = mul(sub(softmax(x, 1, x.dtype()), delta), rows);
  r[0] = mul(per, div(g, sum(keep).to(x.dtype()))).to(x.dtype());
  return r;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("_fused_cross_entropy", autograd::saves({0, 1}, {1}), fused_cross_entropy_derivative);
  // Reached from the derivative above only without create_graph (which writes the composition
  // instead), so its own outputs never need a gradient.
  m.nondifferentiable("_fused_cross_entropy_backward");
}

}  // namespace loom
