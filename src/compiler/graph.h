// The graph IR and the capture layer of the compiler (compiler layer; internal).
//
// A Graph is a straight-line program over values. A value is one of the graph's inputs, a
// constant (a tensor held by the graph), or an output of a node; a node is one operator call whose
// arguments are values, lists of values, or host constants (IValues). Capture builds a Graph by
// recording the operators that reach the Capture dispatch key on this thread (Note [How loom
// captures] in loom/compile.h); Graph::run replays it.
//
// Thread-safety: a Graph is immutable once captured and may be run from several threads; a
// Capture belongs to the thread that made it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/compile.h"
#include "loom/dispatch.h"
#include "loom/ivalue.h"
#include "loom/tensor.h"

namespace loom::autograd {
class Node;
}

namespace loom::compiler {

using ValueId = int32_t;

// Note [Symbolic sizes]: an integer of a dynamic graph that follows the inputs' sizes, written
// a * (product of symbols) + b; a constant when syms is empty. Symbols are numbered per graph and
// bound, on every call, from the input dimensions they stand for (compiler/dynamic.cpp).
struct SymExpr {
  int64_t a = 0, b = 0;
  std::vector<int> syms;  // sorted; a symbol may repeat (s0*s0)

  static SymExpr constant(int64_t v) { return SymExpr{0, v, {}}; }
  bool is_constant() const { return syms.empty() || a == 0; }
  int64_t eval(const std::vector<int64_t>& symbols) const;
  std::string str() const;  // "64*s0 + 1", "s1", "7"
};

// A size symbol: the input dimensions it stands for (duck sizing: dimensions of equal size share
// one), the size it had when captured, and the guards it implies: all its dimensions equal, >= 2.
struct Symbol {
  std::vector<std::pair<int, int>> dims;  // (input, dim)
  int64_t hint = 0;
};

struct Value {
  enum class Kind : uint8_t { Input, Constant, NodeOutput };
  Kind kind = Kind::Input;
  int32_t index = 0;  // the input's position, the constant's, or the node's
  int32_t slot = 0;   // which tensor output of the node
  // What the value was when captured, for printing.
  DType dtype = kFloat32;
  Device device = kCPU;
  std::vector<int64_t> sizes;
  bool contiguous = true;
  bool requires_grad = false;      // after the capture's autograd recorded it
  std::vector<SymExpr> sym_sizes;  // in a dynamic graph: the sizes as expressions
};

// One argument of a node: a host constant, a tensor value, an absent tensor, or a list of values.
struct Arg {
  enum class Kind : uint8_t { Constant, Tensor, NoneTensor, TensorList };
  Kind kind = Kind::Constant;
  IValue constant;
  ValueId value = -1;
  std::vector<ValueId> list;
  // In a dynamic graph, a host int (one expression) or int list (one per element) that follows
  // the sizes; empty when the constant is the same for every size.
  std::vector<SymExpr> sym;
};

struct Node {
  OperatorHandle op;
  std::vector<Arg> args;
  // Per return: its tensor values (one for a Tensor, n for a Tensor[]).
  std::vector<std::vector<ValueId>> returns;
  // A host node (Note [Graph breaks] in compiler/compile.cpp): an operator whose results leave
  // the graph for the host (item()); what they were when captured. A replay runs the operator and
  // goes on only while it returns these again.
  std::vector<IValue> host_returns;

