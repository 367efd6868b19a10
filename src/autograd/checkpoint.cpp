// Activation checkpointing (Note [Activation checkpointing] in include/loom/autograd_checkpoint.h).
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd_meta.h"
#include "loom/autograd.h"
#include "loom/autograd_checkpoint.h"
#include "loom/error.h"
#include "loom/warning.h"

namespace loom::autograd {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The generators a checkpoint restores for its recompute, with their states at the first run.
struct RngStates {
  std::vector<Generator> gens;
  std::vector<GeneratorState> states;

  static RngStates capture(const CheckpointOptions& o) {
    RngStates r;
    if (!o.preserve_rng_state) return r;
    r.gens.push_back(default_generator());
    for (const Generator& g : o.generators) r.gens.push_back(g);
    for (const Generator& g : r.gens) r.states.push_back(g.state());
    return r;
  }
  std::vector<GeneratorState> now() const {
    std::vector<GeneratorState> s;
    for (const Generator& g : gens) s.push_back(g.state());
    return s;
  }
  void set(const std::vector<GeneratorState>& s) const {
    for (size_t i = 0; i < gens.size(); ++i) gens[i].set_state(s[i]);
  }
};

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(Fn fn, std::vector<Tensor> inputs, RngStates rng)
      : fn_(std::move(fn)), inputs_(std::move(inputs)), rng_(std::move(rng)) {
    for (const Tensor& t : inputs_) versions_.push_back(t.defined() ? t.version() : 0);
  }
  std::string name() const override { return "CheckpointBackward"; }
  std::string forward_op() const override { return "autograd::checkpoint"; }
  void release_variables() override {
    inputs_.clear();
    fn_ = nullptr;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    LOOM_CHECK(fn_ != nullptr,
               "[autograd::checkpoint] backward ran through this checkpoint a second time, but "
               "its inputs were freed after the first; pass retain_graph=true to the first "
               "backward");
    LOOM_CHECK(!GradMode::is_enabled(),
               "[autograd::checkpoint] backward with create_graph=true is not supported (the "
               "recompute runs a nested backward)");
    std::vector<Tensor> detached;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& t = inputs_[i];
      if (!t.defined()) {
        detached.emplace_back();
        continue;
      }
      LOOM_CHECK(t.version() == versions_[i], "[autograd::checkpoint] input ", i, " (shape ",
                 t.shape_str(), ") was modified in place after the checkpoint saved it (version ",
                 versions_[i], ", now ", t.version(), "); the recompute would see other values");
      Tensor d = detach(t);
      if (should_compute_output(i)) d.requires_grad_(true);
      detached.push_back(std::move(d));
    }
    // The recompute: the generators as they were at the first run, then as they are now.
    const std::vector<GeneratorState> after = rng_.now();
    rng_.set(rng_.states);
    std::vector<Tensor> outs;
    try {
      AutoGradMode enable(true);
      outs = fn_(detached);
    } catch (...) {
      rng_.set(after);
      throw;
    }
    rng_.set(after);
    LOOM_CHECK(outs.size() == grads.size(), "[autograd::checkpoint] the recompute returned ",
               outs.size(), " tensors but the first run returned ", grads.size());
    std::vector<Tensor> roots, root_grads;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!grads[k].defined() || !outs[k].requires_grad()) continue;
      roots.push_back(outs[k]);
      root_grads.push_back(grads[k]);
    }
    if (!roots.empty()) {
      AutoGradMode enable(true);  // the nested engine sets its own mode; leaves record nothing
      backward(roots, root_grads, /*retain_graph=*/false, /*create_graph=*/false);
    }
    std::vector<Tensor> out(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (should_compute_output(i) && detached[i].defined()) out[i] = detached[i].grad();
    return out;
  }

 private:
  Fn fn_;
  std::vector<Tensor> inputs_;  // detached: the node must not own the inputs' graph
  std::vector<uint32_t> versions_;
  RngStates rng_;
};

}  // namespace

std::vector<Tensor> checkpoint(const Fn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  LOOM_CHECK(fn != nullptr, "[autograd::checkpoint] fn is empty");
  if (!GradMode::is_enabled()) return fn(inputs);
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) {
    warn_once("autograd.checkpoint.no_grad_inputs",
              "[autograd::checkpoint] no input requires grad: fn runs recording its graph as "
              "usual (nothing is recomputed), else the parameters it uses would get no gradient");
    return fn(inputs);
  }
  RngStates rng = RngStates::capture(options);
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.defined() ? detach(t) : Tensor());
  auto node = std::make_shared<CheckpointBackward>(fn, std::move(saved), std::move(rng));
  for (const Tensor& t : inputs)
    node->mutable_next_edges().push_back(t.defined() && t.requires_grad() ? gradient_edge(t)
                                                                          : Edge());
  uint32_t slot = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& o = outs[k];
    LOOM_CHECK(o.defined(), "[autograd::checkpoint] fn returned an undefined tensor (output ", k,
               ")");
    for (const Tensor& t : inputs) {
      LOOM_CHECK(!t.defined() || o.impl() != t.impl(), "[autograd::checkpoint] output ", k,
                 " of fn is one of its inputs: fn must return new tensors");
    }
    LOOM_CHECK_TYPE(is_floating(o.dtype()), "[autograd::checkpoint] output ", k,
                    " of fn has dtype ", dtype_name(o.dtype()),
                    ": every output must be floating-point (it gets the "
                    "checkpoint's gradient)");
    node->add_input_meta(o);
    set_history(o, node, slot++);
  }
  return outs;
}

}  // namespace loom::autograd
