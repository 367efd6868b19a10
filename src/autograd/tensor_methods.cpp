// The autograd methods of Tensor, forwarding to the autograd layer.
#include "loom/autograd.h"

namespace loom {

bool Tensor::requires_grad() const { return autograd::requires_grad(*this); }
const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  autograd::set_requires_grad(*this, requires_grad);
  return *this;
}
bool Tensor::is_leaf() const { return autograd::is_leaf(*this); }
Tensor Tensor::grad() const { return autograd::grad(*this); }
void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph, create_graph);
}
Tensor Tensor::detach() const { return autograd::detach(*this); }
void Tensor::retain_grad() const { autograd::retain_grad(*this); }

}  // namespace loom
