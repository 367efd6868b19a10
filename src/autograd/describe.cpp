// A printable view of a backward graph (for `loom autograd` and debugging).
#include <sstream>
#include <unordered_set>

#include "autograd/autograd_meta.h"

namespace loom::autograd {
namespace {

void describe(std::ostringstream& os, const Node* n, int depth,
              std::unordered_set<const Node*>& seen) {
  os << std::string(static_cast<size_t>(depth) * 2, ' ');
  const bool acc = dynamic_cast<const AccumulateGrad*>(n) != nullptr;
  if (acc) {
    const Tensor v = static_cast<const AccumulateGrad*>(n)->variable();
    if (!v.defined()) {
      os << "AccumulateGrad (leaf freed)\n";
    } else {
      os << "AccumulateGrad (leaf " << v.shape_str() << " " << dtype_name(v.dtype()) << ")\n";
    }
    return;
  }
  os << n->name();
  if (!seen.insert(n).second) {
    os << " #" << n->sequence_nr() << " (see above)\n";
    return;
  }
  os << " #" << n->sequence_nr();
  if (!n->forward_op().empty()) os << "  <- " << n->forward_op();
  os << "\n";
  for (const Edge& e : n->next_edges()) {
    if (!e.valid()) continue;
    describe(os, e.fn.get(), depth + 1, seen);
  }
}

}  // namespace

std::string describe_graph(const Tensor& t) {
  std::ostringstream os;
  auto fn = grad_fn(t);
  if (!fn) {
    os << (requires_grad(t) ? "leaf tensor that requires grad\n"
                            : "tensor without autograd history\n");
    return os.str();
  }
  std::unordered_set<const Node*> seen;
  describe(os, fn.get(), 0, seen);
  return os.str();
}

}  // namespace loom::autograd
