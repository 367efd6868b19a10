// Per-tensor autograd state and the built-in nodes (internal to the autograd layer).
#pragma once

#include <memory>
#include <vector>

#include "loom/autograd.h"

namespace loom::autograd {

// Lives behind TensorImpl::autograd_meta(). Created on first need (requires_grad_, an output of a
// recorded operation, a hook); a tensor without it does not require grad.
struct AutogradMeta final : AutogradMetaInterface {
  ~AutogradMeta() override;
  bool requires_grad_ = false;  // set on leaves by requires_grad_(true)
  Tensor grad_;
  std::shared_ptr<Node> grad_fn_;
  // A leaf's AccumulateGrad, created on first use and kept (Note [Leaf owns its AccumulateGrad]).
  std::shared_ptr<Node> grad_accumulator_;
  uint32_t output_nr_ = 0;
  // retain_grad() on a non-leaf: the hook writes into this slot (shared so the hook does not keep
  // the tensor alive).
  std::shared_ptr<Tensor> retained_grad_;
  std::vector<GradHook> leaf_hooks_;
  std::vector<PostAccumulateGradHook> post_accumulate_hooks_;
  // Views: the tensor whose storage this one views (the root of a chain of views), and the storage
  // version when grad_fn_ was last set, to regenerate it after an in-place change of the base.
  bool is_view_ = false;
  Tensor base_;
  uint32_t attr_version_ = 0;

  bool requires_grad() const override { return requires_grad_ || grad_fn_ != nullptr; }
};

// The meta of t, or null.
inline AutogradMeta* meta_of(const Tensor& t) {
  return t.defined() ? static_cast<AutogradMeta*>(t.impl()->autograd_meta()) : nullptr;
}
AutogradMeta& materialize_meta(const Tensor& t);

// Sets t's history: it is output `output_nr` of `fn`, and carries the Autograd key. By value: a
// caller done with its reference moves it in (no reference-count update).
void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr);
// The AccumulateGrad node of a leaf that requires grad (created on first use, then kept by the
// leaf). An edge to it must also hold the leaf: use gradient_edge.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// Sums a leaf's incoming gradient into its .grad(); runs the leaf's hooks. Owned by the leaf, so it
// points back at the leaf without owning it; the leaf clears that pointer when it dies.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(TensorImpl* variable);
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  // The leaf, or an undefined tensor once the leaf is gone (only a node held outside any edge, e.g.
  // through grad_accumulator(), can outlive its leaf).
  Tensor variable() const {
    return variable_ ? Tensor(IntrusivePtr<TensorImpl>(variable_)) : Tensor();
  }
  void forget_variable() { variable_ = nullptr; }
  // The node outlives the graphs that use it: an out= operator run on the leaf under NoGradGuard
  // may have resized it since the node recorded its shape.
  void refresh_input_meta(const Tensor& leaf);
  // The leaf's .grad() when a producer may add into it directly (Note [Accumulating into .grad]):
  // the leaf is alive, has no hooks that would see the gradient first, and its grad is a dense
  // tensor of the leaf's shape, dtype and device outside any graph. Undefined otherwise.
  Tensor grad_sink() const;
  // What apply() does after accumulating, for a gradient a producer already added in.
  void run_post_accumulate_hooks() const;

 private:
  TensorImpl* variable_;  // not owning
};

// The sinks the engine offers the node it is about to apply, by next edge (undefined: none); set
// only around that call, on the engine's thread.
struct GradSinkOffer {
  const Node* node = nullptr;
  ::loom::detail::SmallVector<Tensor, 3> by_edge;
};
const GradSinkOffer* current_grad_sink_offer();
void set_current_grad_sink_offer(const GradSinkOffer* offer);

// The root of a backward pass: passes the given gradients to the outputs' edges.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, std::vector<Tensor> grads);
  std::string name() const override { return "GraphRoot"; }
  std::vector<Tensor> apply(std::vector<Tensor>&&) override { return grads_; }

 private:
  std::vector<Tensor> grads_;
};

// Where a view sits in its base's storage.
struct ViewGeometry {
  DimVector base_sizes, base_strides;
  int64_t base_offset = 0;
  DimVector sizes, strides;
  int64_t offset = 0;
  static ViewGeometry of(const Tensor& base, const Tensor& view);
  // A zero tensor shaped like the base, and the view of it that matches the view's place.
  Tensor make_base_like(const Tensor& like) const;
  Tensor view_of(const Tensor& base_like) const;
};

// Gradient of a view with respect to its base (used when a view's history is regenerated after an
// in-place change of the base): scatters the view's gradient into zeros shaped like the base.
class AsStridedBackward final : public Node {
 public:
  explicit AsStridedBackward(ViewGeometry g) : geom_(std::move(g)) {}
  std::string name() const override { return "AsStridedBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  ViewGeometry geom_;
};

// The history of a base after an in-place operation through one of its views: the gradient of the
// base is the incoming gradient with the view's region replaced by what the in-place op's backward
// (fn) makes of that region.
class CopySlices final : public Node {
 public:
  CopySlices(ViewGeometry g, std::shared_ptr<Node> fn);
  std::string name() const override { return "CopySlices"; }
  std::string forward_op() const override { return fn_->forward_op(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release_variables() override { fn_->release_variables(); }

 private:
  ViewGeometry geom_;
  std::shared_ptr<Node> fn_;
};

// A tensor a node saved, with the version it had, so that later in-place changes are detected.
class SavedVariable {
 public:
  SavedVariable() = default;
  SavedVariable(const Tensor& t, bool is_output);
  // Output `output_nr` of `fn`, saved by fn itself: unpacking gives it fn's history even when the
  // tensor's own grad_fn is another node (after an in-place op through a view it is a regenerated
  // view node, which may be gone by the time fn runs).
  SavedVariable(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr);
  // Throws Error naming `op` when the tensor was modified in place or already freed.
  Tensor unpack(const std::string& op, const char* what, size_t index) const;
  void reset() {
    data_ = Tensor();
    released_ = true;
  }
  bool defined() const { return data_.defined() || was_undefined_; }

 private:
  Tensor data_;  // for outputs: an alias without autograd meta (no cycle through grad_fn)
  std::weak_ptr<Node> grad_fn_;
  uint32_t output_nr_ = 0;
  uint32_t version_ = 0;
  bool is_output_ = false;
  bool released_ = false;
  bool was_undefined_ = false;
};

// A shallow alias of t (same storage and geometry) without autograd state.
Tensor alias_without_autograd(const Tensor& t);

}  // namespace loom::autograd
