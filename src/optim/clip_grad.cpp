// Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_).
#include <cmath>
#include <limits>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/optim.h"

namespace loom::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  LOOM_CHECK(!std::isnan(norm_type), "[clip_grad_norm_] norm_type must not be NaN");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined()) grads.push_back(g.detach());
  }
  if (grads.empty()) return 0.0;
  const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  // Per-gradient norms in each gradient's dtype, then the norm of those norms (as PyTorch: the same
  // value as the norm of all gradients concatenated). Mixed dtypes are combined in the widest.
  std::vector<Tensor> norms;
  DType common = grads[0].dtype();
  for (const Tensor& g : grads) {
    norms.push_back(inf_norm ? amax(abs(g)) : norm(g, norm_type));
    common = promote_types(common, g.dtype());
  }
  for (Tensor& n : norms) n = n.to(common);
  Tensor all = stack(norms);
  const double total = (inf_norm ? amax(all) : norm(all, norm_type)).item().to_double();
  if (error_if_nonfinite && !std::isfinite(total)) {
    LOOM_THROW(ValueError, "[clip_grad_norm_] the total norm of order ", norm_type,
               " of the gradients is non-finite (", total, "), so it cannot be clipped");
  }
  // PyTorch multiplies by min(coef, 1) unconditionally; multiplying by 1 changes nothing, so skip
  // it (a NaN coefficient still propagates, as there).
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1.0)) {
    for (const Tensor& g : grads) g.mul_(coef);
  }
  return total;
}

}  // namespace loom::optim
