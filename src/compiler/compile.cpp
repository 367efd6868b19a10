// loom::compile: guards, the per-function cache of captured graphs, recompiles and their limit,
// graph breaks, logs and reports (see loom/compile.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "compiler/cuda_graph.h"
#include "compiler/graph.h"
#include "compiler/guards.h"
#include "compiler/joint.h"
#include "loom/autograd.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom {
namespace {

using compiler::Capture;
using compiler::Entry;
using compiler::Graph;
using compiler::storage_of;
using compiler::TensorGuard;

struct LogFlags {
  bool recompiles = false, guards = false, graph_breaks = false, output_code = false;
};

// LOOM_LOGS (config::log_enabled).
LogFlags log_flags() {
  LogFlags f;
  f.recompiles = config::log_enabled("recompiles");
  f.guards = config::log_enabled("guards");
  f.graph_breaks = config::log_enabled("graph_breaks");
  f.output_code = config::log_enabled("output_code");
  return f;
}

std::atomic<int> g_unnamed{0};

std::string fmt_ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.0f ms", ms);
  return b;
}

}  // namespace

// Note [Graph breaks]
//   C++ cannot stop a function at a host read and resume it later, as Dynamo resumes a Python
//   frame. What loom can do is keep capturing: the operator whose result goes to the host (item())
//   is recorded as a host node with the value it returned, and the operators after it, which see
//   that value only as host constants, go on into the same graph. Passes treat the host node as a
//   barrier (no fusion across it; values it reads are materialised), so the graph is two compiled
//   halves with the read between them. A replay runs the first half, runs the read, and compares
//   the value with the captured one, bit for bit: equal, the second half is right for it and runs;
//   different, the replay stops and the next cached graph is tried, or the function is captured
//   again (the recompile names the value: "host value 1: loom::_local_scalar_dense returned -3,
//   captured 3"). So values that decided host-side control flow, or fed the operators after the
//   break, are guards.
//   A stopped replay has run the first half; the call then starts over, which is only right when
//   that half may run twice: no in-place write, no random draw (Note [Pure nodes]) before the
//   last host node. A graph that has one there, or a break that is not a host read (a backward
//   pass inside the function), makes the function run eagerly on every call, and a warning says
//   why. A value that changes every call (a running loss) recompiles every call until the
//   recompile limit, whose policy then applies: pass such values as tensors instead.
struct CompiledFunction::Impl {
  TensorFunction fn;
  CompileOptions options;
  mutable std::mutex mu;
  std::vector<std::shared_ptr<Entry>> entries;  // GUARDED_BY(mu), oldest first
  // GUARDED_BY(mu): entry indices in the order a call tries them, from the back: graphs with
  // fixed sizes before dynamic ones, each the newest first. A graph specialised to the call's
  // sizes is the better replay (it may be a joint graph, its kernels have fixed sizes), so after
  // automatic dynamic the first sizes still replay their own graph.
  std::vector<size_t> lookup;
  bool eager_forever = false;                        // GUARDED_BY(mu): after a break or the limit
  std::vector<GraphBreakInfo> breaks;                // GUARDED_BY(mu)
  std::vector<std::string> recompile_reasons;        // GUARDED_BY(mu)
  int64_t calls = 0, captures = 0, eager_calls = 0;  // GUARDED_BY(mu)
  // Dimensions that became symbols after their size changed (automatic dynamic).
  std::set<std::pair<int, int>> auto_dynamic;  // GUARDED_BY(mu)
  // Why sizes stay static for this function ("" while dynamic shapes may still work).
  std::string static_reason;  // GUARDED_BY(mu)
  // Note [Guard growth].
  int64_t check_samples = 0;              // GUARDED_BY(mu)
  double check_ns = 0;                    // GUARDED_BY(mu): their total
  std::deque<int64_t> recent_recompiles;  // GUARDED_BY(mu): the calls that recompiled
  int64_t last_storm = INT64_MIN / 2;     // GUARDED_BY(mu): the call that ended the last storm
  std::vector<std::string> storms;        // GUARDED_BY(mu)
  // Mode reduce-overhead: replays `e` through its CUDA graph, recorded on its first replay; false
  // when it has none (refused, said once), and the replay goes on as in mode default.
  bool replay_cuda_graph(const Entry& e, const std::vector<Tensor>& inputs,
                         std::vector<Tensor>* out) const {
    std::lock_guard<std::mutex> lock(e.cuda_mu);
    if (e.cuda_graph) {
      *out = e.cuda_graph->replay(inputs);
      return true;
    }
    if (e.cuda_graph_tried) return false;
    e.cuda_graph_tried = true;
    std::string why;
    if (e.joint) {
      why = "results require grad (a recording is for inference: run under no_grad)";
    } else if (inputs.empty() || !inputs[0].defined() ||
               inputs[0].device().type() != DeviceType::CUDA) {
      why = "the graph runs on the CPU (CUDA graphs record CUDA work)";
    } else {
      e.cuda_graph = compiler::CudaGraph::record(e.graph, inputs, out, &why);
    }
    if (e.cuda_graph) return true;
    e.cuda_graph_refused = why;
    warn_once("compile.cudagraph:" + options.name,
              "[compile] " + options.name + ": mode reduce-overhead: no CUDA graph: " + why +
                  "; the graph replays without one");
    return false;
  }
  // Note [Decompositions]: captures of backend inductor record decomposed operators.
  bool decomposes() const {
    return options.backend == CompileBackend::Inductor && options.decompose;
  }
  // Calls per (options.buckets index, bucket size).
  std::map<std::pair<size_t, int64_t>, int64_t> bucket_calls;  // GUARDED_BY(mu)

