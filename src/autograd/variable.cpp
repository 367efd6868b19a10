// Autograd state of tensors, grad modes, and the built-in nodes.
#include <atomic>
#include <sstream>

#include "autograd/autograd_meta.h"
#include "loom/derivatives.h"
#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::autograd {

// ---- nodes ----

namespace {
// initial-exec: read on every recorded node; the default model for a shared library calls
// __tls_get_addr on each access.
thread_local uint64_t tls_sequence_nr __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint64_t> g_next_thread_id{1};
thread_local uint64_t tls_thread_id __attribute__((tls_model("initial-exec"))) = 0;
uint64_t this_thread_id() {
  if (tls_thread_id == 0) tls_thread_id = g_next_thread_id.fetch_add(1);
  return tls_thread_id;
}
}  // namespace

Node::Node() : sequence_nr_(tls_sequence_nr++), thread_id_(this_thread_id()) {}
Node::~Node() = default;

uint64_t peek_sequence_nr() {
  return tls_sequence_nr;
}

uint32_t Node::add_input_meta(const Tensor& t) {
  // Filled in place: InputMeta holds a DimVector, whose move is a 48-byte copy.
  InputMeta& m = input_meta_.emplace_back();
  if (t.defined()) {  // else an optional result that was not computed: no gradient ever arrives
    m.sizes.assign(t.sizes());
    m.dtype = t.dtype();
    m.device = t.device();
    if (LOOM_UNLIKELY(m.device.is_cuda())) m.stream = current_stream(m.device).id();
  }
  return static_cast<uint32_t>(input_meta_.size() - 1);
}

void Node::add_pre_hook(uint32_t input_nr, GradHook hook) {
  pre_hooks_.emplace_back(input_nr, std::move(hook));
}

// ---- grad modes ----

bool GradMode::is_enabled() {
  return !loom::detail::tls_dispatch_keys.excluded.has(DispatchKey::Autograd);
}
void GradMode::set_enabled(bool enabled) {
  auto& ex = loom::detail::tls_dispatch_keys.excluded;
  ex = enabled ? ex.remove(DispatchKey::Autograd) : ex.add(DispatchKey::Autograd);
}
AutoGradMode::AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) {
  GradMode::set_enabled(enabled);
}
AutoGradMode::~AutoGradMode() {
  GradMode::set_enabled(prev_);
}

namespace {
thread_local bool tls_inference = false;
std::atomic<bool> g_anomaly{false};
}  // namespace

InferenceMode::InferenceMode(bool enabled)
    : prev_grad_(GradMode::is_enabled()), prev_inference_(tls_inference) {
  tls_inference = enabled;
  if (enabled) GradMode::set_enabled(false);
}
InferenceMode::~InferenceMode() {
  tls_inference = prev_inference_;
  GradMode::set_enabled(prev_grad_);
}
bool InferenceMode::is_enabled() {
  return tls_inference;
}

bool AnomalyMode::is_enabled() {
  return g_anomaly.load(std::memory_order_relaxed);
}
void AnomalyMode::set_enabled(bool enabled) {
  g_anomaly.store(enabled);
}
DetectAnomalyGuard::DetectAnomalyGuard() : prev_(AnomalyMode::is_enabled()) {
  AnomalyMode::set_enabled(true);
}
DetectAnomalyGuard::~DetectAnomalyGuard() {
  AnomalyMode::set_enabled(prev_);
}

// ---- tensor state ----

AutogradMeta& materialize_meta(const Tensor& t) {
  LOOM_CHECK(t.defined(), "[autograd] undefined tensor");
  if (auto* m = meta_of(t)) return *m;
  auto m = std::make_unique<AutogradMeta>();
  AutogradMeta* raw = m.get();
  t.impl()->set_autograd_meta(std::move(m));
  return *raw;
}

void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  AutogradMeta& m = materialize_meta(t);
  m.grad_fn_ = std::move(fn);
  m.output_nr_ = output_nr;
  m.attr_version_ = t.version();
  t.impl()->add_key(DispatchKey::Autograd);
}

void set_requires_grad(const Tensor& t, bool requires_grad) {
  LOOM_CHECK(t.defined(), "[requires_grad_] undefined tensor");
  AutogradMeta* m = meta_of(t);
  if (m && m->grad_fn_) {
    LOOM_CHECK(requires_grad,
               "[requires_grad_] you can only change requires_grad flags of leaf tensors; "
               "this tensor is the output of ",
               m->grad_fn_->name(), ". Use detach() to get a tensor that does not require grad");
    return;
  }
  if (requires_grad) {
    LOOM_CHECK_TYPE(is_floating(t.dtype()),
                    "[requires_grad_] only floating-point tensors can require "
                    "gradients; got dtype ",
                    dtype_name(t.dtype()));
    materialize_meta(t).requires_grad_ = true;
    t.impl()->add_key(DispatchKey::Autograd);
  } else if (m) {
    m->requires_grad_ = false;
    if (!m->grad_fn_) t.impl()->remove_key(DispatchKey::Autograd);
  }
}

bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = meta_of(t);
  return m && m->requires_grad();
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  AutogradMeta* m = meta_of(t);
  if (!m) return nullptr;
  if (m->is_view_ && m->attr_version_ != t.version() && requires_grad(m->base_)) {
    // The base (or this view) changed in place since this view's history was recorded: the view now
    // reads whatever the base's current history produces.
    auto node = std::make_shared<AsStridedBackward>(ViewGeometry::of(m->base_, t));
    node->mutable_next_edges().push_back(gradient_edge(m->base_));
    node->add_input_meta(t);
    m->grad_fn_ = node;
    m->output_nr_ = 0;
    m->attr_version_ = t.version();
    t.impl()->add_key(DispatchKey::Autograd);
  }
  return m->grad_fn_;
}

bool is_leaf(const Tensor& t) {
  return grad_fn(t) == nullptr;
}

uint32_t output_nr(const Tensor& t) {
  const AutogradMeta* m = meta_of(t);
  return m ? m->output_nr_ : 0;
}

Tensor grad(const Tensor& t) {
  AutogradMeta* m = meta_of(t);
  if (!m) return Tensor();
  if (m->retained_grad_) return *m->retained_grad_;
  if (m->grad_fn_) {
    LOOM_THROW(ValueError, "[grad] the .grad of a non-leaf tensor (output of ", m->grad_fn_->name(),
               ", shape ", t.shape_str(),
               ") is not kept; call retain_grad() on it before backward, "
               "or use autograd::grad(outputs, {tensor})");
  }
  return m->grad_;
}

void set_grad(const Tensor& t, const Tensor& g) {
  if (g.defined()) {
    LOOM_CHECK(g.sizes() == t.sizes(), "[set_grad] gradient shape ", g.shape_str(),
               " does not match the tensor's shape ", t.shape_str());
    LOOM_CHECK_TYPE(g.dtype() == t.dtype(), "[set_grad] gradient dtype ", dtype_name(g.dtype()),
                    " does not match the tensor's dtype ", dtype_name(t.dtype()));
  }
  AutogradMeta& m = materialize_meta(t);
  if (m.retained_grad_) {
    *m.retained_grad_ = g;
  } else {
    m.grad_ = g;
  }
}

void retain_grad(const Tensor& t) {
  LOOM_CHECK(requires_grad(t),
             "[retain_grad] can't retain_grad on a tensor that does not require grad");
  auto fn = grad_fn(t);
  if (!fn) return;  // leaves keep their grad anyway
  AutogradMeta& m = materialize_meta(t);
  if (m.retained_grad_) return;
  m.retained_grad_ = std::make_shared<Tensor>();
  std::weak_ptr<Tensor> slot = m.retained_grad_;
  fn->add_pre_hook(m.output_nr_, [slot](const Tensor& g) -> Tensor {
    if (auto s = slot.lock()) {
      if (!g.defined()) return Tensor();
      NoGradGuard ng;
      *s = s->defined() ? add(*s, g) : clone(g);
    }
    return Tensor();
  });
}

// Note [Leaf owns its AccumulateGrad]
// PyTorch's leaf keeps a weak reference to its AccumulateGrad and the node owns the leaf, so the
// node dies with the last graph that uses the leaf and is made again by the next one. Recording
// `a + b` with two leaves then made and destroyed two nodes each time, and that (two allocations,
// a dozen atomic reference-count operations) was the largest part of recording a small operation.
// Here the ownership is the other way round: the leaf's autograd meta owns the node, which points
// back at the leaf without owning it, and every edge to the node (made by gradient_edge) also holds
// the leaf. The graph still keeps its leaves alive (so gradients still reach a leaf the user
// dropped, and its hooks still run), nothing forms a cycle, and the node is made once per leaf.
// When the leaf dies it clears the node's pointer; only a node held outside any edge can see that,
// and it then drops the gradients it gets.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = materialize_meta(leaf);
  if (!m.grad_accumulator_) {
    auto acc = std::make_shared<AccumulateGrad>(leaf.impl());
    acc->add_input_meta(leaf);
    m.grad_accumulator_ = std::move(acc);
  } else {
    static_cast<AccumulateGrad&>(*m.grad_accumulator_).refresh_input_meta(leaf);
  }
  return m.grad_accumulator_;
}

void AccumulateGrad::refresh_input_meta(const Tensor& leaf) {
  const InputMeta& im = input_meta_[0];
  if (im.sizes.ref() == leaf.sizes() && im.dtype == leaf.dtype() && im.device == leaf.device())
    return;
  input_meta_.clear();
  add_input_meta(leaf);
}

