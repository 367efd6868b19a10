// SGD with momentum, dampening, Nesterov momentum and weight decay (torch.optim.SGD).
#include <cmath>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "optim/fused_step.h"

namespace loom::optim {
namespace {

std::vector<std::pair<std::string, double>> to_options(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The operator sequence of torch.optim.SGD's single-tensor path (any dtype or layout).
void sgd_step_ops(const Tensor& p, const Tensor& grad, ParamState& st,
                  const detail::SGDStepArgs& a) {
  Tensor d = a.maximize ? neg(grad) : grad;
  if (a.weight_decay != 0.0) d = add(d, p, a.weight_decay);
  if (a.momentum != 0.0) {
    Tensor* buf = st.find("momentum_buffer");
    if (!buf || !buf->defined()) {
      st.set("momentum_buffer", clone(d).detach());
      buf = st.find("momentum_buffer");
    } else {
      buf->mul_(a.momentum);
      buf->add_(d, 1.0 - a.dampening);
    }
    d = a.nesterov ? add(d, *buf, a.momentum) : *buf;
  }
  p.add_(d, -a.lr);
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) : defaults_(options) {
  add_group(std::move(params), to_options(options));
}

void SGD::add_param_group(std::vector<Tensor> params, const SGDOptions& options) {
  add_group(std::move(params), to_options(options));
}

void SGD::check_options(const std::vector<std::pair<std::string, double>>& options,
                        const std::string& where) const {
  ParamGroup g;
  g.options = options;
  const double lr = g.get("lr"), momentum = g.get("momentum"), dampening = g.get("dampening");
  const double wd = g.get("weight_decay"), nesterov = g.get("nesterov");
  LOOM_CHECK(lr >= 0.0 && std::isfinite(lr), where, "invalid learning rate: lr = ", lr,
             " (expected >= 0)");
  LOOM_CHECK(momentum >= 0.0 && std::isfinite(momentum), where,
             "invalid momentum value: momentum = ", momentum, " (expected >= 0)");
  LOOM_CHECK(std::isfinite(dampening), where, "invalid dampening value: dampening = ", dampening);
  LOOM_CHECK(wd >= 0.0 && std::isfinite(wd), where,
             "invalid weight_decay value: weight_decay = ", wd, " (expected >= 0)");
  for (const char* flag : {"nesterov", "maximize"}) {
    const double f = g.get(flag);
    LOOM_CHECK(f == 0.0 || f == 1.0, where, flag, " = ", f, " (expected 0 or 1)");
  }
  LOOM_CHECK(nesterov == 0.0 || (momentum > 0.0 && dampening == 0.0), where,
             "nesterov momentum requires a momentum > 0 and zero dampening (got momentum=",
             momentum, ", dampening=", dampening, ")");
}

bool SGD::is_state_name(std::string_view name) const {
  return name == "momentum_buffer";
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (const ParamGroup& group : param_groups()) {
    detail::SGDStepArgs a{};
    a.lr = group.lr();
    a.momentum = group.get("momentum");
    a.dampening = group.get("dampening");
    a.weight_decay = group.get("weight_decay");
    a.nesterov = group.get("nesterov") != 0.0;
    a.maximize = group.get("maximize") != 0.0;
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ParamState& st = mutable_state(p);
      Tensor buf;
      a.first = false;
      if (a.momentum != 0.0) {
        const Tensor* existing = st.find("momentum_buffer");
        if (existing && existing->defined()) {
          buf = *existing;
        } else {
          buf = empty_like(p);
          a.first = true;
        }
      }
      if (detail::sgd_step_fused(p, grad, buf, a)) {
        if (a.first) st.set("momentum_buffer", buf);
        continue;
      }
      sgd_step_ops(p, grad, st, a);
    }
  }
  memory::mark_step();  // a step marker for allocation recordings (loom/memory/alloc_context.h)
}

}  // namespace loom::optim