  std::vector<Tensor> call(const std::vector<Tensor>& inputs) {
    return options.buckets.empty() ? call_padded(inputs) : call_padded(pad(inputs));
  }
  // Note [Bucketing] in loom/compile.h.
  std::vector<Tensor> pad(const std::vector<Tensor>& inputs);
  // A storm or a budget overrun since the last look, said once per function.
  void note_recompile(const std::string& why, const LogFlags& logs);  // REQUIRES(mu)
  size_t total_guards() const;                                        // REQUIRES(mu)

  std::vector<Tensor> call_padded(const std::vector<Tensor>& inputs);
  std::vector<Tensor> capture(const std::vector<Tensor>& inputs, const LogFlags& logs);
  // Dimensions of these inputs to make symbols in a new capture.
  std::vector<std::pair<int, int>> dims_to_symbolise(const std::vector<Tensor>& inputs);
  // Probes fn at two other sizes and makes g dynamic; false (static_reason set) when it cannot.
  bool make_dynamic(Graph& g, const std::vector<Tensor>& inputs,
                    const std::vector<std::pair<int, int>>& dims, const LogFlags& logs);
};

std::vector<std::pair<int, int>> CompiledFunction::Impl::dims_to_symbolise(
    const std::vector<Tensor>& inputs) {
  std::set<std::pair<int, int>> want;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (options.dynamic == DynamicShapes::Off || !static_reason.empty()) return {};
    want = auto_dynamic;
  }
  for (const auto& d : options.dynamic_dims) want.insert(d);
  if (options.dynamic == DynamicShapes::On) {
    for (size_t i = 0; i < inputs.size(); ++i)
      for (int64_t d = 0; inputs[i].defined() && d < inputs[i].dim(); ++d)
        want.insert({static_cast<int>(i), static_cast<int>(d)});
  }
  std::vector<std::pair<int, int>> dims;
  for (const auto& [i, d] : want) {
    if (i < 0 || static_cast<size_t>(i) >= inputs.size()) continue;
    const Tensor& t = inputs[static_cast<size_t>(i)];
    // Sizes 0 and 1 stay specialised; so do non-contiguous inputs (strides follow no symbol).
    if (!t.defined() || d < 0 || d >= t.dim() || t.size(d) < 2 || !t.is_contiguous()) continue;
    bool pinned = false;
    for (const auto& p : options.static_dims) pinned = pinned || p == std::make_pair(i, d);
    if (!pinned) dims.emplace_back(i, d);
  }
  return dims;
}

