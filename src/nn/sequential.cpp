// Sequential: a chain of child modules.
#include <string>

#include "nn/check.h"

namespace loom::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  push_back(std::to_string(size()), std::move(module));
}

void Sequential::push_back(const std::string& name, std::shared_ptr<Module> module) {
  add_child(name, std::move(module));
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  LOOM_CHECK_INDEX(i < size(), "[Sequential] index ", i, " is out of range for a Sequential of ",
                   size(), " modules");
  return named_children()[i].second;
}

void Sequential::throw_wrong_type(size_t i) const {
  LOOM_THROW(TypeError, "[Sequential] module ", i, " (", (*this)[i]->name(),
             ") is not of the requested type");
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : named_children()) x = child->forward(x);
  return x;
}

}  // namespace loom::nn
