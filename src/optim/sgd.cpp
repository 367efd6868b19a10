// SGD with momentum, dampening, Nesterov momentum and weight decay (torch.optim.SGD).
#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "optim/fused_step.h"

namespace loom::optim {
namespace {

std::vector<std::pair<std::string, double>> to_options(const SGDOptions& o) {
  LOOM_CHECK(o.lr >= 0.0, "[SGD] invalid learning rate: ", o.lr, " (expected >= 0)");
  LOOM_CHECK(o.momentum >= 0.0, "[SGD] invalid momentum value: ", o.momentum, " (expected >= 0)");
  LOOM_CHECK(o.weight_decay >= 0.0, "[SGD] invalid weight_decay value: ", o.weight_decay,
             " (expected >= 0)");
  LOOM_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "[SGD] nesterov momentum requires a momentum > 0 and zero dampening (got momentum=",
             o.momentum, ", dampening=", o.dampening, ")");
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