bool CompiledFunction::Impl::make_dynamic(Graph& g, const std::vector<Tensor>& inputs,
                                          const std::vector<std::pair<int, int>>& dims,
                                          const LogFlags& logs) {
  std::string why;
  for (const compiler::Node& n : g.nodes) {
    if (n.is_host()) {
      why = "the function has a graph break (" + n.op.name() +
            "), and its host value at other sizes would need guards of its own";
      break;
    }
    if (n.op.schema().is_mutable()) {
      why = "the function writes in place (" + n.op.name() +
            "), and probing it at other sizes would repeat its writes";
      break;
    }
  }
  // Duck sizing: dimensions of equal size share a symbol.
  std::vector<compiler::Symbol> symbols;
  for (const auto& [i, d] : dims) {
    const int64_t size = inputs[static_cast<size_t>(i)].size(d);
    auto it = std::find_if(symbols.begin(), symbols.end(),
                           [size](const compiler::Symbol& s) { return s.hint == size; });
    if (it == symbols.end()) {
      symbols.push_back(compiler::Symbol{{}, size});
      it = symbols.end() - 1;
    }
    it->dims.emplace_back(i, d);
  }
  std::vector<compiler::Graph> probes;
  std::vector<std::vector<int64_t>> probe_values;
  for (int k = 0; k < 2 && why.empty(); ++k) {
    // Each input with a symbolic dimension is replaced by a fresh one at the probe's sizes.
    probe_values.push_back(compiler::probe_values(symbols, k));
    const std::vector<Tensor> in = compiler::probe_inputs(symbols, probe_values.back(), inputs);
    const GeneratorState rng = default_generator().state();
    try {
      Capture cap(in, decomposes());
      const std::vector<Tensor> out = fn(in);
      probes.push_back(cap.finish(out));
    } catch (const Error& e) {
      why = std::string("probing at other sizes raised ") + e.kind() + ": " + e.what();
    }
    default_generator().set_state(rng);
    if (why.empty() && !probes.back().breaks.empty())
      why = "probing at other sizes broke the graph: " + probes.back().breaks[0].reason;
  }
  if (why.empty() && compiler::generalize(g, probes[0], probes[1], symbols, probe_values[0],
                                          probe_values[1], &why)) {
    if (logs.recompiles) {
      std::string line;
      for (size_t s = 0; s < symbols.size(); ++s) {
        line += (s ? "; s" : "s") + std::to_string(s);
        for (const auto& [i, d] : symbols[s].dims)
          line += " = input " + std::to_string(i) + " dim " + std::to_string(d);
      }
      std::fprintf(stderr, "[compile] %s: dynamic graph: %s\n", options.name.c_str(), line.c_str());
    }
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    static_reason = why;
  }
  warn_once("compile.dynamic:" + options.name,
            "[compile] " + options.name + ": dynamic shapes: sizes stay static: " + why);
  return false;
}

std::vector<Tensor> CompiledFunction::Impl::pad(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> in = inputs;
  for (size_t k = 0; k < options.buckets.size(); ++k) {
    const Bucket& b = options.buckets[k];
    if (static_cast<size_t>(b.input) >= in.size()) continue;
    Tensor& t = in[static_cast<size_t>(b.input)];
    if (!t.defined() || b.dim >= t.dim()) continue;
    const int64_t n = t.size(b.dim);
    auto it = std::lower_bound(b.sizes.begin(), b.sizes.end(), n);
    if (it == b.sizes.end()) continue;  // over the largest bucket: not padded
    if (*it > n) {
      std::vector<int64_t> shape = t.sizes().vec();
      shape[static_cast<size_t>(b.dim)] = *it - n;
      const Tensor fill = full(shape, b.value, TensorOptions(t.dtype()).with_device(t.device()));
      t = cat({t, fill}, b.dim);
    }
    std::lock_guard<std::mutex> lock(mu);
    ++bucket_calls[{k, *it}];
  }
  return in;
}

// Note [Guard growth]
//   Guards cost on every call: each cached graph's are checked (fixed sizes before dynamic, newest
//   first) until one holds, so a function that recompiles often pays for all its graphs. Three
//   things keep that visible. The time to find a call's graph is sampled (one call in eight) and
//   reported; a warning says once when it passes guard_time_budget_us on average, or when the
//   graphs' guards together pass guard_budget. And a recompile storm, 4 recompiles within 16 calls,
//   is reported with the guard that failed last, and said once: it is the sign of a value that
//   changes every call (a size that dynamic shapes cannot follow, a host value read with item()),
//   where dynamic=on, buckets (Note [Bucketing]) or passing the value as a tensor would stop it.
constexpr int64_t kStormWindow = 16;
constexpr size_t kStormRecompiles = 4;

size_t CompiledFunction::Impl::total_guards() const {
  size_t n = 0;
  for (const auto& e : entries) n += e->num_guards();
  return n;
}

