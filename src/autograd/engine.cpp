// The backward engine: dependency counting, a ready queue ordered by sequence number, gradient
// buffers per node, hooks, output validation and anomaly checks; and the backward()/grad() entries.
//
// Note [Accumulating into .grad]
// When a leaf already has a .grad() (gradients kept across steps, zeroed in place, or summed over
// micro-batches), the usual path computes its gradient into a fresh tensor and AccumulateGrad then
// adds that into .grad(): one more pass over the weight's bytes, and a temporary of its size. A
// derivative that declares with_grad_sinks (linear's) may instead be handed the .grad() itself
// and add its product there (a GEMM with beta = 1). The engine offers a sink for an edge only when
// the result cannot differ from the usual path: the edge leads to the leaf's AccumulateGrad, it is
// the last edge into it and no gradient is waiting there (so nothing else would be summed first),
// the leaf and its node have no hooks that should see the gradient before it is added, the grad
// is dense with the leaf's shape, dtype and device and outside any graph, and the pass neither
// creates a graph, captures gradients (grad(), backward(inputs=)) nor runs anomaly mode. A
// derivative that used the sink returns it; the engine then skips the add, and AccumulateGrad only
// runs its post-accumulate-grad hooks (data-parallel bucketing still sees every gradient). The
// in-place add bumps .grad()'s version counter as add_ would. grads_accumulated_in_place() counts
// the gradients that took this path.
//
// Note [Streams in backward]
// A node's backward runs on the CUDA stream its forward ran on (the stream recorded with its
// outputs' metadata), as PyTorch does, so that a model that used side streams in forward gets the
// same overlap in backward. A gradient produced on one stream and consumed by a node of another
// crosses with an event: the producer's stream records it, the consumer's waits on it, the
// accumulation into the consumer's input buffer runs on the consumer's stream, and the gradient's
// memory is marked used by that stream (record_stream) so that the caching allocator does not hand
// it out again while the consumer may still read it. When the pass ends, the caller's current
// stream waits for every other stream the pass used, so that reading .grad() on the caller's stream
// is ordered after the whole backward. CPU tensors take none of these steps (one branch per node).
#include <atomic>
#include <cmath>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd_meta.h"
#include "loom/derivatives.h"
#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/memory/cuda_memory.h"
#include "loom/ops.h"
#include "loom/record_function.h"
#include "loom/stream.h"

