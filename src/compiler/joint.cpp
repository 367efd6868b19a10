// The joint forward/backward graph: its capture, its min-cut partition and its run (Note [Joint
// graph] in compiler/joint.h).
#include "compiler/joint.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/autograd_meta.h"
#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/ops.h"

namespace loom::compiler {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

// Dinic's maximum flow over a small graph; after max_flow(), source_side() is the minimum cut's
// source side (the vertices the residual graph still reaches).
class MaxFlow {
 public:
  explicit MaxFlow(size_t n) : adj_(n), level_(n), next_(n) {}

  void add_edge(size_t from, size_t to, int64_t cap) {
    adj_[from].push_back(edges_.size());
    edges_.push_back({to, cap});
    adj_[to].push_back(edges_.size());
    edges_.push_back({from, 0});
  }

  int64_t max_flow(size_t s, size_t t) {
    int64_t flow = 0;
    while (levels(s, t)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (const int64_t f = push(s, t, kInf)) flow = std::min(kInf, flow + f);
    }
    return flow;
  }

  std::vector<bool> source_side(size_t s) {
    levels(s, s);
    std::vector<bool> side(adj_.size());
    for (size_t v = 0; v < adj_.size(); ++v) side[v] = level_[v] >= 0;
    return side;
  }

 private:
  struct Edge {
    size_t to;
    int64_t cap;
  };

  bool levels(size_t s, size_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::deque<size_t> q{s};
    level_[s] = 0;
    while (!q.empty()) {
      const size_t v = q.front();
      q.pop_front();
      for (size_t e : adj_[v]) {
        if (edges_[e].cap > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[v] + 1;
          q.push_back(edges_[e].to);
        }
      }
    }
    return level_[t] >= 0 && t != s;
  }

  // Iterative would be longer; the graphs are a few thousand vertices deep at most.
  int64_t push(size_t v, size_t t, int64_t f) {
    if (v == t) return f;
    for (size_t& i = next_[v]; i < adj_[v].size(); ++i) {
      Edge& e = edges_[adj_[v][i]];
      if (e.cap <= 0 || level_[e.to] != level_[v] + 1) continue;
      if (const int64_t got = push(e.to, t, std::min(f, e.cap))) {
        e.cap -= got;
        edges_[adj_[v][i] ^ 1].cap += got;
        return got;
      }
    }
    return 0;
  }

  std::vector<std::vector<size_t>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

int64_t value_bytes(const Value& v) {
  int64_t n = 1;
  for (int64_t s : v.sizes) n *= s;
  return std::max<int64_t>(1, n * static_cast<int64_t>(element_size(v.dtype)));
}

// The node's tensor operands.
std::vector<ValueId> operands(const Node& n) {
  std::vector<ValueId> r;
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::Tensor) r.push_back(a.value);
    r.insert(r.end(), a.list.begin(), a.list.end());
  }
  return r;
}

// The autograd node of a compiled function's results (Note [Joint graph]): holds the saved
// tensors and runs the backward graph.
class CompiledBackward : public autograd::Node {
 public:
  CompiledBackward(std::shared_ptr<const JointGraph> j, std::vector<Tensor> saved)
      : joint_(std::move(j)), saved_(std::move(saved)) {
    for (const Tensor& t : saved_) versions_.push_back(t.defined() ? t.version() : 0);
  }

  std::string name() const override { return "CompiledBackward"; }
  std::string forward_op() const override { return "compiled function"; }
  void release_variables() override {
    saved_.clear();
    released_ = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    LOOM_CHECK(!released_,
               "[autograd] trying to backward through the graph a second time: the tensors "
               "saved by a compiled function were freed by the first backward. Pass "
               "retain_graph=true to the first backward");
    for (size_t j = 0; j < saved_.size(); ++j) {
      LOOM_CHECK(!saved_[j].defined() || saved_[j].version() == versions_[j],
                 "[autograd] one of the tensors needed for gradient computation has been "
                 "modified by an in-place operation: saved tensor ",
                 j, " of a compiled function (shape ", saved_[j].shape_str(), ") is at version ",
                 saved_[j].version(), "; expected version ", versions_[j]);
    }
    LOOM_CHECK_AS(NotImplementedError, !autograd::GradMode::is_enabled(),
                  "[compile] a compiled function's backward graph has no double backward "
                  "(create_graph); compile with backend eager to differentiate twice");
    std::vector<Tensor> in = saved_;
    append_grads(in, grads, *this);
    std::vector<Tensor> out;
    HostMismatch mismatch;
    joint_->backward.run(in, &out, &mismatch);
    return out;
  }