void CompiledFunction::Impl::note_recompile(const std::string& why, const LogFlags& logs) {
  recent_recompiles.push_back(calls);
  while (!recent_recompiles.empty() && recent_recompiles.front() <= calls - kStormWindow)
    recent_recompiles.pop_front();
  if (recent_recompiles.size() < kStormRecompiles || calls - last_storm < kStormWindow) return;
  last_storm = calls;
  // The newest graph's failing guard stands for the rest ("graph 3: input 0: sizes ...").
  const size_t cut = why.rfind("; graph ");
  const std::string storm = std::to_string(recent_recompiles.size()) + " recompiles in " +
                            std::to_string(kStormWindow) + " calls ending at call " +
                            std::to_string(calls) +
                            "; the last: " + (cut == std::string::npos ? why : why.substr(cut + 2));
  storms.push_back(storm);
  if (logs.recompiles)
    std::fprintf(stderr, "[compile] %s: recompile storm: %s\n", options.name.c_str(),
                 storm.c_str());
  warn_once("compile.storm:" + options.name,
            "[compile] " + options.name + ": recompile storm: " + storm +
                " (dynamic=on, CompileOptions::buckets or passing the value as a tensor would "
                "stop it)");
}

std::vector<Tensor> CompiledFunction::Impl::call_padded(const std::vector<Tensor>& inputs) {
  // Inside another function's capture: run inline, so that its graph records these operators.
  if (Capture::active()) return fn(inputs);
  const LogFlags logs = log_flags();
  // Per graph (0-based): the guard that failed, for the recompile's reason.
  std::map<size_t, std::string> failed;
  size_t unchecked = SIZE_MAX;  // lookup[0, unchecked) are still to try, from the back
  {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
  }
  for (;;) {
    std::shared_ptr<Entry> hit;
    size_t hit_index = 0;
    bool eager = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      const bool sample = unchecked == SIZE_MAX && (calls & 7) == 2 && !entries.empty();
      const auto t0 =
          sample ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      if (!eager_forever) {
        size_t hit_pos = 0;
        for (size_t p = std::min(unchecked, lookup.size()); p-- > 0;) {
          const size_t k = lookup[p];
          const int g = entries[k]->check(inputs, nullptr);  // no text until it is needed
          if (g < 0) {
            hit = entries[k];
            hit_index = k;
            hit_pos = p;
            break;
          }
          ++entries[k]->failures[static_cast<size_t>(g)];
          failed[k].clear();
        }
        unchecked = hit ? hit_pos : 0;
      }
      if (sample) {
        check_ns += static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - t0)
                                            .count());
        if (++check_samples == 64 && check_ns / 64e3 > options.guard_time_budget_us) {
          char b[64];
          std::snprintf(b, sizeof(b), "%.1f us", check_ns / 64e3);
          warn_once("compile.guard_time:" + options.name,
                    "[compile] " + options.name + ": finding a call's graph takes " + b +
                        " on average over " + std::to_string(entries.size()) + " graph(s) and " +
                        std::to_string(total_guards()) + " guards, over the budget of " +
                        std::to_string(options.guard_time_budget_us) + " us");
        }
      }
      std::string why;  // every graph's first failing guard, "graph 1: ...; graph 2: ..."
      for (auto& [k, w] : failed) {
        if (!hit && w.empty()) entries[k]->check(inputs, &w);
      }
      // Past three graphs, the oldest and the newest stand for the rest (the report counts
      // each guard's failures).
      size_t seen = 0;
      for (const auto& [k, w] : failed) {
        ++seen;
        if (failed.size() > 3 && seen != 1 && seen != failed.size()) continue;
        why += (why.empty() ? "graph " : "; graph ") + std::to_string(k + 1) + ": " + w;
      }
      if (failed.size() > 3)
        why += " (and " + std::to_string(failed.size() - 2) + " graph(s) between failed too)";
      if (!hit && !eager_forever && !entries.empty()) {
        if (static_cast<int>(entries.size()) >= options.recompile_limit) {
          const std::string msg = "[compile] " + options.name + ": recompile limit of " +
                                  std::to_string(options.recompile_limit) +
                                  " graphs reached (the last guard to fail: " + why + ")";
          LOOM_CHECK_AS(CompileError, options.on_limit != RecompilePolicy::Error, msg);
          eager_forever = true;
          warn_once(
              "compile.limit:" + options.name,
              msg + "; the function runs eagerly from now on (loom::explain shows the guards)");
        } else {
          // Automatic dynamic: the dimensions whose size changed against the newest graph.
          const Entry& last = *entries.back();
          if (options.dynamic == DynamicShapes::Auto && static_reason.empty() &&
              last.inputs.size() == inputs.size()) {
            std::string changed;
            for (size_t i = 0; i < inputs.size(); ++i) {
              const TensorGuard& gd = last.inputs[i];
              if (!gd.defined || !inputs[i].defined() ||
                  inputs[i].dim() != static_cast<int64_t>(gd.sizes.size()))
                continue;
              for (size_t d = 0; d < gd.sizes.size(); ++d) {
                const bool symbolic = !gd.symbol.empty() && gd.symbol[d] >= 0;
                const int64_t now = inputs[i].size(static_cast<int64_t>(d));
                if (symbolic || now == gd.sizes[d]) continue;
                if (auto_dynamic.insert({static_cast<int>(i), static_cast<int>(d)}).second) {
                  changed += (changed.empty() ? "" : ", ") + std::string("input ") +
                             std::to_string(i) + " dim " + std::to_string(d) + " (" +
                             std::to_string(gd.sizes[d]) + " -> " + std::to_string(now) + ")";
                }
              }
            }
            if (!changed.empty()) why += "; automatic dynamic: " + changed + " become symbols";
          }
          recompile_reasons.push_back(why);
          note_recompile(why, logs);
          if (logs.recompiles) {
            std::fprintf(stderr, "[compile] %s: recompiling (graph %zu): %s\n",
                         options.name.c_str(), entries.size() + 1, why.c_str());
          }
        }
      }
      if (!hit) {
        eager = eager_forever;
        ++(eager ? eager_calls : captures);
      }
    }
    if (!hit) return eager ? fn(inputs) : capture(inputs, logs);
    std::vector<Tensor> out;
    compiler::HostMismatch m;
    if (options.mode == CompileMode::ReduceOverhead && replay_cuda_graph(*hit, inputs, &out)) {
      std::lock_guard<std::mutex> lock(mu);
      ++hit->replays;
      return out;
    }
    if (hit->joint) {
      out = compiler::run_joint(hit->joint, inputs);
      std::lock_guard<std::mutex> lock(mu);
      ++hit->replays;
      return out;
    }
    if (hit->graph.run(inputs, &out, &m)) {
      std::lock_guard<std::mutex> lock(mu);
      ++hit->replays;
      return out;
    }
    // A host value differs from the captured one: the replay stopped there, and what it ran
    // before is pure (Note [Graph breaks]), so the call goes on as if it had not started.
    std::lock_guard<std::mutex> lock(mu);
    ++hit->failures[hit->host_guard_base() + static_cast<size_t>(m.host_node)];
    failed[hit_index] = "host value " + std::to_string(m.host_node + 1) + ": " + m.why;
  }
}

