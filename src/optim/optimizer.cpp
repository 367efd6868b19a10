// Optimizer base: parameter groups, per-parameter state, zero_grad, and the flat state dict.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/optim.h"

namespace loom::optim {

// ---- OptimizerState, ParamGroup, ParamState ----

const Tensor* OptimizerState::find_tensor(std::string_view key) const {
  for (const auto& [k, t] : tensors) {
    if (k == key) return &t;
  }
  return nullptr;
}

std::optional<double> OptimizerState::find_scalar(std::string_view key) const {
  for (const auto& [k, v] : scalars) {
    if (k == key) return v;
  }
  return std::nullopt;
}

bool ParamGroup::has(std::string_view key) const {
  for (const auto& [k, v] : options) {
    if (k == key) return true;
  }
  return false;
}

double ParamGroup::get(std::string_view key) const {
  for (const auto& [k, v] : options) {
    if (k == key) return v;
  }
  LOOM_THROW(ValueError, "[optim] parameter group has no option \"", std::string(key), "\"");
}

void ParamGroup::set(std::string_view key, double value) {
  for (auto& [k, v] : options) {
    if (k == key) {
      v = value;
      return;
    }
  }
  options.emplace_back(std::string(key), value);
}

Tensor* ParamState::find(std::string_view name) {
  for (auto& [k, t] : tensors) {
    if (k == name) return &t;
  }
  return nullptr;
}

const Tensor* ParamState::find(std::string_view name) const {
  return const_cast<ParamState*>(this)->find(name);
}

void ParamState::set(std::string_view name, Tensor value) {
  if (Tensor* t = find(name)) {
    *t = std::move(value);
  } else {
    tensors.emplace_back(std::string(name), std::move(value));
  }
}

// ---- Optimizer ----

Optimizer::~Optimizer() = default;

void Optimizer::add_group(std::vector<Tensor> params,
                          std::vector<std::pair<std::string, double>> options) {
  LOOM_CHECK(!params.empty(), "[", name(), "] got an empty parameter list");
  std::unordered_set<const TensorImpl*> existing, fresh;
  for (const auto& g : groups_) {
    for (const auto& p : g.params) existing.insert(p.impl());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    LOOM_CHECK(p.defined(), "[", name(), "] parameter ", i, " is an undefined tensor");
    LOOM_CHECK_TYPE(p.is_floating_point(), "[", name(),
                    "] can only optimize floating-point tensors, "
                    "but parameter ",
                    i, " has dtype ", dtype_name(p.dtype()));
    LOOM_CHECK(autograd::is_leaf(p), "[", name(), "] can't optimize a non-leaf tensor (parameter ",
               i, ", shape ", p.shape_str(), ")");
    LOOM_CHECK(!existing.count(p.impl()), "[", name(), "] parameter ", i, " (shape ", p.shape_str(),
               ") already is in another parameter group");
    LOOM_CHECK(fresh.insert(p.impl()).second, "[", name(), "] parameter ", i, " (shape ",
               p.shape_str(), ") appears twice in the parameter list");
  }
  std::string where = "[";
  where += name();
  where += "] ";
  check_options(options, where);
  ParamGroup g;
  g.params = std::move(params);
  g.options = std::move(options);
  groups_.push_back(std::move(g));
}

void Optimizer::check_options(const std::vector<std::pair<std::string, double>>&,
                              const std::string&) const {}

ParamState& Optimizer::mutable_state(const Tensor& param) {
  return state_[param.impl()];
}

const ParamState& Optimizer::state(const Tensor& param) const {
  static const ParamState kEmpty;
  auto it = state_.find(param.impl());
  return it == state_.end() ? kEmpty : it->second;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& group : groups_) autograd::zero_grads(group.params, set_to_none);
}

