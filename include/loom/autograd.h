// Reverse-mode automatic differentiation (autograd layer).
//
// Recording. Autograd is a dispatch key. A tensor that requires grad (a leaf made with
// requires_grad_(), or the output of a recorded operation) carries the Autograd key, so any
// operator that touches it runs the autograd kernel first: one boxed fallback for every operator.
// It looks up the operator's derivative (declared next to the operator with LOOM_DERIVATIVES, see
// derivatives.h), saves what the derivative needs, runs the operator below Autograd, and makes its
// outputs point to a new graph Node (their grad_fn). Tensors that do not require grad never pay for
// any of this.
//
// The graph. A Node has one input per forward output and one next edge per differentiable forward
// input; an Edge is (node, which input of that node). A leaf that requires grad ends in an
// AccumulateGrad node that adds the incoming gradient into its .grad(). Nodes are owned by
// shared_ptr: tensors own their grad_fn, nodes own the nodes their edges point to. A leaf owns its
// AccumulateGrad node, which points back at the leaf without owning it; an edge to that node also
// holds the leaf, so a graph keeps its leaves alive and nothing forms a cycle (see Note [Leaf owns
// its AccumulateGrad] in variable.cpp).
//
// The engine (Engine::execute, reached from backward() and grad()) counts, for every node reachable
// from the roots, how many edges point at it; then runs nodes from a ready queue, most recently
// created first (highest sequence number, as PyTorch does), summing the gradients that arrive for
// each node's inputs. CPU nodes run on the calling thread; the ready queue is per device so a
// worker per CUDA device can be added without changing the graph.
//
// Saved tensors are checked through the storage version counter: modifying in place a tensor that a
// node saved makes backward throw, naming the operator that saved it.
//
// Thread-safety: building graphs on different threads is safe (sequence numbers are per thread).
// Running backward through one graph from two threads at once, or mutating a tensor's autograd
// state (requires_grad_, grad, hooks) while another thread uses it, is not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/detail/small_vector.h"
#include "loom/export.h"
#include "loom/tensor.h"

namespace loom::autograd {

class Node;

// An input slot of a node: gradients flowing along the edge arrive at fn's input `input_nr`.
struct Edge {
  Edge() = default;
  Edge(std::shared_ptr<Node> node, uint32_t input, Tensor leaf_tensor = Tensor())
      : fn(std::move(node)), input_nr(input), leaf(std::move(leaf_tensor)) {}
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  // Set on an edge to a leaf's AccumulateGrad (gradient_edge does it): the leaf, which owns that
  // node, so that the graph keeps both alive.
  Tensor leaf;
  bool valid() const { return fn != nullptr; }
};

// A hook on a tensor's gradient: returns a replacement gradient, or an undefined tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Runs after a leaf's .grad() was updated; receives the leaf.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// A node of the backward graph. Subclasses implement apply(): gradients of the forward outputs in
// (undefined for outputs that got none), gradients of the forward inputs out, one per next edge.
// (Not enable_shared_from_this: nothing needs it, and its weak count made every node's creation and
// destruction pay two more atomic operations.)
class LOOM_API Node {
 public:
  // What the engine needs to know about each input (= each forward output).
  struct InputMeta {
    DimVector sizes;
    DType dtype = DType::Float32;
    Device device = kCPU;
    // The stream that was current on `device` when the forward produced it (CUDA only; 0 on the
    // CPU): the node's backward runs there (Note [Streams in backward] in engine.cpp).
    StreamId stream = 0;
  };
  // Most nodes have one or two differentiable inputs and one output: those lists live inside the
  // node (one allocation per node instead of three; see loom/detail/small_vector.h).
  using EdgeList = ::loom::detail::SmallVector<Edge, 2>;
  using InputMetaList = ::loom::detail::SmallVector<InputMeta, 1>;

  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward" for the backward of loom::mul; "AccumulateGrad"; "CopySlices".
  virtual std::string name() const = 0;
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Frees saved tensors (after a backward without retain_graph).
  virtual void release_variables() {}
  // The forward operator this node differentiates ("loom::mul"), for errors and anomaly mode.
  virtual std::string forward_op() const { return std::string(); }
  // Whether apply() can add a gradient into a leaf's .grad() itself when the engine offers it
  // (Note [Accumulating into .grad] in engine.cpp).
  virtual bool accepts_grad_sinks() const { return false; }

  uint64_t sequence_nr() const { return sequence_nr_; }
  // Thread that recorded the node (profiler links forward ops to backward nodes by (thread, seq)).
  uint64_t thread_id() const { return thread_id_; }
  const EdgeList& next_edges() const { return next_edges_; }
  EdgeList& mutable_next_edges() { return next_edges_; }
  const InputMetaList& input_meta() const { return input_meta_; }
  uint32_t add_input_meta(const Tensor& t);
  void reserve_input_meta(size_t n) { input_meta_.reserve(n); }
  size_t num_inputs() const { return input_meta_.size(); }
  bool should_compute_output(size_t i) const {
    return i < next_edges_.size() && next_edges_[i].valid();
  }