std::vector<Tensor> CompiledFunction::Impl::capture(const std::vector<Tensor>& inputs,
                                                    const LogFlags& logs) {
  auto e = std::make_shared<Entry>();
  // The guards describe the inputs as the call received them (the function may change them).
  e->grad_mode = autograd::GradMode::is_enabled();
  e->default_dtype = loom::default_dtype();
  e->autocast = Entry::AutocastState::current();
  for (const Tensor& t : inputs) e->inputs.push_back(TensorGuard::of(t));
  for (size_t a = 0; a < inputs.size(); ++a)
    for (size_t b = a + 1; b < inputs.size(); ++b)
      if (storage_of(inputs[a]) != nullptr && storage_of(inputs[a]) == storage_of(inputs[b]))
        e->shared.emplace_back(a, b);
  std::vector<Tensor> out;
  {
    Capture cap(inputs, decomposes());
    out = fn(inputs);
    e->graph = cap.finish(out);
  }
  Graph& g = e->graph;
  if (!g.breaks.empty()) {
    if (logs.graph_breaks) {
      for (const GraphBreakInfo& b : g.breaks) {
        std::fprintf(stderr, "[compile] %s: graph break: %s%s%s%s\n", options.name.c_str(),
                     b.op.empty() ? "" : (b.op + ": ").c_str(), b.reason.c_str(),
                     b.location.empty() ? "" : " at ", b.location.c_str());
      }
    }
    // Note [Graph breaks]: the first break that cannot resume, else the first break.
    auto first = std::find_if(g.breaks.begin(), g.breaks.end(),
                              [](const GraphBreakInfo& b) { return !b.resumed; });
    std::string impure;  // a node before the last host node that must not run twice
    const std::vector<int32_t> host = g.host_nodes();
    if (first == g.breaks.end()) {
      for (int32_t k = 0; !host.empty() && k < host.back() && impure.empty(); ++k) {
        const compiler::Node& n = g.nodes[static_cast<size_t>(k)];
        if (!n.is_host() && !compiler::is_pure(n)) impure = n.op.name();
      }
      first = g.breaks.begin();
    }
    const bool eager_from_now = !first->resumed || !impure.empty();
    const std::string what = (first->op.empty() ? "" : first->op + ": ") + first->reason +
                             (first->location.empty() ? "" : " at " + first->location);
    bool first_time = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      first_time = breaks.empty();
      for (const GraphBreakInfo& b : g.breaks) {
        const bool known =
            std::any_of(breaks.begin(), breaks.end(), [&](const GraphBreakInfo& seen) {
              return seen.op == b.op && seen.location == b.location;
            });
        if (!known) breaks.push_back(b);
      }
      eager_forever = eager_forever || eager_from_now;
    }
    LOOM_CHECK_AS(CompileError, !options.fullgraph, "[compile] ", options.name,
                  ": graph break with fullgraph=true: ", what);
    if (eager_from_now) {
      for (GraphBreakInfo& b : g.breaks) b.resumed = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (GraphBreakInfo& b : breaks) b.resumed = false;
      }
      const std::string because =
          impure.empty() ? ""
                         : " (the graph cannot resume after it: " + impure +
                               " runs before it, and a replay whose host value differs would "
                               "have to run it again)";
      warn_once("compile.break:" + options.name,
                "[compile] " + options.name + ": graph break: " + what + because +
                    "; the function runs eagerly on every call (loom::explain shows every break)");
      return out;
    }
    if (first_time) {
      warn_once("compile.break:" + options.name,
                "[compile] " + options.name + ": graph break: " + what +
                    "; the graph is split there and resumes after it, replayed while the value "
                    "is the one captured (loom::explain shows every break)");
    }
  }
  for (const Tensor& c : g.constants) e->constants.push_back(TensorGuard::of(c));
  const std::vector<std::pair<int, int>> dims = dims_to_symbolise(inputs);
  if (!dims.empty() && make_dynamic(g, inputs, dims, logs)) {
    for (size_t s = 0; s < g.symbols.size(); ++s) {
      for (const auto& [i, d] : g.symbols[s].dims) {
        TensorGuard& gd = e->inputs[static_cast<size_t>(i)];
        if (gd.symbol.empty()) gd.symbol.assign(gd.sizes.size(), -1);
        gd.symbol[static_cast<size_t>(d)] = static_cast<int>(s);
        gd.contiguous_only = true;
      }
    }
  }
  e->failures.assign(e->num_guards(), 0);
  const compiler::PassOptions passes{.fuse = options.backend == CompileBackend::Inductor,
                                     .autotune = options.mode == CompileMode::MaxAutotune,
                                     .decompose = decomposes()};
  if (options.backend == CompileBackend::Aot ||
      (options.backend == CompileBackend::Inductor && options.joint)) {
    std::string why;
    e->joint = compiler::build_joint(g, inputs, /*optimize_halves=*/true, passes, &why);
    if (e->joint) {
      g.pass_log.push_back(e->joint->summary);
    } else if (!why.empty()) {
      g.pass_log.push_back("joint graph: not built: " + why);
      // Backend aot asked for it; inductor falls back to per-group backward kernels, said in the
      // report (and `loom train --compile` prints the line).
      if (options.backend == CompileBackend::Aot || logs.output_code)
        warn_once("compile.joint:" + options.name,
                  "[compile] " + options.name + ": joint graph not built: " + why +
                      "; the replay records autograd per operator" +
                      (options.backend == CompileBackend::Inductor
                           ? " (fused groups get generated backward kernels)"
                           : ""));
    }
  }
  if (!e->joint && options.backend == CompileBackend::Inductor) compiler::optimize(g, passes);
  size_t number = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(e);
    number = entries.size();
    if (e->graph.symbols.empty()) {
      lookup.push_back(number - 1);
    } else {
      lookup.insert(lookup.begin(), number - 1);
    }
    const size_t guards = total_guards();
    if (static_cast<int64_t>(guards) > options.guard_budget) {
      warn_once("compile.guards:" + options.name,
                "[compile] " + options.name + ": " + std::to_string(guards) + " guards over " +
                    std::to_string(number) + " graph(s), over the budget of " +
                    std::to_string(options.guard_budget) +
                    " (each call checks the graphs until one holds)");
    }
  }
  if (logs.output_code) {
    for (const std::string& line : g.pass_log)
      std::fprintf(stderr, "[compile] %s: pass: %s\n", options.name.c_str(), line.c_str());
    for (const auto& [label, gr] : e->replayed()) {
      const std::string what = label.empty() ? "" : " (" + label + ")";
      std::fprintf(stderr, "[compile] %s: graph %zu%s:\n%s", options.name.c_str(), number,
                   what.c_str(), gr->str().c_str());
      if (gr != &g) {
        for (const std::string& line : gr->pass_log)
          std::fprintf(stderr, "[compile] %s: pass%s: %s\n", options.name.c_str(), what.c_str(),
                       line.c_str());
      }
      for (const compiler::FusedKernel& f : gr->kernels) {
        for (const compiler::FusedKernel* k : {&f, f.backward.get()}) {
          if (k == nullptr) continue;
          std::fprintf(stderr, "[compile] %s: %s%s (%s): %s\n%s", options.name.c_str(),
                       k->name.c_str(), what.c_str(), k->ops.c_str(), k->library_path.c_str(),
                       k->source.c_str());
        }
      }
    }
  }
  if (logs.guards) {
    for (const std::string& line : e->describe_guards())
      std::fprintf(stderr, "[compile] %s: guard: %s\n", options.name.c_str(), line.c_str());
  }
  return out;
}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) const {
  return impl_->call(inputs);
}