namespace {
std::string group_key(size_t g, const std::string& name) {
  return "param_groups." + std::to_string(g) + "." + name;
}
std::string state_key(size_t i, const std::string& name) {
  return "state." + std::to_string(i) + "." + name;
}
}  // namespace

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    out.scalars.emplace_back(group_key(g, "num_params"),
                             static_cast<double>(groups_[g].params.size()));
    for (const auto& [k, v] : groups_[g].options) out.scalars.emplace_back(group_key(g, k), v);
    for (const Tensor& p : groups_[g].params) {
      for (const auto& [k, t] : state(p).tensors) {
        if (t.defined()) out.tensors.emplace_back(state_key(index, k), t);
      }
      ++index;
    }
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& st) {
  std::string who = "[";
  (who += name()) += ".load_state_dict] ";
  // Validate the groups and hyperparameters.
  std::unordered_set<std::string> known_scalars;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string k = group_key(g, "num_params");
    auto n = st.find_scalar(k);
    LOOM_CHECK(n.has_value(), who, "the state has no \"", k,
               "\" (it has fewer parameter groups than "
               "this optimizer's ",
               groups_.size(), ")");
    LOOM_CHECK(*n == static_cast<double>(groups_[g].params.size()), who, "parameter group ", g,
               " has ", groups_[g].params.size(), " parameters but the state's has ", *n);
    known_scalars.insert(k);
    for (const auto& [name, v] : groups_[g].options) known_scalars.insert(group_key(g, name));
    known_scalars.insert(group_key(g, "initial_lr"));
  }
  for (const auto& [k, v] : st.scalars) {
    LOOM_CHECK(known_scalars.count(k), who, "unexpected key \"", k,
               "\" (a different optimizer, or "
               "more parameter groups than this optimizer's ",
               groups_.size(), ")");
  }
  // Validate the per-parameter state and prepare the copies.
  std::vector<const Tensor*> params;
  for (const auto& g : groups_) {
    for (const Tensor& p : g.params) params.push_back(&p);
  }
  struct Pending {
    const Tensor* param;
    std::string name;
    Tensor value;
  };
  std::vector<Pending> pending;
  for (const auto& [key, t] : st.tensors) {
    // "state.<index>.<name>"
    size_t index = 0, pos = 0;
    const bool prefix_ok = key.rfind("state.", 0) == 0;
    const size_t dot = prefix_ok ? key.find('.', 6) : std::string::npos;
    bool ok = dot != std::string::npos && dot > 6;
    for (size_t c = 6; ok && c < dot; ++c) ok = key[c] >= '0' && key[c] <= '9';
    if (ok) {
      index = std::stoul(key.substr(6, dot - 6));
      pos = dot + 1;
    }
    LOOM_CHECK(ok && pos < key.size(), who, "unexpected key \"", key,
               "\" (expected state.<param index>.<name>)");
    const std::string sname = key.substr(pos);
    LOOM_CHECK(index < params.size(), who, "key \"", key, "\" refers to parameter ", index,
               " but the optimizer has ", params.size(), " parameters");
    LOOM_CHECK(is_state_name(sname), who, "unexpected key \"", key, "\" (", name(),
               " has no state named \"", sname, "\")");
    LOOM_CHECK(t.defined(), who, "the tensor for \"", key, "\" is undefined");
    const Tensor& p = *params[index];
    Tensor value;
    if (sname == "step") {
      LOOM_CHECK(t.numel() == 1, who, "\"", key, "\" must hold one number but has shape ",
                 t.shape_str());
      const double s = t.item().to_double();
      LOOM_CHECK(s >= 0 && s == std::floor(s), who, "\"", key,
                 "\" must be a non-negative integer but is ", s);
      value = scalar_tensor(static_cast<int64_t>(s), kInt64);
    } else {
      LOOM_CHECK(t.sizes() == p.sizes(), who, "size mismatch for \"", key,
                 "\": the state has shape ", t.shape_str(), ", parameter ", index, " has shape ",
                 p.shape_str());
      LOOM_CHECK_TYPE(t.is_floating_point(), who, "\"", key,
                      "\" must be floating-point but has dtype ", dtype_name(t.dtype()));
      value = loom::to(t, p.options(), /*copy=*/true).contiguous();
    }
    pending.push_back(Pending{&p, sname, std::move(value)});
  }
  // The hyperparameters each group would have, checked as the constructor checks them.
  std::vector<ParamGroup> next_options(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    next_options[g].options = groups_[g].options;
    for (const auto& [k, v] : st.scalars) {
      const std::string prefix = "param_groups." + std::to_string(g) + ".";
      if (k.rfind(prefix, 0) == 0 && k != group_key(g, "num_params")) {
        next_options[g].set(k.substr(prefix.size()), v);
      }
    }
    check_options(next_options[g].options, who + "param_groups." + std::to_string(g) + ": ");
  }
  // Apply.
  for (size_t g = 0; g < groups_.size(); ++g)
    groups_[g].options = std::move(next_options[g].options);
  state_.clear();
  for (auto& pd : pending) mutable_state(*pd.param).set(pd.name, std::move(pd.value));
}

}  // namespace loom::optim