  // Hooks run on this node's input `input_nr` before apply (tensor hooks of non-leaf tensors).
  void add_pre_hook(uint32_t input_nr, GradHook hook);
  const std::vector<std::pair<uint32_t, GradHook>>& pre_hooks() const { return pre_hooks_; }
  // Set when anomaly mode was on at recording time: the forward op's scope stack.
  std::string anomaly_trace;

 protected:
  EdgeList next_edges_;
  InputMetaList input_meta_;
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks_;
  uint64_t sequence_nr_;
  uint64_t thread_id_;
};

// ---- grad modes (thread-local) ----

// Whether operators record the backward graph on this thread. Off inside NoGradGuard and during a
// backward pass that does not create a graph.
class LOOM_API GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Scoped grad mode: AutoGradMode g(false) is NoGradGuard.
class LOOM_API AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled);
  ~AutoGradMode();
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};
class LOOM_API NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

// Inference mode: no graph is recorded and in-place writes do not bump version counters' checks of
// saved tensors (nothing is saved). Tensors made inside cannot later be used in a recorded
// operation that needs to save them. Cheaper than NoGradGuard only by what it skips; same scoping
// rules.
class LOOM_API InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled();

 private:
  bool prev_grad_;
  bool prev_inference_;
};

// Anomaly mode: every node remembers the forward operator (and user scopes) that created it, and
// the engine checks each backward output for NaN, naming that forward operator. Global.
class LOOM_API AnomalyMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
class LOOM_API DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// ---- tensor-level API (the Tensor methods of the same names forward here) ----

// Only floating-point tensors can require grad; only leaves can change the flag.
LOOM_API void set_requires_grad(const Tensor& t, bool requires_grad);
LOOM_API bool requires_grad(const Tensor& t);
// True for tensors without a grad_fn (tensors that do not require grad are leaves too).
LOOM_API bool is_leaf(const Tensor& t);
LOOM_API std::shared_ptr<Node> grad_fn(const Tensor& t);
LOOM_API uint32_t output_nr(const Tensor& t);
// The accumulated gradient of a leaf (undefined before the first backward). Throws ValueError for a
// non-leaf unless retain_grad() was called on it.
LOOM_API Tensor grad(const Tensor& t);
LOOM_API void set_grad(const Tensor& t, const Tensor& grad);
// Keeps the gradient of a non-leaf in .grad() during backward.
LOOM_API void retain_grad(const Tensor& t);
// Edge along which gradient for t flows: (grad_fn, output_nr), or the AccumulateGrad of a leaf.
LOOM_API Edge gradient_edge(const Tensor& t);
// A tensor sharing t's storage with no autograd history.
LOOM_API Tensor detach(const Tensor& t);
// Hooks: on a leaf they run before accumulation; on a non-leaf when its gradient is computed.
LOOM_API void register_hook(const Tensor& t, GradHook hook);
// Only for leaves that require grad; runs after the leaf's .grad() was updated.
LOOM_API void register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook);

// Clears the gradients of `params` (what Module::zero_grad and Optimizer::zero_grad do): drops them
// (set_to_none) or zeroes them in place; a gradient recorded with create_graph is replaced by zeros
// rather than written into.
LOOM_API void zero_grads(const std::vector<Tensor>& params, bool set_to_none = true);

// Computes gradients of `outputs` and accumulates them into the leaves' .grad(). grad_outputs may
// be empty for scalar outputs (a gradient of 1 is used). retain_graph defaults to create_graph. If
// `inputs` is non-empty, only those tensors accumulate.
LOOM_API void backward(const std::vector<Tensor>& outputs,
                       const std::vector<Tensor>& grad_outputs = {},
                       std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                       const std::vector<Tensor>& inputs = {});

// Returns d(outputs)/d(inputs) · grad_outputs without touching any .grad(). With allow_unused, an
// input the outputs do not depend on gives an undefined tensor instead of an error.
LOOM_API std::vector<Tensor> grad(const std::vector<Tensor>& outputs,
                                  const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& grad_outputs = {},
                                  std::optional<bool> retain_graph = std::nullopt,
                                  bool create_graph = false, bool allow_unused = false);

// ---- gradcheck ----

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool check_backward_twice = true;  // backward must give the same result when re-run
};

// Compares the analytic Jacobian (from backward, one output element at a time) of fn at `inputs`
// (float64 tensors; those that require grad are differentiated) with central finite differences.
// Returns an empty string when they agree, else a report naming the input, output and element.
LOOM_API std::string gradcheck(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});
// The same for the second derivative: checks the gradient of (grad of fn · random v) w.r.t. inputs.
LOOM_API std::string gradgradcheck(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});

// The backward graph reachable from t, one node per line, indented by depth (a node reached twice
// is printed once and referenced by its sequence number): name, forward operator, sequence number,
// and each next edge. For `loom autograd` and debugging.
LOOM_API std::string describe_graph(const Tensor& t);

// Number of nodes created on this thread (the next sequence number); for tests and the profiler.
LOOM_API uint64_t peek_sequence_nr();

// How many gradients a derivative has added straight into a leaf's existing .grad() in this
// process, skipping the separate add (Note [Accumulating into .grad] in src/autograd/engine.cpp).
LOOM_API uint64_t grads_accumulated_in_place();

}  // namespace loom::autograd