 private:
  std::shared_ptr<const JointGraph> joint_;
  std::vector<Tensor> saved_;
  std::vector<uint32_t> versions_;
  bool released_ = false;
};

}  // namespace

std::string bytes_str(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(b) / (1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(b) / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  }
  return buf;
}

bool is_recomputable(const Graph& g, const Node& n) {
  if (!is_pure(n)) return false;
  const FunctionSchema& s = n.op.schema();
  // A view: its result aliases an argument and writes nothing.
  if (!s.returns.empty() && !s.returns[0].alias_set.empty()) return true;
  static const char* const kCheap[] = {"add",
                                       "sub",
                                       "mul",
                                       "div",
                                       "neg",
                                       "relu",
                                       "reciprocal",
                                       "rsqrt",
                                       "abs",
                                       "sqrt",
                                       "sin",
                                       "cos",
                                       "exp",
                                       "log",
                                       "log1p",
                                       "tanh",
                                       "erf",
                                       "sigmoid",
                                       "silu",
                                       "gelu",
                                       "pow",
                                       "clamp",
                                       "maximum",
                                       "minimum",
                                       "where",
                                       "eq",
                                       "ne",
                                       "lt",
                                       "le",
                                       "gt",
                                       "ge",
                                       "logical_and",
                                       "logical_or",
                                       "logical_not",
                                       "sign",
                                       "threshold_backward",
                                       "sigmoid_backward",
                                       "tanh_backward",
                                       "gelu_backward",
                                       "silu_backward",
                                       "_to_copy",
                                       "to",
                                       "clone",
                                       "contiguous",
                                       "zeros",
                                       "ones",
                                       "full",
                                       "zeros_like",
                                       "ones_like",
                                       "full_like",
                                       "scalar_tensor",
                                       "expand",
                                       "reshape",
                                       "view"};
  bool cheap = false;
  for (const char* c : kCheap) cheap = cheap || s.name == c;
  if (!cheap) return false;
  // Note [What the min-cut recomputes]: recomputing a pointwise node pays only when fusion folds
  // it into the backward's kernels, which it does for floating values of one dtype, float32 or
  // float64 (Note [Pointwise fusion]). Anything else (a bfloat16 cast under autocast, a float32
  // result read from bfloat16) would run as a kernel of its own, one more pass over memory than
  // reading the saved value, so it is saved instead.
  std::optional<DType> floating;
  auto fusible = [&](ValueId v) {
    const DType dt = g.values[static_cast<size_t>(v)].dtype;
    if (!is_floating(dt)) return true;
    if (dt != kFloat32 && dt != kFloat64) return false;
    if (floating && *floating != dt) return false;
    floating = dt;
    return true;
  };
  for (ValueId u : operands(n))
    if (!fusible(u)) return false;
  for (const auto& r : n.returns)
    for (ValueId w : r)
      if (!fusible(w)) return false;
  return true;
}