  bool is_host() const { return !host_returns.empty(); }
};

// Why a replay stopped at a host node: its position among the graph's host nodes and the value.
struct HostMismatch {
  int host_node = -1;
  std::string why;  // "loom::_local_scalar_dense returned 0.25, captured 1.5"
};

// Host results equal bit for bit (a NaN equals itself); the readable form of one.
bool same_host_value(const IValue& a, const IValue& b);
std::string host_value_str(const IValue& v);

// A pointwise kernel the inductor backend generated for a run of nodes (compiler/fusion.cpp): it
// reads `inputs` (tensors indexed per row and column of the iteration space) and `scalars` (0-dim
// tensors read on the host per call) and writes `outputs`, freshly allocated, contiguous.
struct FusedKernel {
  // out[k][r*cols + c] for r < rows, c < cols; in[j] is read at r*row_strides[j] + c*col_step[j].
  using Fn = void (*)(char* const* data, const double* scalars, const int64_t* row_strides,
                      int64_t cols, int64_t begin, int64_t end);
  std::string name;  // "fused_0"
  std::string ops;   // "mul, add, sigmoid"
  std::vector<ValueId> inputs, scalars, outputs;
  std::vector<int64_t> row_strides;
  std::vector<bool> column_steps;  // per input: read along the columns (else broadcast)
  int64_t rows = 0, cols = 0;
  DType dtype = kFloat32;
  std::vector<int64_t> out_sizes;
  std::vector<SymExpr> out_sym_sizes;  // in a dynamic graph: out_sizes as expressions
  std::string source;                  // the generated C++
  std::string library_path;            // the shared object it was built into
  bool cache_hit = false;              // loaded from the on-disk cache
  double build_ms = 0;                 // the compiler's time (0 on a cache hit)
  Fn fn = nullptr;
  std::shared_ptr<void> library;  // keeps the shared object loaded
  Device device = kCPU;
  // CUDA (cudaKernel_t handles from compiler/cuda_codegen.h): a thread per element, and for
  // float32 a variant of four elements a thread for the flat case (null when absent).
  void* cuda_kernel = nullptr;
  void* cuda_kernel_vec4 = nullptr;
  int cuda_multiprocessors = 0;
  // When a result requires grad (Note [Fused backward] in compiler/fusion.cpp): the kernel that
  // computes the gradients of the inputs from the inputs and the outputs' gradients; a run with
  // grad mode on records a node that calls it. In a backward kernel: the forward input each of
  // its outputs is the gradient of.
  std::shared_ptr<const FusedKernel> backward;
  std::vector<int> grad_inputs;
  std::vector<bool> output_requires_grad;  // as eager: only these get the node as history
  // Note [Reduction fusion]: 0, or 1 sum, 2 mean, 3 amax of each row; the last
  // `reduced_outputs` outputs (the result and the epilogue's values read later) are of
  // reduced_sizes (reduced_sym_sizes in a dynamic graph).
  int reduce = 0;
  int reduced_outputs = 0;
  bool is_reduced_output(size_t k) const {
    return reduce != 0 && k + static_cast<size_t>(reduced_outputs) >= outputs.size();
  }
  std::vector<int64_t> reduced_sizes;
  std::vector<SymExpr> reduced_sym_sizes;
  // Mode max-autotune (Note [Autotuning] in compiler/fusion.cpp): the launch configuration,
  // chosen on the kernel's first run by timing candidates on its real operands; null otherwise.
  struct Tuning;
  std::shared_ptr<Tuning> tuning;
  static std::shared_ptr<Tuning> new_tuning();  // untuned yet
  // "grain 32768: 0.41 ms (8192: 0.45 ms, ...)" once tuned, else "".
  std::string tuning_log() const;
  // In a backward kernel: per forward output, per output of this kernel, whether the gradient
  // reaches it (an input that no output with a gradient depends on gets none, as in eager).
  std::vector<std::vector<bool>> depends;

  // Allocates the outputs and runs the kernel over loom's thread pool; `symbols` are the size
  // symbols' values for this call (a dynamic graph's kernel takes its sizes from them). An
  // output whose entry of `preset` is defined is written there instead (Note [Memory planning]:
  // contiguous, of the output's sizes and dtype, on the kernel's device).
  std::vector<Tensor> run(const std::vector<Tensor>& in, const std::vector<Tensor>& scalar_in,
                          const std::vector<int64_t>& symbols,
                          const std::vector<Tensor>* preset = nullptr) const;
  // Whether a run on these inputs records the backward kernel's node (it then saves them).
  bool records_backward(const std::vector<Tensor>& in) const;

