// Module: parameter, buffer and child registries; recursive traversal; train/eval; dtype
// conversion; state dicts.
#include <unordered_map>
#include <unordered_set>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/nn.h"

namespace loom::nn {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

}  // namespace

Module::~Module() = default;

Tensor Module::forward(const Tensor&) {
  LOOM_THROW(NotImplementedError, "[", name(), "] has no forward(const Tensor&)");
}

std::string Module::name() const {
  return "Module";
}

void Module::check_new_name(const std::string& name, const char* what) const {
  LOOM_CHECK(!name.empty(), "[", this->name(), "] ", what, " name can't be empty");
  LOOM_CHECK(name.find('.') == std::string::npos, "[", this->name(), "] ", what,
             " name can't contain \".\" (got \"", name, "\")");
  bool taken = false;
  for (const auto& p : params_) taken = taken || p.first == name;
  for (const auto& b : buffers_) taken = taken || b.name == name;
  for (const auto& c : children_) taken = taken || c.first == name;
  LOOM_CHECK(!taken, "[", this->name(), "] attribute \"", name, "\" already exists");
}

size_t Module::add_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name, "parameter");
  LOOM_CHECK(value.defined(), "[", this->name(), "] parameter \"", name,
             "\" is an undefined tensor");
  LOOM_CHECK_TYPE(value.is_floating_point(), "[", this->name(), "] parameter \"", name,
                  "\" must be a floating-point tensor but has dtype ", dtype_name(value.dtype()));
  LOOM_CHECK(autograd::is_leaf(value), "[", this->name(), "] parameter \"", name,
             "\" must be a leaf tensor (it is the output of an operation); pass its detach()");
  value.requires_grad_(requires_grad);
  params_.emplace_back(name, std::move(value));
  return params_.size() - 1;
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  return parameter_at(add_parameter(name, std::move(value), requires_grad));
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  check_new_name(name, "buffer");
  LOOM_CHECK(value.defined(), "[", this->name(), "] buffer \"", name, "\" is an undefined tensor");
  buffers_.push_back(BufferSlot{name, std::move(value), persistent});
  return buffers_.back().value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  LOOM_CHECK(module != nullptr, "[", this->name(), "] module \"", name, "\" is null");
  LOOM_CHECK(module.get() != this, "[", this->name(), "] a module can't be its own child");
  children_.emplace_back(name, std::move(module));
}

const Tensor& Module::parameter(std::string_view name) const {
  for (const auto& p : params_) {
    if (p.first == name) return p.second;
  }
  LOOM_THROW(ValueError, "[", this->name(), "] has no parameter \"", std::string(name), "\"");
}

const Tensor& Module::buffer(std::string_view name) const {
  for (const auto& b : buffers_) {
    if (b.name == name) return b.value;
  }
  LOOM_THROW(ValueError, "[", this->name(), "] has no buffer \"", std::string(name), "\"");
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) const {
  out.emplace_back(prefix, const_cast<Module*>(this));
  for (const auto& [name, child] : children_) child->collect_modules(join(prefix, name), out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  auto add_own = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, t] : m.params_) {
      if (seen.insert(t.impl()).second) out.emplace_back(join(prefix, name), t);
    }
  };
  if (!recurse) {
    add_own("", *this);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) add_own(prefix, *m);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(std::move(p.second));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  auto add_own = [&](const std::string& prefix, const Module& m) {
    for (const auto& b : m.buffers_) {
      if (seen.insert(b.value.impl()).second) out.emplace_back(join(prefix, b.name), b.value);
    }
  };
  if (!recurse) {
    add_own("", *this);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) add_own(prefix, *m);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& b : named_buffers(recurse)) out.push_back(std::move(b.second));
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad(bool set_to_none) {
  autograd::zero_grads(parameters(), set_to_none);
}

Module& Module::to(DType dtype) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    if (!p.is_floating_point() || p.dtype() == dtype) continue;
    LOOM_CHECK_TYPE(is_floating(dtype), "[", this->name(),
                    "] can't convert floating-point parameter \"", name, "\" to ",
                    dtype_name(dtype));
    Tensor converted = p.detach().to(dtype);
    converted.requires_grad_(p.requires_grad());
    Tensor g = p.grad();
    if (g.defined()) autograd::set_grad(converted, g.to(dtype));
    p = std::move(converted);
  }
  for (auto& b : buffers_) {
    if (b.value.is_floating_point() && is_floating(dtype)) b.value = b.value.to(dtype);
  }
  for (auto& c : children_) c.second->to(dtype);
  return *this;
}

Module& Module::to(Device device) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    if (p.device() == device) continue;
    Tensor moved = p.detach().to(device);
    moved.requires_grad_(p.requires_grad());
    Tensor g = p.grad();
    if (g.defined()) autograd::set_grad(moved, g.to(device));
    p = std::move(moved);
  }
  for (auto& b : buffers_) {
    if (b.value.defined() && b.value.device() != device) b.value = b.value.to(device);
  }
  for (auto& c : children_) c.second->to(device);
  return *this;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (const auto& [prefix, m] : named_modules()) {
    for (const auto& [name, t] : m->params_) out.emplace_back(join(prefix, name), t.detach());
    for (const auto& b : m->buffers_) {
      if (b.persistent) out.emplace_back(join(prefix, b.name), b.value);
    }
  }
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [key, t] : state) {
    LOOM_CHECK(given.emplace(key, &t).second, "[load_state_dict] key \"", key, "\" appears twice");
  }
  LoadStateDictResult result;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (destination, source)
  std::unordered_set<std::string> expected;
  for (const auto& [key, dst] : state_dict()) {
    expected.insert(key);
    auto it = given.find(key);
    if (it == given.end()) {
      result.missing_keys.push_back(key);
      continue;
    }
    const Tensor& src = *it->second;
    LOOM_CHECK(src.defined(), "[load_state_dict] the tensor for \"", key, "\" is undefined");
    LOOM_CHECK(src.sizes() == dst.sizes(), "[load_state_dict] size mismatch for \"", key,
               "\": the state dict has shape ", src.shape_str(), ", the module expects ",
               dst.shape_str());
    LOOM_CHECK_TYPE(src.dtype() == dst.dtype(), "[load_state_dict] dtype mismatch for \"", key,
                    "\": the state dict has ", dtype_name(src.dtype()), ", the module expects ",
                    dtype_name(dst.dtype()));
    copies.emplace_back(dst, &src);
  }
  for (const auto& [key, t] : state) {
    if (!expected.count(key)) result.unexpected_keys.push_back(key);
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    LOOM_THROW(ValueError,
               "[load_state_dict] the state dict does not match the module: missing keys [",
               join_keys(result.missing_keys), "], unexpected keys [",
               join_keys(result.unexpected_keys), "]");
  }
  autograd::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(*src);
  return result;
}

LoadStateDictResult Module::load_state_dict(const std::map<std::string, Tensor>& state,
                                            bool strict) {
  return load_state_dict(StateDict(state.begin(), state.end()), strict);
}

}  // namespace loom::nn