Partition min_cut_partition(const Graph& j, size_t num_primal, size_t num_results) {
  const size_t nv = j.values.size();
  // Values the tangents reach, and the nodes that read one: the backward's own.
  std::vector<bool> td(nv, false);
  std::vector<int32_t> producer(nv, -1);
  for (size_t v = 0; v < nv; ++v) {
    const Value& x = j.values[v];
    if (x.kind == Value::Kind::Input && static_cast<size_t>(x.index) >= num_primal) td[v] = true;
    if (x.kind == Value::Kind::NodeOutput) producer[v] = x.index;
  }
  std::vector<bool> bwd_node(j.nodes.size(), false);
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    for (ValueId u : operands(j.nodes[k])) bwd_node[k] = bwd_node[k] || td[static_cast<size_t>(u)];
    if (bwd_node[k])
      for (const auto& r : j.nodes[k].returns)
        for (ValueId w : r) td[static_cast<size_t>(w)] = true;
  }
  auto is_const = [&](ValueId v) {
    return j.values[static_cast<size_t>(v)].kind == Value::Kind::Constant;
  };
  // Vertices: value v is 2v (in) and 2v+1 (out); then the source and the sink.
  const size_t source = 2 * nv, sink = 2 * nv + 1;
  MaxFlow net(2 * nv + 2);
  // Bytes decide; among cuts of equal bytes, the one nearer the backward (later values) wins,
  // which leaves it less to recompute.
  const auto scale = static_cast<int64_t>(nv) + 1;
  for (size_t v = 0; v < nv; ++v) {
    if (td[v] || is_const(static_cast<ValueId>(v))) continue;
    net.add_edge(2 * v, 2 * v + 1, value_bytes(j.values[v]) * scale + static_cast<int64_t>(nv - v));
    const bool anchored =
        producer[v] < 0 || !is_recomputable(j, j.nodes[static_cast<size_t>(producer[v])]);
    if (anchored) net.add_edge(source, 2 * v, kInf);
  }
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    const Node& n = j.nodes[k];
    for (ValueId u : operands(n)) {
      if (is_const(u) || td[static_cast<size_t>(u)]) continue;
      if (bwd_node[k]) {
        net.add_edge(2 * static_cast<size_t>(u) + 1, sink, kInf);
        continue;
      }
      for (const auto& r : n.returns)
        for (ValueId w : r)
          net.add_edge(2 * static_cast<size_t>(u) + 1, 2 * static_cast<size_t>(w), kInf);
    }
  }
  for (size_t o = num_results; o < j.outputs.size(); ++o) {
    const ValueId v = j.outputs[o];
    if (!is_const(v) && !td[static_cast<size_t>(v)])
      net.add_edge(2 * static_cast<size_t>(v) + 1, sink, kInf);
  }
  net.max_flow(source, sink);
  const std::vector<bool> side = net.source_side(source);

  Partition p;
  std::vector<bool> saved(nv, false);
  for (size_t v = 0; v < nv; ++v) {
    if (td[v] || is_const(static_cast<ValueId>(v))) continue;
    if (side[2 * v] && !side[2 * v + 1]) {
      saved[v] = true;
      p.saved.push_back(static_cast<ValueId>(v));
      p.saved_bytes += value_bytes(j.values[v]);
    }
  }
  // The backward: the nodes its results need, back to the saved values, tangents and constants.
  std::vector<bool> in_bwd(j.nodes.size(), false), in_fwd(j.nodes.size(), false);
  auto walk = [&](std::vector<ValueId> todo, std::vector<bool>& mark, bool stop_at_saved) {
    while (!todo.empty()) {
      const ValueId v = todo.back();
      todo.pop_back();
      const int32_t k = producer[static_cast<size_t>(v)];
      if (k < 0 || mark[static_cast<size_t>(k)] || (stop_at_saved && saved[static_cast<size_t>(v)]))
        continue;
      mark[static_cast<size_t>(k)] = true;
      for (ValueId u : operands(j.nodes[static_cast<size_t>(k)])) todo.push_back(u);
    }
  };
  walk(std::vector<ValueId>(j.outputs.begin() + static_cast<std::ptrdiff_t>(num_results),
                            j.outputs.end()),
       in_bwd, true);
  std::vector<ValueId> fwd_roots(j.outputs.begin(),
                                 j.outputs.begin() + static_cast<std::ptrdiff_t>(num_results));
  fwd_roots.insert(fwd_roots.end(), p.saved.begin(), p.saved.end());
  walk(fwd_roots, in_fwd, false);
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    LOOM_INTERNAL_ASSERT(!(in_fwd[k] && bwd_node[k]), "[compile] joint graph: node ", k, " (",
                         j.nodes[k].op.name(), ") reads a tangent but the forward needs it");
    if (in_fwd[k]) p.forward_nodes.push_back(static_cast<int32_t>(k));
    if (in_bwd[k]) p.backward_nodes.push_back(static_cast<int32_t>(k));
    if (in_bwd[k] && !bwd_node[k]) {
      LOOM_INTERNAL_ASSERT(is_recomputable(j, j.nodes[k]), "[compile] joint graph: the cut left ",
                           j.nodes[k].op.name(), " (node ", k, ") to the backward");
      // Run by both halves; a node only the backward needs is not a recomputation.
      if (in_fwd[k]) p.recomputed.push_back(static_cast<int32_t>(k));
    }
  }
  return p;
}