const CompileOptions& CompiledFunction::options() const {
  return impl_->options;
}

CompileReport CompiledFunction::report() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  CompileReport r;
  r.name = impl_->options.name;
  r.calls = impl_->calls;
  r.captures = impl_->captures;
  r.eager_calls = impl_->eager_calls;
  r.breaks = impl_->breaks;
  r.recompile_reasons = impl_->recompile_reasons;
  r.guards = static_cast<int64_t>(impl_->total_guards());
  r.guard_check_us = impl_->check_samples > 0
                         ? impl_->check_ns / static_cast<double>(impl_->check_samples) / 1e3
                         : 0;
  r.storms = impl_->storms;
  for (const auto& [key, n] : impl_->bucket_calls) {
    const Bucket& b = impl_->options.buckets[key.first];
    r.buckets.push_back("input " + std::to_string(b.input) + " dim " + std::to_string(b.dim) +
                        " -> " + std::to_string(key.second) + ": " + std::to_string(n) +
                        " call(s)");
  }
  for (const auto& e : impl_->entries) {
    GraphInfo gi;
    gi.replays = e->replays;
    gi.operators = static_cast<int64_t>(e->graph.nodes.size());
    const std::vector<std::string> text = e->describe_guards();
    for (size_t i = 0; i < text.size(); ++i)
      gi.guards.push_back(GuardInfo{text[i], e->failures[i]});
    gi.passes = e->graph.pass_log;
    if (impl_->options.mode == CompileMode::ReduceOverhead) {
      std::lock_guard<std::mutex> cuda_lock(e->cuda_mu);
      gi.passes.push_back(e->cuda_graph ? e->cuda_graph->str()
                          : e->cuda_graph_tried
                              ? "cuda graph: not recorded: " + e->cuda_graph_refused
                              : "cuda graph: recorded on the graph's first replay");
    }
    // A joint graph's backward half labels its operators, passes, kernels and code.
    for (const auto& [label, g] : e->replayed()) {
      const std::string tag = label == "backward" ? " (backward)" : "";
      for (const auto& [op, n] : g->op_counts()) gi.op_counts[op + tag] += n;
      if (g != &e->graph)
        for (const std::string& p : g->pass_log) gi.passes.push_back(label + ": " + p);
      if (!g->memory.take.empty()) {
        const int64_t taken = g->memory.counters->taken.load();
        const int64_t refused = g->memory.counters->refused.load();
        gi.buffers_taken += taken;
        gi.buffers_refused += refused;
        gi.passes.push_back((label.empty() ? "" : label + ": ") + "memory plan at run time: " +
                            std::to_string(taken) + " buffer(s) taken, " + std::to_string(refused) +
                            " refused (held elsewhere)");
      }
      for (const compiler::FusedKernel& f : g->kernels) {
        for (const compiler::FusedKernel* k : {&f, f.backward.get()}) {
          if (k == nullptr) continue;
          gi.kernels.push_back(KernelInfo{k->name + tag, k->ops, k->library_path, k->cache_hit,
                                          k->build_ms, k->tuning_log()});
        }
      }
      gi.code += (label.empty() ? "" : label + ":\n") + g->str();
    }
    r.graphs.push_back(std::move(gi));
  }
  return r;
}

