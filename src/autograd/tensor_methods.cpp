// The autograd methods of Tensor, forwarding to the autograd layer.
#include "loom/autograd.h"

namespace loom {

// Each checks definedness first (Note [undefined tensors] in loom/tensor.h), naming the method.
bool Tensor::requires_grad() const {
  checked("Tensor::requires_grad");
  return autograd::requires_grad(*this);
}
const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  checked("Tensor::requires_grad_");
  autograd::set_requires_grad(*this, requires_grad);
  return *this;
}
bool Tensor::is_leaf() const {
  checked("Tensor::is_leaf");
  return autograd::is_leaf(*this);
}
Tensor Tensor::grad() const {
  checked("Tensor::grad");
  return autograd::grad(*this);
}
void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph,
                      bool create_graph) const {
  checked("Tensor::backward");
  autograd::backward({*this},
                     gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph, create_graph);
}
Tensor Tensor::detach() const {
  checked("Tensor::detach");
  return autograd::detach(*this);
}
void Tensor::retain_grad() const {
  checked("Tensor::retain_grad");
  autograd::retain_grad(*this);
}

}  // namespace loom