bool smallest_saving(const Graph& j, size_t num_primal, size_t num_results, int max_candidates,
                     int64_t* bytes) {
  const size_t nv = j.values.size();
  std::vector<bool> td(nv, false), bwd_node(j.nodes.size(), false);
  std::vector<size_t> candidates;
  for (size_t v = 0; v < nv; ++v) {
    const Value& x = j.values[v];
    if (x.kind == Value::Kind::Input && static_cast<size_t>(x.index) >= num_primal) td[v] = true;
  }
  for (size_t k = 0; k < j.nodes.size(); ++k) {
    for (ValueId u : operands(j.nodes[k])) bwd_node[k] = bwd_node[k] || td[static_cast<size_t>(u)];
    if (bwd_node[k])
      for (const auto& r : j.nodes[k].returns)
        for (ValueId w : r) td[static_cast<size_t>(w)] = true;
  }
  for (size_t v = 0; v < nv; ++v)
    if (!td[v] && j.values[v].kind != Value::Kind::Constant) candidates.push_back(v);
  if (candidates.size() > static_cast<size_t>(max_candidates)) return false;
  int64_t best = kInf;
  std::vector<bool> saved(nv);
  std::vector<int8_t> memo(nv);  // 0 unknown, 1 available, 2 not
  for (uint64_t mask = 0; mask < (uint64_t{1} << candidates.size()); ++mask) {
    int64_t cost = 0;
    std::fill(saved.begin(), saved.end(), false);
    for (size_t c = 0; c < candidates.size(); ++c) {
      if ((mask >> c) & 1) {
        saved[candidates[c]] = true;
        cost += value_bytes(j.values[candidates[c]]);
      }
    }
    if (cost >= best) continue;
    std::fill(memo.begin(), memo.end(), 0);
    // Values are numbered after their operands, so one pass in order decides each.
    for (size_t v = 0; v < nv; ++v) {
      const Value& x = j.values[v];
      // A constant, a tangent, a saved value, or an output of a node the backward can run.
      bool ok = x.kind == Value::Kind::Constant || td[v] || saved[v];
      if (x.kind == Value::Kind::NodeOutput && !saved[v]) {
        const Node& n = j.nodes[static_cast<size_t>(x.index)];
        ok = bwd_node[static_cast<size_t>(x.index)] || is_recomputable(j, n);
        for (ValueId u : operands(n)) ok = ok && memo[static_cast<size_t>(u)] == 1;
      }
      memo[v] = ok ? 1 : 2;
    }
    bool valid = true;
    for (size_t o = num_results; o < j.outputs.size(); ++o)
      valid = valid && memo[static_cast<size_t>(j.outputs[o])] == 1;
    if (valid) best = cost;
  }
  *bytes = best;
  return true;
}

