// Graph passes of the inductor backend: constant folding, dead-code elimination and
// common-subexpression elimination, then pointwise fusion (compiler/fusion.cpp).
//
// Note [Pure nodes]
//   Both passes touch only pure nodes: an operator whose schema writes through no argument (no
//   "(a!)"), that is not a host node (a guard) and that draws no random numbers (a replay of a
//   random operator must advance the generator as the eager call did, so it is never dropped or
//   merged). CSE runs only on graphs without in-place writes: after a merge two eager tensors are
//   one, and a write to one of them (or to a view of it) would be seen through the other. Nor does
//   it merge two returned values, which the caller may mutate independently.
#include <cstdio>
#include <map>
#include <string>

#include "compiler/graph.h"
#include "loom/autograd.h"

namespace loom::compiler {

void fuse_pointwise(Graph& g, bool autotune);

namespace {

// Removes pure steps none of whose outputs is read later or returned.
int dead_code(Graph& g) {
  std::vector<bool> live(g.values.size(), false);
  for (ValueId id : g.outputs) live[static_cast<size_t>(id)] = true;
  std::vector<Step> kept;
  int removed = 0;
  for (size_t k = g.steps.size(); k-- > 0;) {
    const Step& s = g.steps[k];
    const std::vector<ValueId> writes = g.step_writes(s);
    // A node without results is called for its effect.
    bool needed = s.kernel >= 0 || !is_pure(g.nodes[static_cast<size_t>(s.node)]) || writes.empty();
    for (ValueId id : writes) needed = needed || live[static_cast<size_t>(id)];
    if (!needed) {
      ++removed;
      continue;
    }
    for (ValueId id : g.step_reads(s)) live[static_cast<size_t>(id)] = true;
    kept.push_back(s);
  }
  g.steps.assign(kept.rbegin(), kept.rend());
  return removed;
}

// Note [Constant folding]: a pure node whose tensor arguments are all folded values (or that has
// none: a factory such as ones() or arange() with sizes that follow no symbol; numbers wrapped
// into tensors count as folded) is run once here, and its results become constants held by the
// graph, so a replay no longer computes them. The graph's other constants are not folded through
// (a module's parameters change between calls), nor are returned values (the caller may write
// into them), values that require grad, or anything in a graph that writes in place (a folded
// value could be written). -1: skipped.
int fold_constants(Graph& g) {
  for (const Step& s : g.steps)
    if (s.kernel < 0 && g.nodes[static_cast<size_t>(s.node)].op.schema().is_mutable()) return -1;
  std::vector<bool> returned(g.values.size(), false), known(g.values.size(), false);
  for (ValueId id : g.outputs) returned[static_cast<size_t>(id)] = true;
  std::vector<Tensor> env(g.values.size());
  // A number the operator wrapped into a tensor (`t * 3.0`) belongs to the graph alone.
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (v.kind != Value::Kind::Constant) continue;
    const Tensor& t = g.constants[static_cast<size_t>(v.index)];
    if (t.defined() && t.impl()->is_wrapped_number()) {
      known[i] = true;
      env[i] = t;
    }
  }
  Stack stack;
  std::vector<Step> kept;
  int folded = 0;
  autograd::NoGradGuard no_grad;
  for (const Step& s : g.steps) {
    if (s.kernel >= 0) {
      kept.push_back(s);
      continue;
    }
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    bool foldable = is_pure(n);
    for (const Arg& a : n.args) {
      foldable = foldable && a.sym.empty();
      if (a.kind == Arg::Kind::Tensor) foldable = foldable && known[static_cast<size_t>(a.value)];
      for (ValueId id : a.list) foldable = foldable && known[static_cast<size_t>(id)];
    }
    for (const auto& r : n.returns) {
      for (ValueId id : r) {
        const Value& v = g.values[static_cast<size_t>(id)];
        foldable = foldable && !returned[static_cast<size_t>(id)] && !v.requires_grad &&
                   v.sym_sizes.empty();
      }
    }
    if (!foldable) {
      kept.push_back(s);
      continue;
    }
    run_node(n, env, stack, {});
    for (const auto& r : n.returns) {
      for (ValueId id : r) {
        Value& v = g.values[static_cast<size_t>(id)];
        v.kind = Value::Kind::Constant;
        v.index = static_cast<int32_t>(g.constants.size());
        g.constants.push_back(env[static_cast<size_t>(id)]);
        known[static_cast<size_t>(id)] = true;
      }
    }
    ++folded;
  }
  g.steps = std::move(kept);
  return folded;
}

// Replaces value `from` by `to` in every argument and output.
void replace_uses(Graph& g, ValueId from, ValueId to) {
  for (Node& n : g.nodes) {
    for (Arg& a : n.args) {
      if (a.kind == Arg::Kind::Tensor && a.value == from) a.value = to;
      for (ValueId& id : a.list)
        if (id == from) id = to;
    }
  }
  for (ValueId& id : g.outputs)
    if (id == from) id = to;
}

// A node's identity for CSE: operator and arguments (value ids and host constants).
std::string node_key(const Node& n) {
  std::string k = n.op.schema().full_name() + "(";
  for (const Arg& a : n.args) {
    switch (a.kind) {
      case Arg::Kind::Constant:
        (k += "c:") += a.constant.repr();
        break;
      case Arg::Kind::Tensor:
        (k += "%") += std::to_string(a.value);
        break;
      case Arg::Kind::NoneTensor:
        k += "none";
        break;
      case Arg::Kind::TensorList:
        k += "[";
        for (ValueId id : a.list) (k += std::to_string(id)) += ",";
        k += "]";
        break;
    }
    k += ";";
  }
  return k + ")";
}

// -1 when the graph writes in place (the pass does not run).
int common_subexpressions(Graph& g) {
  for (const Step& s : g.steps)
    if (s.kernel < 0 && g.nodes[static_cast<size_t>(s.node)].op.schema().is_mutable()) return -1;
  std::vector<bool> returned(g.values.size(), false);
  for (ValueId id : g.outputs) returned[static_cast<size_t>(id)] = true;
  std::map<std::string, size_t> seen;  // key -> node
  std::vector<Step> kept;
  int merged = 0;
  for (const Step& s : g.steps) {
    if (s.kernel >= 0) {
      kept.push_back(s);
      continue;
    }
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    if (!is_pure(n)) {
      kept.push_back(s);
      continue;
    }
    const std::string key = node_key(n);
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen.emplace(key, static_cast<size_t>(s.node));
      kept.push_back(s);
      continue;
    }
    const Node& first = g.nodes[it->second];
    bool both_returned = false;
    for (size_t r = 0; r < n.returns.size(); ++r)
      for (size_t i = 0; i < n.returns[r].size(); ++i)
        both_returned = both_returned || (returned[static_cast<size_t>(n.returns[r][i])] &&
                                          returned[static_cast<size_t>(first.returns[r][i])]);
    if (both_returned) {
      kept.push_back(s);
      continue;
    }
    for (size_t r = 0; r < n.returns.size(); ++r)
      for (size_t i = 0; i < n.returns[r].size(); ++i)
        replace_uses(g, n.returns[r][i], first.returns[r][i]);
    ++merged;
  }
  g.steps = std::move(kept);
  return merged;
}

}  // namespace