namespace loom::autograd {
namespace {

struct NodeTask {
  Node* node;
  uint64_t priority;
  bool operator<(const NodeTask& o) const { return priority < o.priority; }
};

// Gradients that have arrived for one node's inputs.
struct InputBuffer {
  std::vector<Tensor> grads;
  void add(size_t i, Tensor g) {
    if (!g.defined()) return;
    if (!grads[i].defined()) {
      grads[i] = std::move(g);
    } else {
      grads[i] = loom::add(grads[i], g);
    }
  }
};

// Makes a gradient fit the input it flows into: sums broadcast dimensions, casts the dtype.
Tensor validate_grad(const Node& producer, size_t index, Tensor g, const Node::InputMeta& meta) {
  if (g.sizes() != meta.sizes.ref()) {
    try {
      g = sum_to(g, meta.sizes.ref());
    } catch (const Error&) {
      LOOM_THROW(ValueError, "[autograd] ", producer.name(), " (of ", producer.forward_op(),
                 ") returned a gradient of shape ", g.shape_str(), " for its input ", index,
                 ", which has shape ", meta.sizes.ref());
    }
  }
  if (g.dtype() != meta.dtype) g = g.to(meta.dtype);
  return g;
}

void check_anomaly(const Node& node, const std::vector<Tensor>& outs) {
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& g = outs[i];
    if (!g.defined() || !is_floating(g.dtype())) continue;
    NoGradGuard ng;
    if (loom::any(ne(g, g)).item<bool>()) {  // NaN is the only value unequal to itself
      LOOM_THROW(ValueError, "[autograd] anomaly: ", node.name(),
                 " returned NaN values in its output ", i, " (the gradient of input ", i, " of ",
                 node.forward_op().empty() ? node.name() : node.forward_op(), ")",
                 node.anomaly_trace.empty() ? "" : "; recorded at " + node.anomaly_trace);
    }
  }
}

struct GraphTask {
  bool keep_graph = false;
  bool create_graph = false;
  // grad() mode: gradients arriving at these edges are captured instead of accumulated.
  std::vector<Edge> capture;
  std::vector<Tensor> captured;
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> needed;  // empty: run everything
  bool filter = false;
  std::unordered_map<Node*, InputBuffer> buffers;
  // AccumulateGrad nodes whose gradient a producer already added into .grad().
  std::unordered_set<Node*> pre_accumulated;
  // CUDA streams the pass ran nodes on (Note [Streams in backward]).
  std::vector<Stream> cuda_streams;
};

// The CUDA stream a node's forward ran on, if its outputs were CUDA tensors.
std::optional<Stream> node_stream(const Node& n) {
  for (const Node::InputMeta& m : n.input_meta())
    if (LOOM_UNLIKELY(m.device.is_cuda())) return Stream(m.device, m.stream);
  return std::nullopt;
}

void note_stream(GraphTask& task, const Stream& s) {
  for (const Stream& x : task.cuda_streams)
    if (x == s) return;
  task.cuda_streams.push_back(s);
}

// Orders `g`, produced on `from`, before work on `to` (Note [Streams in backward]).
void cross_streams(const Tensor& g, const Stream& from, const Stream& to) {
  Event e(DeviceType::CUDA);
  e.record(from);
  e.block(to);
  cuda::record_stream(g.storage()->data_ptr(), to);
}

std::atomic<uint64_t> g_accumulated_in_place{0};

// The sinks `node` may use, by next edge (Note [Accumulating into .grad]).
void offer_grad_sinks(GraphTask& task, const Node& node, GradSinkOffer& offer) {
  offer.node = &node;
  const auto& edges = node.next_edges();
  offer.by_edge.clear();
  offer.by_edge.resize(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    if (!e.valid()) continue;
    auto* acc = dynamic_cast<AccumulateGrad*>(e.fn.get());
    if (acc == nullptr || task.buffers.count(acc) != 0) continue;
    auto dep = task.dependencies.find(acc);
    if (dep == task.dependencies.end() || dep->second != 1) continue;
    offer.by_edge[i] = acc->grad_sink();
  }
}

// Restores the previous offer when apply returns or throws (a hook may run a nested backward).
struct GradSinkOfferScope {
  explicit GradSinkOfferScope(const GradSinkOffer* offer) : prev_(current_grad_sink_offer()) {
    set_current_grad_sink_offer(offer);
  }
  ~GradSinkOfferScope() { set_current_grad_sink_offer(prev_); }
  const GradSinkOffer* prev_;
};

void compute_dependencies(GraphTask& task, Node* root) {
  std::vector<Node*> stack{root};
  std::unordered_set<Node*> seen{root};
  std::vector<Node*> order;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      Node* c = e.fn.get();
      task.dependencies[c] += 1;
      if (seen.insert(c).second) stack.push_back(c);
    }
  }
  if (!task.filter) return;
  // A node is needed if a captured edge or an accumulating target is reachable from it.
  std::unordered_set<Node*> targets;
  for (const Edge& e : task.capture) targets.insert(e.fn.get());
  // Repeat until stable (graphs here are small; the order is roughly topological already).
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (task.needed.count(n)) continue;
      bool need = targets.count(n) > 0;
      for (const Edge& e : n->next_edges()) {
        if (e.valid() && task.needed.count(e.fn.get())) need = true;
      }
      if (need) {
        task.needed.insert(n);
        changed = true;
      }
    }
  }
}

void run_pre_hooks(Node& node, std::vector<Tensor>& inputs) {
  for (auto& [idx, hook] : node.pre_hooks()) {
    if (idx >= inputs.size() || !inputs[idx].defined()) continue;
    Tensor r = hook(inputs[idx]);
    if (r.defined()) inputs[idx] = std::move(r);
  }
}

