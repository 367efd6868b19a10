// Losses: cross-entropy (the cross_entropy operator) and mean squared error (composed of operators,
// so autograd differentiates it with sub, mul and the reduction).
#include "loom/error.h"
#include "loom/nn.h"

namespace loom::nn {

Tensor cross_entropy_loss(const Tensor& input, const Tensor& target,
                          const CrossEntropyOptions& options) {
  LOOM_CHECK(input.defined() && target.defined(),
             "[cross_entropy_loss] input and target must be "
             "defined tensors");
  LOOM_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
             "[cross_entropy_loss] label_smoothing must be between 0.0 and 1.0 but got ",
             options.label_smoothing);
  return cross_entropy(input, target, options.weight, options.reduction, options.ignore_index,
                       options.label_smoothing);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  LOOM_CHECK(input.defined() && target.defined(),
             "[mse_loss] input and target must be defined "
             "tensors");
  LOOM_CHECK(input.sizes() == target.sizes(), "[mse_loss] input shape ", input.shape_str(),
             " and target shape ", target.shape_str(), " differ (mse_loss does not broadcast)");
  LOOM_CHECK_TYPE(input.dtype() == target.dtype(), "[mse_loss] input dtype ",
                  dtype_name(input.dtype()), " and target dtype ", dtype_name(target.dtype()),
                  " differ");
  LOOM_CHECK_TYPE(input.is_floating_point(), "[mse_loss] expected floating-point tensors but got ",
                  dtype_name(input.dtype()));
  Tensor diff = sub(input, target);
  Tensor sq = mul(diff, diff);
  switch (reduction) {
    case Reduction::None:
      return sq;
    case Reduction::Sum:
      return sum(sq);
    case Reduction::Mean:
      return mean(sq);
  }
  LOOM_THROW(ValueError, "[mse_loss] unknown reduction ", static_cast<int64_t>(reduction));
}

}  // namespace loom::nn