Graph extract(const Graph& g, const std::vector<int32_t>& nodes, const std::vector<ValueId>& inputs,
              const std::vector<ValueId>& outputs) {
  Graph out;
  std::vector<ValueId> map(g.values.size(), -1);
  auto add_value = [&](ValueId old, Value v) {
    v.requires_grad = false;
    out.values.push_back(std::move(v));
    map[static_cast<size_t>(old)] = static_cast<ValueId>(out.values.size() - 1);
    return map[static_cast<size_t>(old)];
  };
  out.num_inputs = static_cast<int32_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Value v = g.values[static_cast<size_t>(inputs[i])];
    v.kind = Value::Kind::Input;
    v.index = static_cast<int32_t>(i);
    v.slot = 0;
    add_value(inputs[i], std::move(v));
  }
  auto use = [&](ValueId old) {
    if (map[static_cast<size_t>(old)] >= 0) return map[static_cast<size_t>(old)];
    const Value& v = g.values[static_cast<size_t>(old)];
    LOOM_INTERNAL_ASSERT(v.kind == Value::Kind::Constant, "[compile] extracting a graph: value %",
                         old, " is read before it is computed");
    Value c = v;
    c.index = static_cast<int32_t>(out.constants.size());
    out.constants.push_back(g.constants[static_cast<size_t>(v.index)]);
    return add_value(old, std::move(c));
  };
  for (int32_t k : nodes) {
    Node n = g.nodes[static_cast<size_t>(k)];
    for (Arg& a : n.args) {
      if (a.kind == Arg::Kind::Tensor) a.value = use(a.value);
      for (ValueId& id : a.list) id = use(id);
    }
    const auto index = static_cast<int32_t>(out.nodes.size());
    for (auto& r : n.returns) {
      for (ValueId& id : r) {
        Value v = g.values[static_cast<size_t>(id)];
        v.index = index;
        id = add_value(id, std::move(v));
      }
    }
    out.nodes.push_back(std::move(n));
  }
  for (ValueId o : outputs) out.outputs.push_back(use(o));
  for (size_t k = 0; k < out.nodes.size(); ++k)
    out.steps.push_back(Step{static_cast<int32_t>(k), -1});
  out.compute_releases();
  return out;
}