void execute(GraphTask& task, const std::shared_ptr<Node>& root) {
  AutoGradMode mode(task.create_graph);
  compute_dependencies(task, root.get());
  std::priority_queue<NodeTask> ready;  // one queue: CPU work runs on the calling thread
  ready.push({root.get(), UINT64_MAX});
  std::unordered_set<Node*> capture_nodes;
  for (const Edge& e : task.capture) capture_nodes.insert(e.fn.get());

  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    std::vector<Tensor> inputs;
    if (node != root.get()) {
      auto it = task.buffers.find(node);
      if (it != task.buffers.end()) {
        inputs = std::move(it->second.grads);
        task.buffers.erase(it);
      } else {
        inputs.resize(node->num_inputs());
      }
    }
    if (LOOM_UNLIKELY(task.pre_accumulated.count(node) != 0)) {
      static_cast<AccumulateGrad*>(node)->run_post_accumulate_hooks();
      continue;
    }
    run_pre_hooks(*node, inputs);
    if (capture_nodes.count(node)) {
      for (size_t k = 0; k < task.capture.size(); ++k) {
        const Edge& e = task.capture[k];
        if (e.fn.get() == node && e.input_nr < inputs.size() && inputs[e.input_nr].defined()) {
          task.captured[k] = task.captured[k].defined()
                                 ? loom::add(task.captured[k], inputs[e.input_nr])
                                 : inputs[e.input_nr];
        }
      }
    }
    if (task.filter && node != root.get()) {
      // Run a node only if some node after it leads to a captured edge; a captured edge's own node
      // (e.g. a leaf's AccumulateGrad in grad()) does not run.
      bool child_needed = false;
      for (const Edge& e : node->next_edges())
        child_needed = child_needed || (e.valid() && task.needed.count(e.fn.get()));
      if (!child_needed) continue;
    }
    bool any_input = node == root.get();
    for (const Tensor& t : inputs) any_input = any_input || t.defined();

    const std::optional<Stream> stream = node_stream(*node);
    std::optional<StreamGuard> stream_scope;
    if (LOOM_UNLIKELY(stream.has_value())) {
      note_stream(task, *stream);
      stream_scope.emplace(*stream);
    }
    std::vector<Tensor> outputs;
    GradSinkOffer offer;
    if (any_input) {
      std::optional<RecordFunctionGuard> scope;  // the profiler links it to its forward operator
      if (LOOM_UNLIKELY(record_function_active())) {
        scope.emplace(OpEvent::Kind::Backward, node->name(), -1, node->thread_id(),
                      node->sequence_nr());
      }
      std::optional<GradSinkOfferScope> offer_scope;  // only nodes that take sinks touch the TLS
      if (node->accepts_grad_sinks() && !task.create_graph && !task.filter &&
          !AnomalyMode::is_enabled()) {
        offer_grad_sinks(task, *node, offer);
        offer_scope.emplace(&offer);
      }
      outputs = node->apply(std::move(inputs));
      if (AnomalyMode::is_enabled()) check_anomaly(*node, outputs);
    } else {
      outputs.resize(node->next_edges().size());
    }
    if (!task.keep_graph) node->release_variables();

    const auto& edges = node->next_edges();
    LOOM_INTERNAL_ASSERT(outputs.size() == edges.size() || edges.empty(), node->name(),
                         " returned ", outputs.size(), " gradients for ", edges.size(), " edges");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      if (i < offer.by_edge.size() && offer.by_edge[i].defined() && i < outputs.size() &&
          outputs[i].defined() && outputs[i].impl() == offer.by_edge[i].impl()) {
        task.pre_accumulated.insert(next);  // already in .grad(); the node runs its hooks only
        g_accumulated_in_place.fetch_add(1, std::memory_order_relaxed);
      } else if (i < outputs.size() && outputs[i].defined()) {
        Tensor g = validate_grad(*node, i, std::move(outputs[i]), next->input_meta()[e.input_nr]);
        std::optional<StreamGuard> consumer_scope;
        if (LOOM_UNLIKELY(g.is_cuda())) {
          const std::optional<Stream> to = node_stream(*next);
          const Stream from = stream ? *stream : current_stream(g.device());
          if (to.has_value() && *to != from) {
            cross_streams(g, from, *to);
            consumer_scope.emplace(*to);
          }
        }
        auto [it, fresh] = task.buffers.try_emplace(next);
        if (fresh) it->second.grads.resize(next->num_inputs());
        it->second.add(e.input_nr, std::move(g));
      }
      if (--task.dependencies[next] == 0) ready.push({next, next->sequence_nr()});
    }
  }
  // The caller's streams wait for the streams the pass ran on.
  for (const Stream& s : task.cuda_streams) {
    const Stream caller = current_stream(s.device());
    if (caller == s) continue;
    Event e(DeviceType::CUDA);
    e.record(s);
    e.block(caller);
  }
}

