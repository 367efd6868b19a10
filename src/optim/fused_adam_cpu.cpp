// The CPU kernel of loom::_fused_adam_ (Note [Multi-tensor Adam] in src/ops/fused_adam.cpp): the
// optimizers' fused per-parameter loop (fused_step.cpp) run over the lists. It is registered from
// this layer because that loop belongs to the optimizers; the operator itself is an ops-layer one.
#include <cmath>

#include "loom/dispatch.h"
#include "loom/error.h"
#include "ops/fused_shapes.h"
#include "optim/fused_step.h"

namespace loom {
namespace {

void fused_adam_cpu(TensorList params, TensorList grads, TensorList exp_avgs,
                    TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, double lr, double beta1,
                    double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                    bool decoupled, IntArrayRef steps) {
  check_fused_adam_lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, amsgrad, steps,
                         /*allow_double=*/true);
  LOOM_CHECK(params.empty() || params[0].is_cpu(), "[_fused_adam_] expected CPU tensors but got ",
             params[0].device());
  optim::detail::AdamStepArgs a{};
  a.lr = lr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.weight_decay = weight_decay;
  a.decoupled = decoupled;
  a.maximize = maximize;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto t = static_cast<double>(steps[i]);
    a.step_size = lr / (1.0 - std::pow(beta1, t));
    a.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, t));
    const bool done =
        optim::detail::adam_step_fused(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i],
                                       amsgrad ? max_exp_avg_sqs[i] : Tensor(), a);
    // The checks above admit exactly what the fused loop takes.
    LOOM_INTERNAL_ASSERT(done, "[_fused_adam_] the fused loop refused params[", i, "]");
  }
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("_fused_adam_", fused_adam_cpu);
}

}  // namespace loom