 private:
  std::vector<Tensor> compute(const std::vector<Tensor>& in, const std::vector<Tensor>& scalar_in,
                              const std::vector<int64_t>& symbols,
                              const std::vector<Tensor>* preset) const;
  // With grad mode on and an input that requires grad: the outputs' autograd history.
  void record_backward(const std::vector<Tensor>& in, const std::vector<Tensor>& scalar_in,
                       const std::vector<int64_t>& symbols, std::vector<Tensor>& out) const;
  std::vector<Tensor> run_cuda(const std::vector<Tensor>& in, const std::vector<Tensor>& scalar_in,
                               const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& reduced_sizes, int64_t rows,
                               int64_t cols, const std::vector<int64_t>& row_strides,
                               const std::vector<Tensor>* preset) const;
};

// Note [Memory planning] (compiler/memory_plan.cpp): which buffers the outputs of generated
// kernels take over from values that died before them, or in place from an input that dies at
// the kernel. Decided once over the steps; checked on every call (the buffer is taken only when
// nothing else holds it).
struct MemoryPlan {
  // Per step: per output of its kernel, the value whose buffer it takes, or -1 (a fresh one).
  // Empty when the graph has no plan.
  std::vector<std::vector<ValueId>> take;
  // Per step: the values that give their buffer to this step's kernel in place (they die here).
  std::vector<std::vector<ValueId>> in_place;
  std::vector<bool> donor;  // per value: some later kernel output takes its buffer
  int64_t outputs = 0, reused = 0, written_in_place = 0;  // kernel outputs; of them planned
  int64_t bytes = 0, reused_bytes = 0;                    // what they allocate; of it planned
  // Per call: buffers taken as planned, and refused because something else held them.
  struct Counters {
    std::atomic<int64_t> taken{0}, refused{0};
  };
  std::shared_ptr<Counters> counters = std::make_shared<Counters>();
  std::string str() const;  // "memory plan: 3 of 5 kernel outputs reuse ..."
};

// One step of a replay: a node through the dispatcher, or a fused kernel.
struct Step {
  int32_t node = -1;
  int32_t kernel = -1;
};

struct Graph {
  int32_t num_inputs = 0;
  std::vector<Symbol> symbols;  // empty: every size is specialised
  std::vector<Value> values;
  std::vector<Tensor> constants;
  std::vector<Node> nodes;
  std::vector<ValueId> outputs;  // the function's results
  // What a replay runs, in order: every node once after capture; passes drop, merge and fuse.
  std::vector<Step> steps;
  std::vector<FusedKernel> kernels;
  // Per step: the values whose last use it is, released from the replay's environment once it
  // has run, so that a replay holds no more intermediates than the eager call did.
  std::vector<std::vector<ValueId>> release_after;
  MemoryPlan memory;
  // What the passes did, one line each ("dce: removed 2 nodes").
  std::vector<std::string> pass_log;
  // Graph breaks, each before the node of the same position in `break_at` (a resumed break is
  // at its host node).
  std::vector<GraphBreakInfo> breaks;
  std::vector<size_t> break_at;

  // Replays the steps (nodes through the dispatcher, where Autograd records as in an eager call)
  // and returns the outputs. At a host node whose result differs from the captured one it stops:
  // false, with `mismatch` saying which (what ran before it has run).
  bool run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs,
           HostMismatch* mismatch) const;
  // The host nodes, in order.
  std::vector<int32_t> host_nodes() const;
  // The symbols' values for these inputs (the guards checked that they are consistent).
  std::vector<int64_t> bind_symbols(const std::vector<Tensor>& inputs) const;
  // One node a line: "%3 = loom::mul.Tensor(%1, %2)  # float32 [8, 16]".
  std::string str() const;
  // Operators per name over the steps (a fused kernel counts as "fused").
  std::map<std::string, int64_t> op_counts() const;
  // Recomputes release_after from the steps.
  void compute_releases();
  // The values a step reads and writes.
  std::vector<ValueId> step_reads(const Step& s) const;
  std::vector<ValueId> step_writes(const Step& s) const;
};

// The inductor backend's passes, in order: dead-code elimination, common subexpressions, pointwise
// fusion with C++ code generation (compiler/passes.cpp, compiler/fusion.cpp).
// A fused kernel's iteration space for outputs of `out` sizes and its tensor operands' sizes
// (compiler/fusion.cpp): rows, cols and each operand's row stride and column step; one row of
// numel columns when every operand is same-shape or a broadcast scalar (unless keep_rows: a row
// reduction needs its rows). False when an operand does not broadcast that way.
bool kernel_layout(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& in,
                   int64_t* rows, int64_t* cols, std::vector<int64_t>* rs, std::vector<bool>* cs,
                   bool keep_rows = false);

// Runs node `n` through the dispatcher: its arguments from `env`, its returns written there (a
// host node's results are left on `stack`).
void run_node(const Node& n, std::vector<Tensor>& env, Stack& stack,
              const std::vector<int64_t>& symbols);

// For the autograd node of a compiled backward: appends each gradient that arrived at `node` to
// `in`, contiguous in its forward output's dtype, or zeros of that output's sizes where none did.
void append_grads(std::vector<Tensor>& in, const std::vector<Tensor>& grads,
                  const autograd::Node& node);