// Captures g's joint graph on these inputs (Note [Joint graph]): g replayed under a capture with
// detached leaves, then autograd::grad with the tangents as inputs; the constants mapped back to
// the real tensors. Sets j->grad_of. False, with `why`, when it cannot be captured.
bool capture_joint(const Graph& g, const std::vector<Tensor>& inputs,
                   const std::vector<size_t>& grad_results, const PassOptions& passes,
                   JointGraph* j, Graph* joint_out, std::string* why) {
  j->grad_of.clear();
  // Detached leaves for what requires grad; the tangents, made before the capture so that they
  // are its inputs rather than recorded factories.
  std::vector<Tensor> in(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    in[i] = autograd::detach(inputs[i]);
    if (inputs[i].requires_grad()) in[i].requires_grad_(true);
  }
  Graph g0 = g;
  std::unordered_map<const TensorImpl*, size_t> alias_of;  // alias -> constant index
  for (size_t k = 0; k < g0.constants.size(); ++k) {
    const Tensor& c = g.constants[k];
    if (!c.defined()) continue;
    g0.constants[k] = autograd::detach(c);
    if (c.requires_grad()) g0.constants[k].requires_grad_(true);
    alias_of[g0.constants[k].impl()] = k;
  }
  std::vector<Tensor> capture_in = in;
  const std::vector<int64_t> symbols =
      g.symbols.empty() ? std::vector<int64_t>{} : g.bind_symbols(inputs);
  for (size_t k : grad_results) {
    const Value& v = g.values[static_cast<size_t>(g.outputs[k])];
    std::vector<int64_t> sizes = v.sizes;
    for (size_t d = 0; d < v.sym_sizes.size() && !symbols.empty(); ++d)
      sizes[d] = v.sym_sizes[d].eval(symbols);
    capture_in.push_back(ones(sizes, TensorOptions(v.dtype).with_device(v.device)));
  }
  Graph joint;
  const GeneratorState rng = default_generator().state();
  try {
    // Note [Joint graph]: autocast off, as an eager backward runs.
    AutocastGuard no_cpu_autocast(DeviceType::CPU, autocast_dtype(DeviceType::CPU), false);
    AutocastGuard no_cuda_autocast(DeviceType::CUDA, autocast_dtype(DeviceType::CUDA), false);
    Capture cap(capture_in, passes.decompose);
    autograd::AutoGradMode grad_on(true);
    std::vector<Tensor> results;
    HostMismatch mismatch;
    g0.run(in, &results, &mismatch);
    for (size_t k = 0; k < results.size() && why->empty(); ++k) {
      const void* s = storage_of(results[k]);
      for (const Tensor& t : in)
        if (s != nullptr && storage_of(t) == s)
          *why = "result " + std::to_string(k) + " is a view of an input";
      for (const Tensor& t : g0.constants)
        if (s != nullptr && storage_of(t) == s)
          *why = "result " + std::to_string(k) + " is a view of a constant";
    }
    std::vector<Tensor> wrt, roots, tangents;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].defined() && in[i].requires_grad()) {
        wrt.push_back(in[i]);
        j->grad_of.push_back(static_cast<int>(i));
      }
    }
    for (size_t k = 0; k < g0.constants.size(); ++k) {
      if (g0.constants[k].defined() && g0.constants[k].requires_grad()) {
        wrt.push_back(g0.constants[k]);
        j->grad_of.push_back(-1 - static_cast<int>(k));
      }
    }
    for (size_t t = 0; t < grad_results.size(); ++t) {
      roots.push_back(results[grad_results[t]]);
      tangents.push_back(capture_in[in.size() + t]);
    }
    if (wrt.empty() && why->empty()) *why = "no input or constant requires grad";
    const size_t forward_constants = cap.num_constants();
    std::vector<Tensor> grads;
    if (why->empty()) {
      cap.set_recording_backward(true);
      grads = autograd::grad(roots, wrt, tangents, /*retain_graph=*/false, /*create_graph=*/false,
                             /*allow_unused=*/true);
      cap.set_recording_backward(false);
    }
    std::vector<Tensor> outputs = results;
    std::vector<int> used;
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;
      outputs.push_back(grads[k]);
      used.push_back(j->grad_of[k]);
    }
    j->grad_of = used;
    joint = cap.finish(outputs);
    // A tensor the backward formulas made outside the dispatcher would be frozen into the graph;
    // a number wrapped into a tensor (`grad * 2`) is a constant by nature.
    for (size_t k = forward_constants; k < joint.constants.size() && why->empty(); ++k) {
      const Tensor& c = joint.constants[k];
      if (c.defined() && !(c.dim() == 0 && c.impl()->is_wrapped_number())) {
        std::string reader = "an operator";
        for (size_t v = 0; v < joint.values.size(); ++v) {
          const Value& x = joint.values[v];
          if (x.kind != Value::Kind::Constant || static_cast<size_t>(x.index) != k) continue;
          for (const Node& n : joint.nodes) {
            const std::vector<ValueId> ops = operands(n);
            if (std::find(ops.begin(), ops.end(), static_cast<ValueId>(v)) != ops.end()) {
              reader = n.op.name();
              break;
            }
          }
        }
        *why = "the backward reads a tensor of shape " + c.shape_str() + " (in " + reader +
               ") that was made outside the dispatcher, which the capture cannot replay";
      }
    }
  } catch (const Error& e) {
    *why = std::string("capturing the backward raised ") + e.kind() + ": " + e.what();
  }
  default_generator().set_state(rng);
  if (!why->empty()) return false;
  if (!joint.breaks.empty()) {
    *why = "the backward broke the graph: " + joint.breaks[0].reason;
    return false;
  }
  for (const Node& n : joint.nodes) {
    if (n.op.schema().is_mutable()) {
      *why = "the backward writes in place (" + n.op.name() + ")";
      return false;
    }
  }
  // The joint graph's constants are the aliases: the graphs hold the real tensors.
  for (Tensor& c : joint.constants) {
    auto it = c.defined() ? alias_of.find(c.impl()) : alias_of.end();
    if (it != alias_of.end()) c = g.constants[it->second];
  }
  *joint_out = std::move(joint);
  return true;
}