AutogradMeta::~AutogradMeta() {
  if (grad_accumulator_) static_cast<AccumulateGrad&>(*grad_accumulator_).forget_variable();
}

Edge gradient_edge(const Tensor& t) {
  // One meta lookup; grad_fn() has work to do only for a tensor with history or a view.
  AutogradMeta* m = meta_of(t);
  if (!m) return Edge{};
  if (m->grad_fn_ || m->is_view_) {
    if (auto fn = grad_fn(t)) return Edge{std::move(fn), m->output_nr_};
  }
  if (m->requires_grad_) return Edge{grad_accumulator(t), 0, t};
  return Edge{};
}

Tensor alias_without_autograd(const Tensor& t) {
  auto impl = make_intrusive<TensorImpl>(t.storage(), t.dtype(), t.sizes(), t.strides(),
                                         t.storage_offset());
  return Tensor(std::move(impl));
}

Tensor detach(const Tensor& t) {
  LOOM_CHECK(t.defined(), "[detach] undefined tensor");
  return alias_without_autograd(t);
}

void register_hook(const Tensor& t, GradHook hook) {
  LOOM_CHECK(requires_grad(t),
             "[register_hook] cannot register a hook on a tensor that does not "
             "require grad (shape ",
             t.shape_str(), ")");
  if (auto fn = grad_fn(t)) {
    fn->add_pre_hook(output_nr(t), std::move(hook));
  } else {
    materialize_meta(t).leaf_hooks_.push_back(std::move(hook));
  }
}

void register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook) {
  LOOM_CHECK(requires_grad(t) && is_leaf(t),
             "[register_post_accumulate_grad_hook] only leaf tensors "
             "that require grad accumulate gradients (shape ",
             t.shape_str(), ")");
  materialize_meta(t).post_accumulate_hooks_.push_back(std::move(hook));
}

void zero_grads(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = grad(p);
    if (!g.defined()) continue;
    if (set_to_none) {
      set_grad(p, Tensor());
    } else if (g.requires_grad()) {
      set_grad(p, zeros_like(g));  // a gradient with history (create_graph): drop the history
    } else {
      g.zero_();
    }
  }
}

// ---- AccumulateGrad ----

AccumulateGrad::AccumulateGrad(TensorImpl* variable) : variable_(variable) {
  sequence_nr_ = UINT64_MAX;  // run as soon as ready, so gradients are freed early
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  const Tensor variable = this->variable();
  if (!g.defined() || !variable.defined()) return {};
  AutogradMeta& m = materialize_meta(variable);
  for (auto& hook : m.leaf_hooks_) {
    Tensor r = hook(g);
    if (r.defined()) g = std::move(r);
  }
  if (GradMode::is_enabled()) {
    // create_graph: the accumulated gradient is itself differentiable.
    m.grad_ = m.grad_.defined() ? add(m.grad_, g) : g;
  } else if (!m.grad_.defined()) {
    const bool sole_owner = g.use_count() == 1 && g.storage()->use_count() == 1 &&
                            g.is_contiguous() && meta_of(g) == nullptr;
    m.grad_ = sole_owner ? g : clone(g);
  } else {
    m.grad_.add_(g);
  }
  for (auto& hook : m.post_accumulate_hooks_) hook(variable);
  return {};
}

Tensor AccumulateGrad::grad_sink() const {
  const Tensor variable = this->variable();
  AutogradMeta* m = meta_of(variable);
  if (m == nullptr || !m->leaf_hooks_.empty() || !pre_hooks_.empty()) return Tensor();
  const Tensor& g = m->grad_;
  if (!g.defined() || !g.is_contiguous() || g.sizes() != variable.sizes() ||
      g.dtype() != variable.dtype() || g.device() != variable.device() || requires_grad(g)) {
    return Tensor();
  }
  return g;
}

void AccumulateGrad::run_post_accumulate_hooks() const {
  const Tensor variable = this->variable();
  AutogradMeta* m = meta_of(variable);
  if (m == nullptr) return;
  for (auto& hook : m->post_accumulate_hooks_) hook(variable);
}

namespace {
thread_local const GradSinkOffer* tls_grad_sink_offer = nullptr;
}  // namespace

const GradSinkOffer* current_grad_sink_offer() {
  return tls_grad_sink_offer;
}
void set_current_grad_sink_offer(const GradSinkOffer* offer) {
  tls_grad_sink_offer = offer;
}

GraphRoot::GraphRoot(std::vector<Edge> edges, std::vector<Tensor> grads)
    : grads_(std::move(grads)) {
  next_edges_.reserve(edges.size());
  for (Edge& e : edges) next_edges_.push_back(std::move(e));
}

// ---- views ----