std::string CompileReport::str() const {
  std::ostringstream os;
  os << name << ": " << calls << " call(s), " << captures << " capture(s), " << graphs.size()
     << " graph(s), " << breaks.size() << " graph break(s), " << eager_calls << " eager call(s)\n";
  for (size_t i = 0; i < breaks.size(); ++i) {
    const GraphBreakInfo& b = breaks[i];
    os << "graph break " << i + 1 << ": " << (b.op.empty() ? "" : b.op + ": ") << b.reason
       << (b.location.empty() ? "" : "\n  at " + b.location) << '\n';
  }
  for (size_t i = 0; i < recompile_reasons.size(); ++i)
    os << "recompile " << i + 1 << ": " << recompile_reasons[i] << '\n';
  char check[64];
  std::snprintf(check, sizeof(check), "%.2f us", guard_check_us);
  os << "guards: " << guards << " over " << graphs.size()
     << " graph(s); finding a call's graph: " << (guard_check_us > 0 ? check : "not sampled yet")
     << '\n';
  for (const std::string& st : storms) os << "recompile storm: " << st << '\n';
  for (const std::string& b : buckets) os << "bucket: " << b << '\n';
  for (size_t i = 0; i < graphs.size(); ++i) {
    const GraphInfo& g = graphs[i];
    os << "graph " << i + 1 << ": " << g.operators << " operator call(s), replayed " << g.replays
       << " time(s)\n  operators:";
    for (const auto& [op, n] : g.op_counts) os << ' ' << op << " x" << n;
    os << "\n  guards:\n";
    for (const GuardInfo& gd : g.guards) {
      os << "    " << gd.text;
      if (gd.failures > 0) os << "  (failed " << gd.failures << "x)";
      os << '\n';
    }
    for (const std::string& p : g.passes) os << "  pass: " << p << '\n';
    for (const KernelInfo& k : g.kernels) {
      os << "  kernel " << k.name << ": " << k.ops << "\n    "
         << (k.cache_hit ? "from the kernel cache" : "built in " + fmt_ms(k.build_ms)) << ": "
         << k.library_path << '\n';
      if (!k.tuning.empty()) os << "    autotuned: " << k.tuning << '\n';
    }
    os << "  code:\n";
    std::istringstream code(g.code);
    std::string line;
    while (std::getline(code, line)) os << "    " << line << '\n';
  }
  return os.str();
}