std::vector<Tensor> make_root_grads(const std::vector<Tensor>& outputs,
                                    const std::vector<Tensor>& grad_outputs,
                                    std::vector<Edge>& edges) {
  LOOM_CHECK(!outputs.empty(), "[autograd] backward of an empty list of tensors");
  LOOM_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "[autograd] got ",
             grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  std::vector<Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    LOOM_CHECK(out.defined(), "[autograd] output ", i,
               " is an undefined tensor (a default-constructed Tensor holds no data)");
    LOOM_CHECK(requires_grad(out), "[autograd] element ", i,
               " of the tensors does not require grad "
               "and does not have a grad_fn (shape ",
               out.shape_str(), "); nothing to differentiate");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      LOOM_CHECK(out.numel() == 1,
                 "[autograd] a gradient can be created implicitly only for scalar "
                 "outputs; output ",
                 i, " has shape ", out.shape_str(), ": pass grad_outputs (a tensor of that shape)");
      g = ones_like(out);
    } else {
      LOOM_CHECK(g.sizes() == out.sizes(), "[autograd] grad_outputs[", i, "] has shape ",
                 g.shape_str(), " but output ", i, " has shape ", out.shape_str());
    }
    edges.push_back(gradient_edge(out));
    grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace

uint64_t grads_accumulated_in_place() {
  return g_accumulated_in_place.load(std::memory_order_relaxed);
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph,
              const std::vector<Tensor>& inputs) {
  ::loom::detail::report_capture_break("a backward pass inside the compiled function");
  std::vector<Edge> edges;
  std::vector<Tensor> grads = make_root_grads(outputs, grad_outputs, edges);
  GraphTask task;
  task.create_graph = create_graph;
  task.keep_graph = retain_graph.value_or(create_graph);
  if (!inputs.empty()) {
    task.filter = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      LOOM_CHECK(requires_grad(inputs[i]) && is_leaf(inputs[i]),
                 "[autograd] backward(inputs=...): "
                 "input ",
                 i, " must be a leaf tensor that requires grad");
      task.capture.push_back(gradient_edge(inputs[i]));
    }
    task.captured.resize(task.capture.size());
  }
  auto root = std::make_shared<GraphRoot>(std::move(edges), std::move(grads));
  if (!inputs.empty()) {
    // Run in capture mode, then accumulate into the requested leaves through their nodes.
    execute(task, root);
    NoGradGuard ng;
    for (size_t i = 0; i < task.capture.size(); ++i) {
      if (!task.captured[i].defined()) continue;
      AutoGradMode m(create_graph);
      task.capture[i].fn->apply({task.captured[i]});
    }
    return;
  }
  execute(task, root);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  ::loom::detail::report_capture_break("autograd::grad inside the compiled function");
  std::vector<Edge> edges;
  std::vector<Tensor> grads = make_root_grads(outputs, grad_outputs, edges);
  GraphTask task;
  task.create_graph = create_graph;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.filter = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_CHECK(requires_grad(inputs[i]), "[autograd.grad] input ", i, " (shape ",
               inputs[i].shape_str(), ") does not require grad");
    task.capture.push_back(gradient_edge(inputs[i]));
  }
  task.captured.resize(inputs.size());
  execute(task, std::make_shared<GraphRoot>(std::move(edges), std::move(grads)));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!task.captured[i].defined()) {
      LOOM_CHECK(
          allow_unused, "[autograd.grad] input ", i, " (shape ", inputs[i].shape_str(),
          ") was not used to compute the outputs; pass allow_unused=true to get an undefined "
          "gradient for it");
    } else {
      task.captured[i] = validate_grad(*task.capture[i].fn, i, task.captured[i],
                                       task.capture[i].fn->input_meta()[task.capture[i].input_nr]);
    }
  }
  return task.captured;
}

}  // namespace loom::autograd
