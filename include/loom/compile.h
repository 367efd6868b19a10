// The compiler's front door (compiler layer): loom::compile wraps a function over tensors so that
// its operators are captured into a graph once and the graph is replayed, without running the
// function, for as long as the guards of the inputs and of global state hold.
//
// Note [How loom captures]
//   C++ has no bytecode to analyse, so loom captures at the dispatcher. While a compiled function
//   runs for the first time (or after every cached graph's guards failed), its thread includes the
//   Capture dispatch key, whose fallback records each operator below Autograd (CompositeImplicit
//   operators arrive decomposed into the ones they call) with its arguments, and runs it: the call
//   that captures computes its results eagerly. Values of the graph:
//   - inputs: the function's arguments, guarded (dtype, device, sizes, strides, requires_grad, and
//     which inputs share storage);
//   - constants: tensors the function reaches from outside (a module's parameters), held by the
//     graph, so that an optimizer's in-place updates are seen, and guarded on their metadata; a
//     captured variable that the caller rebinds to another tensor is not seen (the graph keeps the
//     old one): pass such tensors as inputs. Host values passed to operators (a float, a size
//     list) are constants too: a function whose host values change between calls must take them
//     as tensor inputs;
//   - outputs of recorded operators: factories and random operators included, so that a replay
//     draws new numbers from the same generator as an eager call would.
//   Global state is guarded too: grad mode and the default dtype.
//   A graph break is where a value must leave the graph for the host: an operator that returns a
//   host value (item(), equal(), allclose()), or a backward pass run inside the function (the
//   function's own backward is captured apart, as its joint graph: see Backends). Each break is
//   recorded with its reason and the user call that caused it, and said once (with fullgraph, the
//   break is a CompileError instead). At a host value the graph resumes (Note [Graph breaks] in
//   compiler/compile.cpp): a replay runs the graph up to the read, produces the value, and goes on
//   while it equals the captured one, a guard; another value is a recompile. A break that cannot
//   resume (a backward pass, or a host read after an in-place write or a random draw) makes the
//   function run eagerly on every call. Calling a compiled function while another one captures runs
//   it inline, so that the outer graph records its operators.
//
// Backends: eager captures and replays the graph through the dispatcher, where autograd records
// each operator as in an eager call. aot builds the joint forward/backward graph when a result
// requires grad: the function's backward is captured below autograd too, and a min cut decides
// which tensors the forward saves and what the backward recomputes (Note [Joint graph] in
// compiler/joint.h); the two halves replay without codegen, the results get one autograd node
// that runs the backward half. inductor (the default) does the same (CompileOptions::joint) and
// runs passes over each half: constant folding, dead-code elimination, common subexpressions, and
// pointwise fusion (ending in a row reduction) with C++ and CUDA code generation, built by the
// system compiler or NVRTC and kept in an on-disk cache (Note [Pointwise fusion] in
// compiler/fusion.cpp, Note [Kernel cache] in compiler/codecache.h); a graph that cannot be a
// joint one (it writes in place, or has dynamic sizes) gives each fused group a generated
// backward kernel instead, and says why in its report. What the passes did is in the report.
// Mode max-autotune times each generated kernel's launch configurations on its first run and
// keeps the fastest (Note [Autotuning] in compiler/kernel_run.cpp). Mode reduce-overhead records
// a graph's replay as one CUDA graph on its first replay (Note [CUDA graphs] in
// compiler/cuda_graph.cpp): inference over CUDA tensors; what it cannot record is said once and
// in the report, and replays as in mode default.
//
// Dynamic shapes (Note [How loom learns symbolic sizes] in compiler/dynamic.cpp): dynamic=auto
// specialises every size at first; when a call fails a graph's guards only because sizes changed,
// those input dimensions become symbols and the recapture is a graph that serves every size of
// them (automatic dynamic: one recompile, not one per size). dynamic=on makes every dimension a
// symbol from the first call, dynamic=off never does (every new size is a recompile). The options
// dynamic_dims and static_dims mark dimensions either way (torch's mark_dynamic, mark_static).
//
// Logs: LOOM_LOGS is a comma list of recompiles, guards, graph_breaks, output_code; each prints
// to stderr as it happens, prefixed "[compile]".
//
// Thread-safety: a CompiledFunction may be called from several threads at once: its cache is
// guarded by a mutex and a capture runs on the calling thread only (two threads missing the cache
// at once both capture, and both graphs are kept).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/tensor.h"

