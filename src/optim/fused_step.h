// Fused optimizer updates: one pass over contiguous float32 / float64 CPU data per parameter, with
// the same per-element arithmetic as the operator sequence in torch.optim's single-tensor
// implementations (scalars are rounded to the element type first, as PyTorch's kernels do). Each
// function returns false without touching anything when the tensors do not qualify; callers then
// run the operator sequence.
#pragma once

#include "loom/tensor.h"

namespace loom::optim::detail {

struct SGDStepArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool first;  // the momentum buffer is new: it becomes the (decayed) gradient
};
// buf is undefined when momentum == 0.
bool sgd_step_fused(const Tensor& param, const Tensor& grad, const Tensor& buf,
                    const SGDStepArgs& args);

struct AdamStepArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, maximize;
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};
// max_exp_avg_sq is undefined without amsgrad.
bool adam_step_fused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                     const AdamStepArgs& args);

}  // namespace loom::optim::detail