// Note [Joint graph], dynamic sizes: the joint graph of a dynamic graph is captured at the call's
// sizes and at the two probe sizes of its symbols (g replays at any sizes), and its sizes and
// host ints are fitted to the symbols as the function's were (generalize).
bool generalize_joint(const Graph& g, const std::vector<Tensor>& inputs,
                      const std::vector<size_t>& grad_results, const PassOptions& passes,
                      Graph* joint, std::string* why) {
  std::vector<Graph> probes;
  std::vector<std::vector<int64_t>> values;
  for (int k = 0; k < 2; ++k) {
    values.push_back(probe_values(g.symbols, k));
    const std::vector<Tensor> in = probe_inputs(g.symbols, values.back(), inputs);
    JointGraph scratch;
    Graph probe;
    if (!capture_joint(g, in, grad_results, passes, &scratch, &probe, why)) {
      *why = "at other sizes: " + *why;
      return false;
    }
    probes.push_back(std::move(probe));
  }
  if (!generalize(*joint, probes[0], probes[1], g.symbols, values[0], values[1], why)) {
    *why = "its sizes at other sizes: " + *why;
    return false;
  }
  return true;
}

// A dynamic joint graph's halves bind its symbols from their own inputs: the forward's are the
// function's; the backward's are the saved tensors and tangents, one of which must have a
// dimension that is the symbol itself. False, with `why`, when none has.
bool bind_halves(const Graph& joint, JointGraph* j, std::string* why) {
  j->forward.symbols = joint.symbols;
  std::vector<Symbol> bs = joint.symbols;
  for (size_t s = 0; s < bs.size(); ++s) {
    bs[s].dims.clear();
    for (int32_t i = 0; i < j->backward.num_inputs; ++i) {
      const Value& v = j->backward.values[static_cast<size_t>(i)];
      for (size_t d = 0; d < v.sym_sizes.size(); ++d) {
        const SymExpr& e = v.sym_sizes[d];
        if (e.a == 1 && e.b == 0 && e.syms == std::vector<int>{static_cast<int>(s)})
          bs[s].dims.emplace_back(i, static_cast<int>(d));
      }
    }
    if (bs[s].dims.empty()) {
      *why = "no tensor the backward reads has a dimension of size s" + std::to_string(s);
      return false;
    }
  }
  j->backward.symbols = std::move(bs);
  return true;
}