// "96 B", "2.5 KiB", "16.5 MiB" (compiler/joint.cpp).
std::string bytes_str(int64_t bytes);

// The storage a tensor's data lives in (identity: views share it), or null when undefined.
inline const void* storage_of(const Tensor& t) {
  return t.defined() ? static_cast<const void*>(t.storage().get()) : nullptr;
}

// Whether the node's operator draws random numbers (rand, dropout, normal, ...).
bool is_random(const Node& n);
// Note [Pure nodes] in compiler/passes.cpp: no in-place write, no random draw, not a host node.
bool is_pure(const Node& n);

struct PassOptions {
  bool fuse = true;
  bool autotune = false;   // mode max-autotune
  bool decompose = false;  // captures decompose (Note [Decompositions]): the joint's backward too
};

// Note [Decompositions] (compiler/decompose.cpp): when `op` has a decomposition that applies to
// the operands on `stack`, runs it in place of the operator (its primitives reach the capture)
// and leaves the result on the stack; false otherwise.
bool decompose(const OperatorHandle& op, Stack* stack);
// The operators that have a decomposition.
std::vector<std::string> decomposed_operators();
void optimize(Graph& g, const PassOptions& options);
// Note [Memory planning]: fills g.memory from the steps and release_after (after fusion).
void plan_memory(Graph& g);

// The symbols' values at probe 0 or 1 (Note [How loom learns symbolic sizes] in
// compiler/dynamic.cpp): distinct from the hints and from each other.
std::vector<int64_t> probe_values(const std::vector<Symbol>& symbols, int probe);
// The inputs for a probe: each input with a symbolic dimension replaced by a fresh one (random,
// or zeros when not floating; requiring grad as it did) with the symbols at `values`.
std::vector<Tensor> probe_inputs(const std::vector<Symbol>& symbols,
                                 const std::vector<int64_t>& values,
                                 const std::vector<Tensor>& inputs);

// Makes g0 (captured at the hints) dynamic in `symbols`, from two more captures of the same
// function at other sizes (probe1, probe2: the symbols' values there): every host int and every
// size that changed between them gets an expression that fits all three. False, with the reason,
// when the graphs differ in structure or an integer follows no expression of the supported form.
bool generalize(Graph& g0, const Graph& g1, const Graph& g2, const std::vector<Symbol>& symbols,
                const std::vector<int64_t>& probe1, const std::vector<int64_t>& probe2,
                std::string* why);

// Records the operators that run on this thread while it lives; at most one per thread.
class Capture {
 public:
  // decompose: operators with a decomposition are recorded as its primitives.
  explicit Capture(const std::vector<Tensor>& inputs, bool decompose = false);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Ends the capture: the graph with `outputs` as its results.
  Graph finish(const std::vector<Tensor>& outputs);

  const std::vector<GraphBreakInfo>& breaks() const { return graph_.breaks; }

  // The thread's capture, or null.
  static Capture* current();
  // True while some capture records on this thread (a compiled function called inside one runs
  // inline).
  static bool active() { return current() != nullptr; }

  // Called by the Capture key's fallback after the operator ran: args are its arguments as they
  // were passed, rets its returns.
  void record(const OperatorHandle& op, const IValue* args, size_t nargs, const IValue* rets,
              size_t nrets);
  // A graph break before the next node; resumed: at a host node, and the graph goes on.
  void add_break(std::string op, std::string reason, bool resumed = false);
  // While set, a backward pass is recorded rather than reported as a break (the joint graph's
  // own, Note [Joint graph] in compiler/joint.h).
  void set_recording_backward(bool on) { recording_backward_ = on; }
  bool recording_backward() const { return recording_backward_; }
  bool decomposing() const { return decompose_; }
  size_t num_constants() const { return graph_.constants.size(); }

 private:
  ValueId value_of(const Tensor& t);
  ValueId new_value(Value v, const Tensor& t);

  Graph graph_;
  bool recording_backward_ = false;
  bool decompose_ = false;
  std::vector<Tensor> tensors_;  // per value: the tensor it was, until finish()
  Capture* previous_;
  // Every tensor seen is kept alive in tensors_ (or aliases_: Capture::value_of) until the
  // capture ends, so that an address in ids_ is never reused by another tensor.
  std::vector<Tensor> aliases_;
  std::unordered_map<const TensorImpl*, ValueId> ids_;
};

// The user's frame that called into loom: "function (binary+0x1234)", or "" when unknown.
std::string user_call_site();

}  // namespace loom::compiler