ViewGeometry ViewGeometry::of(const Tensor& base, const Tensor& view) {
  ViewGeometry g;
  g.base_sizes = DimVector(base.sizes());
  g.base_strides = DimVector(base.strides());
  g.base_offset = base.storage_offset();
  g.sizes = DimVector(view.sizes());
  g.strides = DimVector(view.strides());
  g.offset = view.storage_offset();
  return g;
}

Tensor ViewGeometry::make_base_like(const Tensor& like) const {
  Tensor z = empty_strided(base_sizes.ref(), base_strides.ref(), like.options());
  z.zero_();
  return z;
}

Tensor ViewGeometry::view_of(const Tensor& base_like) const {
  return as_strided(base_like, sizes.ref(), strides.ref(),
                    base_like.storage_offset() + (offset - base_offset));
}

std::vector<Tensor> AsStridedBackward::apply(std::vector<Tensor>&& grads) {
  if (!grads[0].defined()) return {Tensor()};
  if (GradMode::is_enabled()) {
    // create_graph: writing into a view of a fresh zeros tensor would not be recorded (views of
    // tensors that do not require grad are not tracked), so build the result out of place.
    return {as_strided_backward(grads[0], geom_.base_sizes.ref(), geom_.base_strides.ref(),
                                geom_.base_offset, geom_.sizes.ref(), geom_.strides.ref(),
                                geom_.offset)};
  }
  Tensor result = geom_.make_base_like(grads[0]);
  geom_.view_of(result).copy_(grads[0]);
  return {result};
}

CopySlices::CopySlices(ViewGeometry g, std::shared_ptr<Node> fn)
    : geom_(std::move(g)), fn_(std::move(fn)) {}

std::vector<Tensor> CopySlices::apply(std::vector<Tensor>&& grads) {
  const Tensor& g = grads[0];
  std::vector<Tensor> out(next_edges_.size());
  if (!g.defined()) return out;
  Tensor result = geom_.make_base_like(g);
  result.copy_(g);
  Tensor region = geom_.view_of(result);
  std::vector<Tensor> sub = fn_->apply({clone(region)});
  const bool has_sub = sub.size() > 0 && sub[0].defined();
  if (GradMode::is_enabled()) {
    // create_graph: the region is replaced out of place, as in AsStridedBackward::apply (an
    // in-place write into `region` would not be recorded when `result` does not require grad).
    const int64_t offset = result.storage_offset() + (geom_.offset - geom_.base_offset);
    auto embed = [&](const Tensor& t) {
      return as_strided_backward(t, result.sizes(), result.strides(), result.storage_offset(),
                                 geom_.sizes.ref(), geom_.strides.ref(), offset);
    };
    const Tensor inside = ne(embed(ones(geom_.sizes.ref(), g.options())), 0.0);
    result = has_sub ? where(inside, embed(sum_to(sub[0], region.sizes())), result)
                     : masked_fill(result, inside, 0.0);
  } else if (has_sub) {
    region.copy_(sum_to(sub[0], region.sizes()));
  } else {
    region.zero_();
  }
  out[0] = result;
  for (size_t i = 1; i < sub.size() && i < out.size(); ++i) out[i] = sub[i];
  return out;
}

// ---- saved variables ----

SavedVariable::SavedVariable(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) {
    was_undefined_ = true;
    return;
  }
  version_ = t.version();
  if (is_output) {
    data_ = alias_without_autograd(t);
    if (auto* m = meta_of(t)) {
      grad_fn_ = m->grad_fn_;
      output_nr_ = m->output_nr_;
    }
  } else {
    data_ = t;
  }
}

SavedVariable::SavedVariable(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr)
    : SavedVariable(t, /*is_output=*/true) {
  if (!t.defined()) return;
  grad_fn_ = fn;
  output_nr_ = output_nr;
}

Tensor SavedVariable::unpack(const std::string& op, const char* what, size_t index) const {
  if (was_undefined_) return Tensor();
  if (released_ || !data_.defined()) {
    LOOM_THROW(ValueError,
               "[autograd] trying to backward through the graph a second time (or to "
               "use saved tensors after they were freed): the saved ",
               what, " ", index, " of ", op,
               " was freed by the first backward. Pass retain_graph=true to the first backward");
  }
  if (data_.version() != version_) {
    LOOM_THROW(ValueError,
               "[autograd] one of the tensors needed for gradient computation has been "
               "modified by an in-place operation: ",
               what, " ", index, " of ", op, " (shape ", data_.shape_str(), ", ",
               dtype_name(data_.dtype()), ") is at version ", data_.version(),
               "; expected version ", version_,
               ". Clone it before modifying it, or modify it out of place");
  }
  if (!is_output_) return data_;
  Tensor out = alias_without_autograd(data_);
  if (auto fn = grad_fn_.lock()) set_history(out, fn, output_nr_);
  return out;
}

}  // namespace loom::autograd