std::shared_ptr<const JointGraph> build_joint(const Graph& g, const std::vector<Tensor>& inputs,
                                              bool optimize_halves, const PassOptions& passes,
                                              std::string* why) {
  why->clear();
  std::vector<size_t> grad_results;
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (g.values[static_cast<size_t>(g.outputs[k])].requires_grad) grad_results.push_back(k);
  if (grad_results.empty()) return nullptr;  // nothing to differentiate
  if (!g.breaks.empty()) {
    *why = "the graph has a break";
    return nullptr;
  }
  for (const Node& n : g.nodes) {
    if (n.op.schema().is_mutable()) {
      *why = "the function writes in place (" + n.op.name() + ")";
      return nullptr;
    }
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Value& v = g.values[static_cast<size_t>(g.outputs[k])];
    if (v.kind != Value::Kind::NodeOutput) {
      *why = "result " + std::to_string(k) + " is " +
             (v.kind == Value::Kind::Input ? "an input" : "a constant") + " of the function";
      return nullptr;
    }
    for (size_t m = 0; m < k; ++m) {
      if (g.outputs[m] == g.outputs[k]) {
        *why = "results " + std::to_string(m) + " and " + std::to_string(k) + " are one tensor";
        return nullptr;
      }
    }
  }
  auto j = std::make_shared<JointGraph>();
  j->num_results = g.outputs.size();
  j->constants = g.constants;
  Graph joint;
  if (!capture_joint(g, inputs, grad_results, passes, j.get(), &joint, why)) return nullptr;
  // A dynamic graph (Note [Joint graph], dynamic sizes): the joint graph captured at two more
  // sizes, and its sizes fitted to the symbols as the function's were.
  if (!g.symbols.empty() && !generalize_joint(g, inputs, grad_results, passes, &joint, why))
    return nullptr;
  const Partition p = min_cut_partition(joint, inputs.size(), g.outputs.size());
  std::vector<ValueId> primal,
      fwd_out(joint.outputs.begin(),
              joint.outputs.begin() + static_cast<std::ptrdiff_t>(j->num_results));
  for (size_t v = 0; v < joint.values.size(); ++v) {
    const Value& x = joint.values[v];
    if (x.kind == Value::Kind::Input && static_cast<size_t>(x.index) < inputs.size())
      primal.resize(std::max(primal.size(), static_cast<size_t>(x.index) + 1)),
          primal[static_cast<size_t>(x.index)] = static_cast<ValueId>(v);
  }
  fwd_out.insert(fwd_out.end(), p.saved.begin(), p.saved.end());
  j->forward = extract(joint, p.forward_nodes, primal, fwd_out);
  std::vector<ValueId> bwd_in = p.saved;
  for (size_t t = 0; t < grad_results.size(); ++t) {
    for (size_t v = 0; v < joint.values.size(); ++v) {
      const Value& x = joint.values[v];
      if (x.kind == Value::Kind::Input && static_cast<size_t>(x.index) == inputs.size() + t)
        bwd_in.push_back(static_cast<ValueId>(v));
    }
  }
  j->backward = extract(
      joint, p.backward_nodes, bwd_in,
      std::vector<ValueId>(joint.outputs.begin() + static_cast<std::ptrdiff_t>(j->num_results),
                           joint.outputs.end()));
  if (!joint.symbols.empty() && !bind_halves(joint, j.get(), why)) return nullptr;
  j->num_saved = p.saved.size();
  j->result_requires_grad.assign(g.outputs.size(), false);
  for (size_t k : grad_results) j->result_requires_grad[k] = true;

  std::string saved_names, recomputed;
  for (ValueId v : p.saved) {
    const Value& x = joint.values[static_cast<size_t>(v)];
    if (!saved_names.empty()) saved_names += ", ";
    saved_names += x.kind == Value::Kind::Input
                       ? "input " + std::to_string(x.index)
                       : joint.nodes[static_cast<size_t>(x.index)].op.name();
  }
  for (int32_t k : p.recomputed) {
    const std::string name = joint.nodes[static_cast<size_t>(k)].op.name();
    if (recomputed.find(name) == std::string::npos)
      recomputed += (recomputed.empty() ? "" : ", ") + name;
  }
  j->summary = "joint graph: " + std::to_string(joint.nodes.size()) +
               " node(s): " + std::to_string(p.forward_nodes.size()) + " forward, " +
               std::to_string(p.backward_nodes.size()) + " backward; the min cut saves " +
               std::to_string(p.saved.size()) + " tensor(s) (" + bytes_str(p.saved_bytes) +
               (saved_names.empty() ? "" : ": " + saved_names) + ") and recomputes " +
               std::to_string(p.recomputed.size()) + " node(s) in the backward" +
               (recomputed.empty() ? "" : " (" + recomputed + ")");
  j->joint = std::move(joint);
  if (optimize_halves) {
    optimize(j->forward, passes);
    optimize(j->backward, passes);
  }
  return j;
}

std::vector<Tensor> run_joint(const std::shared_ptr<const JointGraph>& j,
                              const std::vector<Tensor>& inputs) {
  std::vector<Tensor> all;
  {
    autograd::NoGradGuard no_grad;
    HostMismatch mismatch;
    j->forward.run(inputs, &all, &mismatch);
  }
  std::vector<Tensor> results(all.begin(),
                              all.begin() + static_cast<std::ptrdiff_t>(j->num_results));
  if (!autograd::GradMode::is_enabled()) return results;
  auto node = std::make_shared<CompiledBackward>(
      j, std::vector<Tensor>(all.begin() + static_cast<std::ptrdiff_t>(j->num_results), all.end()));
  for (int of : j->grad_of) {
    const Tensor& t =
        of >= 0 ? inputs[static_cast<size_t>(of)] : j->constants[static_cast<size_t>(-1 - of)];
    node->mutable_next_edges().push_back(t.requires_grad() ? autograd::gradient_edge(t)
                                                           : autograd::Edge());
  }
  uint32_t slot = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    if (!j->result_requires_grad[k]) continue;
    node->add_input_meta(results[k]);
    autograd::set_history(results[k], node, slot++);
  }
  return results;
}

}  // namespace loom::compiler