CompiledFunction compile(TensorFunction fn, CompileOptions options) {
  LOOM_CHECK(static_cast<bool>(fn), "[compile] compile() needs a function");
  LOOM_CHECK(options.recompile_limit >= 1, "[compile] recompile_limit must be at least 1, got ",
             options.recompile_limit);
  for (const Bucket& b : options.buckets) {
    LOOM_CHECK(b.input >= 0 && b.dim >= 0 && !b.sizes.empty(),
               "[compile] a bucket needs an input >= 0, a dim >= 0 and sizes; got input ", b.input,
               " dim ", b.dim, " with ", b.sizes.size(), " size(s)");
    for (size_t i = 0; i < b.sizes.size(); ++i) {
      LOOM_CHECK(b.sizes[i] >= 1 && (i == 0 || b.sizes[i] > b.sizes[i - 1]),
                 "[compile] bucket sizes of input ", b.input, " dim ", b.dim,
                 " must be positive and ascending; size ", i, " is ", b.sizes[i]);
    }
  }
  if (options.name.empty()) options.name = "compiled function #" + std::to_string(++g_unnamed);
  CompiledFunction f;
  f.impl_ = std::make_shared<CompiledFunction::Impl>();
  f.impl_->fn = std::move(fn);
  f.impl_->options = std::move(options);
  return f;
}

CompileReport explain(TensorFunction fn, const std::vector<Tensor>& inputs,
                      CompileOptions options) {
  CompiledFunction f = compile(std::move(fn), std::move(options));
  f(inputs);
  return f.report();
}

}  // namespace loom
