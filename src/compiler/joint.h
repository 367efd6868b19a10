// The joint forward/backward graph and its min-cut partition (compiler layer; internal).
//
// Note [Joint graph]
//   A captured graph records the operators below Autograd, so a replay through the dispatcher
//   records autograd as an eager call does, one node per operator. When some result requires
//   grad, backends aot and inductor build the joint graph instead: the captured graph is replayed
//   once more under a capture, with the inputs and the constants that require grad replaced by
//   detached leaves, and autograd::grad(results, those leaves, tangents) runs inside the same
//   capture, where the tangents (one per result that requires grad) are inputs of the capture.
//   The backward formulas call operators through the dispatcher, so the capture records them too:
//   one graph whose inputs are the function's inputs and the tangents, and whose results are the
//   function's results and the gradients. The capture runs with autocast off: the captured graph
//   already holds autocast's casts, and the backward formulas run as an eager backward does after
//   the user's autocast region has closed (torch.autocast's advice), so the joint graph has the
//   eager step's casts and no more (with autocast on, a bias gradient's sum took autocast's
//   float32 policy and came back to bfloat16 through two extra casts).
//
//   The partition splits it in two. The forward graph computes the results and the tensors the
//   backward needs (the saved tensors); the backward graph takes those and the tangents and
//   computes the gradients. What to save is a minimum cut (as AOTAutograd's min-cut
//   rematerialisation): every value is an edge whose capacity is its size in bytes, the inputs
//   and the outputs of operators that are not cheap to recompute (matrix products, reductions,
//   random draws) hang from the source, and every value the backward's operators read hangs into
//   the sink; the cut is the cheapest set of tensors that separates them (of equal cuts, the one
//   nearest the backward, which leaves it least to recompute). The backward recomputes
//   what lies on its side of the cut: cheap pointwise operators and views, so sigmoid(x) is
//   recomputed from x rather than saved beside it. Constants (a module's parameters) are held by
//   both graphs and never saved.
//
//   At a call the forward graph runs without recording autograd, and the results that require
//   grad get one autograd node, CompiledBackward, whose edges go to the inputs and constants that
//   require grad; its apply() runs the backward graph over the saved tensors (checked for in-place
//   writes, as eager saved tensors are) and the incoming gradients. Both graphs go through the
//   backend's passes (inductor: fusion and code generation in each).
//
//   A dynamic graph (sizes that are symbols) gets a dynamic joint graph: it is captured at the
//   call's sizes and at the symbols' two probe sizes (the dynamic graph replays at any), and its
//   sizes and host ints are fitted to the symbols as the function's were (generalize, Note [How
//   loom learns symbolic sizes]); the cut is taken at the call's sizes. The forward half binds the
//   symbols from the function's inputs, the backward half from a saved tensor or tangent that has
//   a dimension equal to the symbol.
//
//   Not built, with the reason in the report, for: a graph with a break, a graph that writes in
//   place, a result that is an input, a constant, or a view of one, the same result twice, a
//   backward formula that computed a tensor outside the dispatcher (it would be frozen into the
//   graph), or a dynamic joint graph whose backward differs at other sizes or reads no tensor
//   that carries a symbol. Those graphs replay with eager autograd. Double backward
//   (create_graph) through a CompiledBackward is a NotImplementedError.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/graph.h"

namespace loom::compiler {

// What the min cut decided, over a joint graph's values and nodes.
struct Partition {
  std::vector<ValueId> saved;           // what the forward returns for the backward
  std::vector<int32_t> forward_nodes;   // in order
  std::vector<int32_t> backward_nodes;  // in order; includes the recomputed ones
  std::vector<int32_t> recomputed;      // nodes of the forward that the backward runs again
  int64_t saved_bytes = 0;
};

// Cheap to run again in the backward: views, factories, and pointwise operators over float32 or
// float64 values of one dtype (what fusion folds into the backward's kernels: Note [What the
// min-cut recomputes]).
bool is_recomputable(const Graph& g, const Node& n);

// Partitions a joint graph whose inputs are `num_primal` function inputs and then the tangents,
// and whose outputs are `num_results` function results and then the gradients.
Partition min_cut_partition(const Graph& joint, size_t num_primal, size_t num_results);

// The least bytes any valid choice of saved tensors costs, found by trying every subset of the
// candidates (the values the tangents do not reach, constants aside): an independent check of
// min_cut_partition for the differential tester. False when there are more than
// `max_candidates`.
bool smallest_saving(const Graph& joint, size_t num_primal, size_t num_results, int max_candidates,
                     int64_t* bytes);

// The graph of `nodes` (of g, in order) with `inputs` as its inputs and `outputs` as its results;
// values are renumbered, constants that the nodes read are carried over, and nothing requires
// grad (the halves of a joint graph run without recording autograd).
Graph extract(const Graph& g, const std::vector<int32_t>& nodes, const std::vector<ValueId>& inputs,
              const std::vector<ValueId>& outputs);

struct JointGraph {
  Graph joint;     // as captured: inputs, then tangents; results, then gradients
  Graph forward;   // inputs: the function's; results: its results, then the saved tensors
  Graph backward;  // inputs: the saved tensors, then the tangents; results: the gradients
  size_t num_results = 0;
  size_t num_saved = 0;
  std::vector<bool> result_requires_grad;  // per function result
  // Per backward result: the function input (>= 0) or constant (-1 - k) it is the gradient of.
  std::vector<int> grad_of;
  std::vector<Tensor> constants;  // the forward capture's constants (grad_of's -1 - k)
  // "joint graph: 12 node(s): 4 forward, 8 backward; the min cut saves 2 tensor(s) (64 KiB:
  // input 0, %3) and recomputes 1 node(s) in the backward (loom::sigmoid)".
  std::string summary;
};

// Builds the joint graph of g (captured with grad mode on, before any pass) at `inputs`,
// partitions it and runs the passes over both halves. Null when it cannot, with *why set (empty
// when nothing requires grad: there is no backward to build).
std::shared_ptr<const JointGraph> build_joint(const Graph& g, const std::vector<Tensor>& inputs,
                                              bool optimize_halves, const PassOptions& passes,
                                              std::string* why);

// Runs the forward graph and gives the results that require grad a CompiledBackward node.
std::vector<Tensor> run_joint(const std::shared_ptr<const JointGraph>& j,
                              const std::vector<Tensor>& inputs);

}  // namespace loom::compiler
