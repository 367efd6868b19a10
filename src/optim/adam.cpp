// Adam and AdamW (torch.optim.Adam / AdamW, single-tensor implementation).
#include <cmath>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "optim/fused_step.h"

namespace loom::optim {
namespace {

std::vector<std::pair<std::string, double>> to_options(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas[0]},
          {"beta2", o.betas[1]},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The operator sequence of torch.optim.Adam / AdamW's single-tensor path (any dtype or layout).
void adam_step_ops(const Tensor& p, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor& vmax, const detail::AdamStepArgs& a) {
  Tensor g = a.maximize ? neg(grad) : grad;
  if (a.decoupled) {
    if (a.weight_decay != 0.0) p.mul_(1.0 - a.lr * a.weight_decay);
  } else if (a.weight_decay != 0.0) {
    g = add(g, p, a.weight_decay);
  }
  m.mul_(a.beta1);
  m.add_(g, 1.0 - a.beta1);
  v.mul_(a.beta2);
  v.add_(mul(mul(g, 1.0 - a.beta2), g));
  Tensor vhat = v;
  if (vmax.defined()) {
    maximum_(vmax, v);
    vhat = vmax;
  }
  Tensor denom = div(sqrt(vhat), a.bias_correction2_sqrt);
  add_(denom, a.eps);
  p.add_(div(mul(m, -a.step_size), denom));
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : defaults_(options), decoupled_(decoupled_weight_decay) {
  add_group(std::move(params), to_options(options));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::move(params), options, true) {}

void Adam::add_param_group(std::vector<Tensor> params, const AdamOptions& options) {
  add_group(std::move(params), to_options(options));
}

void Adam::check_options(const std::vector<std::pair<std::string, double>>& options,
                         const std::string& where) const {
  ParamGroup g;
  g.options = options;
  const double lr = g.get("lr"), eps = g.get("eps"), b1 = g.get("beta1"), b2 = g.get("beta2");
  const double wd = g.get("weight_decay");
  LOOM_CHECK(lr >= 0.0 && std::isfinite(lr), where, "invalid learning rate: lr = ", lr,
             " (expected >= 0)");
  LOOM_CHECK(eps >= 0.0 && std::isfinite(eps), where, "invalid epsilon value: eps = ", eps,
             " (expected >= 0)");
  LOOM_CHECK(b1 >= 0.0 && b1 < 1.0, where, "invalid beta parameter at index 0: beta1 = ", b1,
             " (expected in [0, 1))");
  LOOM_CHECK(b2 >= 0.0 && b2 < 1.0, where, "invalid beta parameter at index 1: beta2 = ", b2,
             " (expected in [0, 1))");
  LOOM_CHECK(wd >= 0.0 && std::isfinite(wd), where,
             "invalid weight_decay value: weight_decay = ", wd, " (expected >= 0)");
  for (const char* flag : {"amsgrad", "maximize"}) {
    const double f = g.get(flag);
    LOOM_CHECK(f == 0.0 || f == 1.0, where, flag, " = ", f, " (expected 0 or 1)");
  }
}

bool Adam::is_state_name(std::string_view name) const {
  return name == "step" || name == "exp_avg" || name == "exp_avg_sq" || name == "max_exp_avg_sq";
}

namespace {

// Why the group's tensors cannot take the multi-tensor CUDA step ("" when they can).
std::string fused_refusal(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& states) {
  const Device device = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (p.device() != device) {
      return "its parameters are on more than one device (" + device.str() + " and " +
             p.device().str() + ")";
    }
    if (device.is_cuda() && p.dtype() != kFloat32) {
      return std::string("parameter ") + std::to_string(i) + " has dtype " +
             std::string(dtype_name(p.dtype())) + " (the CUDA kernel takes float32)";
    }
    if (p.dtype() != kFloat32 && p.dtype() != kFloat64) {
      return std::string("parameter ") + std::to_string(i) + " has dtype " +
             std::string(dtype_name(p.dtype()));
    }
    if (!p.is_contiguous() || !grads[i].is_contiguous() || grads[i].dtype() != p.dtype() ||
        grads[i].device() != device) {
      return std::string("parameter ") + std::to_string(i) +
             " or its gradient is not contiguous, or the gradient's dtype or device differs";
    }
  }
  for (const Tensor& t : states) {
    if (t.device() != device || !t.is_contiguous()) {
      return "a state tensor (exp_avg, exp_avg_sq) is on " + t.device().str() +
             " or not contiguous";
    }
  }
  return "";
}

}  // namespace

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (const ParamGroup& group : param_groups()) {
    detail::AdamStepArgs a{};
    a.lr = group.lr();
    a.beta1 = group.get("beta1");
    a.beta2 = group.get("beta2");
    a.eps = group.get("eps");
    a.weight_decay = group.get("weight_decay");
    a.decoupled = decoupled_;
    a.maximize = group.get("maximize") != 0.0;
    const bool amsgrad = group.get("amsgrad") != 0.0;
    // The parameters with a gradient, their state and their step counts after this step.
    std::vector<Tensor> params, grads, ms, vs, vmaxs;
    std::vector<int64_t> steps;
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ParamState& st = mutable_state(p);
      // Lazily created, as PyTorch's state; each entry on its own so a partial state never crashes.
      if (!st.find("step")) st.set("step", scalar_tensor(int64_t{0}, kInt64));
      if (!st.find("exp_avg")) st.set("exp_avg", zeros_like(p));
      if (!st.find("exp_avg_sq")) st.set("exp_avg_sq", zeros_like(p));
      if (amsgrad && !st.find("max_exp_avg_sq")) st.set("max_exp_avg_sq", zeros_like(p));
      const Tensor& step_t = *st.find("step");
      int64_t& step = *step_t.data_ptr<int64_t>();
      step += 1;
      step_t.storage()->bump_version();
      params.push_back(p);
      grads.push_back(grad);
      ms.push_back(*st.find("exp_avg"));
      vs.push_back(*st.find("exp_avg_sq"));
      if (amsgrad) vmaxs.push_back(*st.find("max_exp_avg_sq"));
      steps.push_back(step);
    }
    if (params.empty()) continue;
    // Note [Multi-tensor Adam]: the whole group in one operator call where it applies.
    if (defaults_.fused != false) {
      std::vector<Tensor> states = ms;
      states.insert(states.end(), vs.begin(), vs.end());
      states.insert(states.end(), vmaxs.begin(), vmaxs.end());
      const std::string refusal = fused_refusal(params, grads, states);
      const bool requested = defaults_.fused == true;
      LOOM_CHECK(!requested || refusal.empty(), "[", name(),
                 "] fused=true but a parameter group cannot take the fused step: ", refusal,
                 "; use fused=false (or leave it unset) for this group");
      if (refusal.empty() && (requested || params[0].is_cuda())) {
        _fused_adam_(params, grads, ms, vs, vmaxs, a.lr, a.beta1, a.beta2, a.weight_decay, a.eps,
                     amsgrad, a.maximize, decoupled_, steps);
        continue;
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const auto t = static_cast<double>(steps[i]);
      a.step_size = a.lr / (1.0 - std::pow(a.beta1, t));
      a.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(a.beta2, t));
      const Tensor vmax = amsgrad ? vmaxs[i] : Tensor();
      if (detail::adam_step_fused(params[i], grads[i], ms[i], vs[i], vmax, a)) continue;
      adam_step_ops(params[i], grads[i], ms[i], vs[i], vmax, a);
    }
  }
  memory::mark_step();  // a step marker for allocation recordings (loom/memory/alloc_context.h)
}

}  // namespace loom::optim