bool is_random(const Node& n) {
  const std::string& name = n.op.schema().name;
  for (const char* w : {"rand", "dropout", "bernoulli", "normal", "uniform", "multinomial",
                        "exponential", "geometric", "cauchy", "poisson"}) {
    if (name.find(w) != std::string::npos) return true;
  }
  return false;
}

bool is_pure(const Node& n) {
  return !n.is_host() && !n.op.schema().is_mutable() && !is_random(n);
}

void optimize(Graph& g, const PassOptions& options) {
  const int folded = fold_constants(g);
  g.pass_log.push_back(folded < 0
                           ? "constant folding: skipped (the graph writes in place)"
                           : "constant folding: folded " + std::to_string(folded) + " node(s)");
  const int dead = dead_code(g);
  const int merged = common_subexpressions(g);
  // Merging can leave more dead code behind.
  const int dead2 = merged > 0 ? dead_code(g) : 0;
  g.pass_log.push_back("dce: removed " + std::to_string(dead + dead2) + " node(s)");
  g.pass_log.push_back(merged < 0 ? "cse: skipped (the graph writes in place)"
                                  : "cse: merged " + std::to_string(merged) + " node(s)");
  if (options.fuse) fuse_pointwise(g, options.autotune);
  g.compute_releases();
  plan_memory(g);
  if (!g.kernels.empty()) g.pass_log.push_back(g.memory.str());
}

}  // namespace loom::compiler
