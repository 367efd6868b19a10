// Recording: the Autograd backend fallback that every operator goes through when one of its inputs
// requires grad, and the generic node that runs a registered derivative (the derivative registry is
// in the ops layer, src/ops/derivatives.cpp).
#include <algorithm>
#include <cctype>
#include <mutex>
#include <unordered_map>

#include "autograd/autograd_meta.h"
#include "loom/derivatives.h"
#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::autograd {

// ---- per-operator facts, computed once from the schema ----

namespace {

struct OpInfo {
  std::string name;        // "loom::mul"
  std::string short_name;  // "mul"
  const Derivative* deriv = nullptr;
  size_t nargs = 0;
  size_t nrets = 0;
  std::vector<int> tensor_args;  // positions of Tensor, Tensor? and Tensor[] arguments
  int mutated_arg = -1;          // in-place: the (a!) argument that is not out=
  bool is_out = false;
  int view_of = -1;  // the argument the returns alias (a view op)
};

OpInfo compute_info(const OperatorHandle& op) {
  const FunctionSchema& s = op.schema();
  OpInfo info;
  info.name = s.full_name();
  info.short_name = s.op_name();
  info.nargs = s.arguments.size();
  info.nrets = s.returns.size();
  for (size_t i = 0; i < s.arguments.size(); ++i) {
    const Argument& a = s.arguments[i];
    if (a.type.kind == SchemaType::Kind::Tensor) info.tensor_args.push_back(static_cast<int>(i));
    if (a.is_write) {
      if (a.kwarg_only) {
        info.is_out = true;
      } else if (info.mutated_arg < 0) {
        info.mutated_arg = static_cast<int>(i);
      }
    }
  }
  if (!info.is_out && info.mutated_arg < 0) {
    for (const Argument& r : s.returns) {
      if (r.alias_set.empty()) continue;
      for (size_t i = 0; i < s.arguments.size(); ++i) {
        if (s.arguments[i].alias_set == r.alias_set) info.view_of = static_cast<int>(i);
      }
    }
  }
  info.deriv = find_derivative(info.short_name);
  return info;
}

const OpInfo& op_info(const OperatorHandle& op) {
  // initial-exec: the default TLS model of a shared library calls __tls_get_addr per access.
  thread_local const OperatorEntry* last_entry __attribute__((tls_model("initial-exec"))) = nullptr;
  thread_local const OpInfo* last_info __attribute__((tls_model("initial-exec"))) = nullptr;
  if (op.entry() == last_entry) return *last_info;
  static std::mutex mu;
  static std::unordered_map<const OperatorEntry*, std::unique_ptr<OpInfo>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[op.entry()];
  if (!slot) slot = std::make_unique<OpInfo>(compute_info(op));
  last_entry = op.entry();
  last_info = slot.get();
  return *slot;
}

std::string camel_backward_name(const std::string& op) {
  std::string base = op.substr(0, op.find('.'));
  while (!base.empty() && base.back() == '_') base.pop_back();
  while (!base.empty() && base.front() == '_') base.erase(base.begin());
  std::string out;
  bool up = true;
  for (char c : base) {
    if (c == '_') {
      up = true;
      continue;
    }
    out.push_back(up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    up = false;
  }
  return out + "Backward";
}

// The node recorded for an operator with a registered derivative.
class FormulaNode final : public Node, public BackwardContext {
 public:
  FormulaNode(const OpInfo& info) : info_(info) {}

  std::string name() const override { return camel_backward_name(info_.short_name); }
  std::string forward_op() const override { return info_.name; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    grads_ = std::move(grads);
    create_graph_ = GradMode::is_enabled();
    GradList r = info_.deriv->fn(*this);
    grads_.clear();
    LOOM_INTERNAL_ASSERT(r.size() == slots_.size(), "derivative of ", info_.name, " returned ",
                         r.size(), " gradients for ", slots_.size(), " tensor inputs");
    return r;
  }
  void release_variables() override {
    for (auto& s : saved_inputs_) s.second.reset();
    for (auto& s : saved_outputs_) s.second.reset();
  }

  // BackwardContext
  const Tensor& grad(size_t i) const override {
    static const Tensor undefined;
    return i < grads_.size() ? grads_[i] : undefined;
  }
  size_t num_grads() const override { return grads_.size(); }
  bool needs(size_t slot) const override { return should_compute_output(slot); }
  Tensor input(size_t slot) const override {
    for (auto& [i, sv] : saved_inputs_) {
      if (i == slot) return sv.unpack(info_.name, "input", slot);
    }
    LOOM_INTERNAL_ASSERT(false, "derivative of ", info_.name, " reads input ", slot,
                         " but did not declare it in save_inputs");
  }
  Tensor output(size_t i) const override {
    for (auto& [k, sv] : saved_outputs_) {
      if (k == i) return sv.unpack(info_.name, "output", i);
    }
    LOOM_INTERNAL_ASSERT(false, "derivative of ", info_.name, " reads output ", i,
                         " but did not declare it in save_outputs");
  }
  IntArrayRef input_sizes(size_t slot) const override { return slots_[slot].sizes.ref(); }
  DType input_dtype(size_t slot) const override { return slots_[slot].dtype; }
  bool input_defined(size_t slot) const override { return slots_[slot].defined; }
  IntArrayRef input_strides(size_t slot) const override { return slots_[slot].strides.ref(); }
  int64_t input_storage_offset(size_t slot) const override { return slots_[slot].storage_offset; }
  size_t num_slots() const override { return slots_.size(); }
  const IValue& arg(size_t pos) const override { return args_[pos]; }
  size_t list_size(size_t pos) const override {
    return pos < list_sizes_.size() ? list_sizes_[pos] : 0;
  }
  bool create_graph() const override { return create_graph_; }
  bool accepts_grad_sinks() const override { return info_.deriv->spec.grad_sinks; }
  Tensor grad_sink(size_t slot) const override {
    const GradSinkOffer* offer = current_grad_sink_offer();
    if (offer == nullptr || offer->node != this || slot >= offer->by_edge.size()) return Tensor();
    return offer->by_edge[slot];
  }

  struct SlotMeta {
    DimVector sizes, strides;
    int64_t storage_offset = 0;
    DType dtype = DType::Float32;
    bool defined = false;
  };
  const OpInfo& info_;
  // Sized for the common operator (two tensor inputs, a few arguments, what a binary op saves) so
  // that recording one allocates nothing but the node itself; longer lists spill to the heap.
  ::loom::detail::SmallVector<SlotMeta, 2> slots_;
  ::loom::detail::SmallVector<IValue, 4>
      args_;                        // non-tensor arguments by position (tensors left empty)
  std::vector<size_t> list_sizes_;  // by position; empty when the op takes no Tensor[]
  ::loom::detail::SmallVector<std::pair<size_t, SavedVariable>, 2> saved_inputs_;
  ::loom::detail::SmallVector<std::pair<size_t, SavedVariable>, 1> saved_outputs_;
  std::vector<Tensor> grads_;
  bool create_graph_ = false;
};

void check_inplace(const Tensor& self, const OpInfo& info) {
  AutogradMeta* m = meta_of(self);
  if (!m) return;
  if (m->requires_grad_ && !m->grad_fn_ && !m->is_view_) {
    LOOM_THROW(ValueError, "[", info.name, "] a leaf tensor that requires grad (shape ",
               self.shape_str(),
               ") is being used in an in-place operation; do it inside NoGradGuard, or on a clone");
  }
  if (m->is_view_) {
    AutogradMeta* bm = meta_of(m->base_);
    if (bm && bm->requires_grad_ && !bm->grad_fn_) {
      LOOM_THROW(ValueError, "[", info.name,
                 "] a view of a leaf tensor that requires grad (base shape ", m->base_.shape_str(),
                 ") is being used in an in-place operation");
    }
  }
}

// After an in-place op recorded as `node` (its input 0 is self's new value), self's history
// changes.
void rebase_history(const Tensor& self, const std::shared_ptr<Node>& node) {
  AutogradMeta& m = materialize_meta(self);
  if (m.is_view_ && requires_grad(m.base_)) {
    const Tensor base = m.base_;
    auto copy_slices = std::make_shared<CopySlices>(ViewGeometry::of(base, self), node);
    auto& edges = copy_slices->mutable_next_edges();
    edges.push_back(gradient_edge(base));
    for (size_t i = 1; i < node->next_edges().size(); ++i) edges.push_back(node->next_edges()[i]);
    copy_slices->add_input_meta(base);
    set_history(base, copy_slices, 0);
    // The view now reads from the base's new history.
    auto view_node = std::make_shared<AsStridedBackward>(ViewGeometry::of(base, self));
    view_node->mutable_next_edges().push_back(Edge{copy_slices, 0});
    view_node->add_input_meta(self);
    set_history(self, view_node, 0);
    return;
  }
  set_history(self, node, 0);
}

void autograd_fallback(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  const OpInfo& info = op_info(op);
  const DispatchKeySet below = keys & DispatchKeySet::below(DispatchKey::Autograd);
  IValue* args = stack->data() + (stack->size() - info.nargs);

  bool any = false;
  for (int p : info.tensor_args) {
    const IValue& v = args[p];
    if (v.is_tensor()) {
      any = any || requires_grad(v.to_tensor());
    } else if (v.is_tensor_list()) {
      for (const Tensor& t : v.to_tensor_list()) any = any || requires_grad(t);
    }
  }
  const bool differentiable = info.deriv == nullptr || info.deriv->differentiable;
  if (!any || !differentiable) {
    ExcludeDispatchKeyGuard guard(DispatchKey::Autograd);
    op.redispatch_boxed(below, *stack);
    return;
  }
  LOOM_CHECK_TYPE(!info.is_out, "[", info.name,
                  "] out= arguments do not support automatic "
                  "differentiation, but one of the inputs requires grad");
  if (!info.deriv) {
    LOOM_THROW(NotImplementedError, "[autograd] the derivative of ", info.name,
               " is not implemented (one of its inputs requires grad)");
  }
  Tensor self;
  if (info.mutated_arg >= 0) {
    self = args[info.mutated_arg].to_tensor();
    check_inplace(self, info);
  }

  auto node = std::make_shared<FormulaNode>(info);
  if (LOOM_UNLIKELY(record_function_active())) {
    ::loom::detail::record_autograd_node(node->thread_id(), node->sequence_nr());
  }
  if (AnomalyMode::is_enabled()) node->anomaly_trace = "forward operator " + info.name;
  node->args_.resize(info.nargs);
  auto& edges = node->mutable_next_edges();
  // Most operators take a fixed number of tensors: size the vectors once (no regrowth).
  edges.reserve(info.tensor_args.size());
  node->slots_.reserve(info.tensor_args.size());
  auto add_slot = [&](const Tensor* t) {
    // Filled in place (a SlotMeta is two DimVectors; moving one copies their inline room).
    FormulaNode::SlotMeta& sm = node->slots_.emplace_back();
    if (t && t->defined()) {
      sm.sizes.assign(t->sizes());
      sm.strides.assign(t->strides());
      sm.storage_offset = t->storage_offset();
      sm.dtype = t->dtype();
      sm.defined = true;
      edges.push_back(gradient_edge(*t));
    } else {
      edges.push_back(Edge{});
    }
  };
  ::loom::detail::SmallVector<int, 8> slot_arg;  // schema position of each slot
  for (size_t p = 0; p < info.nargs; ++p) {
    const IValue& v = args[p];
    if (v.is_tensor()) {
      add_slot(&v.to_tensor());
      slot_arg.push_back(static_cast<int>(p));
    } else if (v.is_tensor_list()) {
      if (node->list_sizes_.empty()) node->list_sizes_.assign(info.nargs, 0);
      node->list_sizes_[p] = v.to_tensor_list().size();
      for (const Tensor& t : v.to_tensor_list()) {
        add_slot(&t);
        slot_arg.push_back(static_cast<int>(p));
      }
    } else if (v.is_none() && op.schema().arguments[p].type.kind == SchemaType::Kind::Tensor) {
      add_slot(nullptr);
      slot_arg.push_back(static_cast<int>(p));
    } else {
      node->args_[p] = v;
    }
  }
  for (int s : info.deriv->spec.save_inputs) {
    const size_t slot = static_cast<size_t>(s);
    LOOM_INTERNAL_ASSERT(slot < slot_arg.size(), "derivative of ", info.name, " saves input ", s,
                         " but the operator has ", slot_arg.size(), " tensor inputs");
    const IValue& v = args[slot_arg[slot]];
    Tensor t;
    if (v.is_tensor()) {
      t = v.to_tensor();
    } else if (v.is_tensor_list()) {
      size_t first = slot;
      while (first > 0 && slot_arg[first - 1] == slot_arg[slot]) --first;
      t = v.to_tensor_list()[slot - first];
    }
    if (slot_arg[slot] == info.mutated_arg && t.defined()) {
      // The in-place op will overwrite it: keep the old value. The clone is recorded (grad mode is
      // on here), so that with create_graph the derivative's use of the old value has history.
      t = clone(t);
    }
    node->saved_inputs_.emplace_back(slot, SavedVariable(t, false));
  }

  Tensor view_input;
  if (info.view_of >= 0 && args[info.view_of].is_tensor())
    view_input = args[info.view_of].to_tensor();
  {
    ExcludeDispatchKeyGuard guard(DispatchKey::Autograd);
    op.redispatch_boxed(below, *stack);
  }

  // Outputs are now the last nrets values of the stack.
  const size_t nrets = info.nrets;
  IValue* rets = stack->data() + (stack->size() - nrets);
  // Pointers into the stack, which nothing below changes: no copy and no reference-count traffic.
  ::loom::detail::SmallVector<const Tensor*, 4> outs;
  for (size_t i = 0; i < nrets; ++i) {
    if (rets[i].is_tensor()) {
      outs.push_back(&rets[i].to_tensor());
    } else if (rets[i].is_tensor_list()) {
      for (const Tensor& t : rets[i].to_tensor_list()) outs.push_back(&t);
    }
  }
  node->reserve_input_meta(outs.size());
  // The last output takes this function's reference to the node when nothing below needs it.
  const bool node_needed_after = !info.deriv->spec.save_outputs.empty();
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& out = *outs[i];
    node->add_input_meta(out);
    if (!out.defined() || !is_floating(out.dtype())) continue;
    if (info.mutated_arg >= 0 && i == 0) {
      rebase_history(self, node);
      continue;
    }
    const bool last_use = !node_needed_after && i + 1 == outs.size();
    set_history(out, last_use ? std::move(node) : node, static_cast<uint32_t>(i));
    if (view_input.defined()) {
      AutogradMeta& m = materialize_meta(out);
      const AutogradMeta* im = meta_of(view_input);
      m.is_view_ = true;
      m.base_ = (im && im->is_view_) ? im->base_ : view_input;
    }
  }
  for (int k : info.deriv->spec.save_outputs) {
    const size_t idx = static_cast<size_t>(k);
    LOOM_INTERNAL_ASSERT(idx < outs.size(), "derivative of ", info.name, " saves output ", k);
    // In place through a view, self's grad_fn is now a view node that nothing else keeps alive:
    // save the output with this node's history instead (the same history for every other output).
    const Tensor& out = *outs[idx];
    const bool inplace_on_view = info.mutated_arg >= 0 && idx == 0 && out.defined() &&
                                 is_floating(out.dtype()) && grad_fn(out) != node;
    node->saved_outputs_.emplace_back(
        idx, inplace_on_view ? SavedVariable(out, node, 0) : SavedVariable(out, true));
  }
}

}  // namespace

LOOM_LIBRARY_IMPL(_, Autograd, m) {
  m.fallback(KernelFunction::from_boxed(&autograd_fallback));
}

}  // namespace loom::autograd