namespace loom {

enum class CompileBackend { Eager, Aot, Inductor };
enum class CompileMode { Default, ReduceOverhead, MaxAutotune };
enum class DynamicShapes { Auto, On, Off };
// What happens once a function has captured `recompile_limit` graphs: warn once and run eagerly
// from then on; throw CompileError; or run eagerly with the same one warning. Never silent.
enum class RecompilePolicy { Warn, Error, Eager };

// Note [Bucketing]: dimension `dim` of input `input` is padded with `value` up to the smallest of
// `sizes` that holds it, before the guards see it, so that every size up to the largest bucket
// runs one of sizes.size() graphs (sizes above the largest are not padded). The function sees,
// and returns, the padded sizes: like a sequence model over padded batches, it must mask what the
// padding adds. An input that requires grad is padded differentiably (its gradient is the
// unpadded part).
struct Bucket {
  int input = 0;
  int dim = 0;
  std::vector<int64_t> sizes{};  // ascending
  double value = 0;
};

struct CompileOptions {
  CompileBackend backend = CompileBackend::Inductor;
  CompileMode mode = CompileMode::Default;
  DynamicShapes dynamic = DynamicShapes::Auto;
  bool fullgraph = false;  // a graph break is a CompileError naming it
  int recompile_limit = 8;
  RecompilePolicy on_limit = RecompilePolicy::Warn;
  std::string name{};  // for logs and reports; "compiled function #N" when empty
  // (input, dim) pairs: symbolic from the first call (unless dynamic=off), or never symbolic.
  std::vector<std::pair<int, int>> dynamic_dims{}, static_dims{};
  std::vector<Bucket> buckets{};  // Note [Bucketing]
  // Backend inductor: when a result requires grad, differentiate the whole function as one joint
  // graph split by a min cut (Note [Joint graph] in compiler/joint.h; backend aot always does).
  // false: each fused group gets its own generated backward and the replay records autograd per
  // step (Note [Fused backward] in compiler/fusion.cpp).
  bool joint = true;
  // Backend inductor: operators with a decomposition are captured as the primitives it calls, so
  // that fusion can take them (Note [Decompositions] in compiler/decompose.cpp: the activations'
  // backward formulas).
  bool decompose = true;
  // Guard growth (Note [Guard growth] in compiler/compile.cpp): a warning, once, when the graphs'
  // guards together pass `guard_budget`, or checking them costs more than `guard_time_budget_us`
  // a call on average.
  int guard_budget = 256;
  double guard_time_budget_us = 10;
};

using TensorFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct GraphBreakInfo {
  std::string op;        // "loom::_local_scalar_dense", or what broke outside an operator
  std::string reason;    // why the value had to leave the graph
  std::string location;  // the user's call that caused it: "function (binary+0x1234)"
  // The graph continues after it: the value is produced by running the graph so far, and the
  // rest is replayed while the value is the one captured (a guard). A break that is not resumed
  // makes the function run eagerly.
  bool resumed = false;
};

struct GuardInfo {
  std::string text;      // "input 0: float32 cuda:0 sizes [8, 16] strides [16, 1]"
  int64_t failures = 0;  // calls for which this was the first guard to fail
};

// A kernel the inductor backend generated and built.
struct KernelInfo {
  std::string name;          // "fused_0"
  std::string ops;           // the operators it fuses: "mul, add, sigmoid"
  std::string library_path;  // the shared object in the kernel cache (the .cpp is beside it)
  bool cache_hit = false;    // found built (on disk or in this process)
  double build_ms = 0;       // the C++ compiler's time, 0 on a hit
  std::string tuning;        // mode max-autotune: the configuration chosen and the timings
};

struct GraphInfo {
  int64_t replays = 0;                       // calls that ran this graph
  int64_t operators = 0;                     // recorded operator calls
  std::map<std::string, int64_t> op_counts;  // per operator name, after the passes
  std::vector<GuardInfo> guards;
  std::vector<std::string> passes;  // what each pass did: "dce: removed 1 node(s)"
  // Note [Memory planning]: kernel outputs written into a dead value's buffer over the replays,
  // and planned ones refused because something else still held the buffer.
  int64_t buffers_taken = 0, buffers_refused = 0;
  std::vector<KernelInfo> kernels;
  std::string code;  // the graph a replay runs, one step a line
};

// What a compiled function did: `loom::explain` and CompiledFunction::report().
struct LOOM_API CompileReport {
  std::string name;
  int64_t calls = 0;
  int64_t captures = 0;     // calls that captured (the first, and every recompile)
  int64_t eager_calls = 0;  // calls that ran the function eagerly after a break or the limit
  std::vector<GraphInfo> graphs;
  std::vector<GraphBreakInfo> breaks;
  std::vector<std::string> recompile_reasons;  // the guard that failed, per recompile
  // Guard growth: the guards of every graph together, the mean time to find a call's graph
  // (sampled), and each recompile storm ("4 recompiles in 16 calls ending at call 9: ...").
  int64_t guards = 0;
  double guard_check_us = 0;
  std::vector<std::string> storms;
  // Per Bucket and bucket size, the calls padded to it: "input 0 dim 1 -> 64: 12 call(s)".
  std::vector<std::string> buckets;
  std::string str() const;
};

class LOOM_API CompiledFunction {
 public:
  // Runs the function: a cached graph whose guards hold, else a capture (or eagerly, per Note
  // [How loom captures]).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  CompileReport report() const;
  const CompileOptions& options() const;

  struct Impl;

 private:
  friend LOOM_API CompiledFunction compile(TensorFunction fn, CompileOptions options);
  std::shared_ptr<Impl> impl_;
};

// NotImplementedError for a backend or mode that does not exist yet.
LOOM_API CompiledFunction compile(TensorFunction fn, CompileOptions options = {});

// Compiles fn, calls it once on `inputs` and reports what the compiler did.
LOOM_API CompileReport explain(TensorFunction fn, const std::vector<Tensor>& inputs,
                               CompileOptions options = {});

}  // namespace loom
