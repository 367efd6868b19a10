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

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/compile.h"
#include "loom/dispatch.h"
#include "loom/ivalue.h"
#include "loom/tensor.h"

namespace loom::compiler {

using ValueId = int32_t;

struct Value {
  enum class Kind : uint8_t { Input, Constant, NodeOutput };
  Kind kind = Kind::Input;
  int32_t index = 0;  // the input's position, the constant's, or the node's
  int32_t slot = 0;   // which tensor output of the node
  // What the value was when captured, for printing.
  DType dtype = kFloat32;
  Device device = kCPU;
  std::vector<int64_t> sizes;
};

// One argument of a node: a host constant, a tensor value, an absent tensor, or a list of values.
struct Arg {
  enum class Kind : uint8_t { Constant, Tensor, NoneTensor, TensorList };
  Kind kind = Kind::Constant;
  IValue constant;
  ValueId value = -1;
  std::vector<ValueId> list;
};

struct Node {
  OperatorHandle op;
  std::vector<Arg> args;
  // Per return: its tensor values (one for a Tensor, n for a Tensor[]).
  std::vector<std::vector<ValueId>> returns;
};

struct Graph {
  int32_t num_inputs = 0;
  std::vector<Value> values;
  std::vector<Tensor> constants;
  std::vector<Node> nodes;
  std::vector<ValueId> outputs;  // the function's results
  // Per node: the values whose last use it is, released from the replay's environment once it
  // has run, so that a replay holds no more intermediates than the eager call did.
  std::vector<std::vector<ValueId>> release_after;
  // Graph breaks, each before the node of the same position in `break_at`.
  std::vector<GraphBreakInfo> breaks;
  std::vector<size_t> break_at;

  // Replays the nodes through the dispatcher (Autograd records as in an eager call) and returns
  // the outputs.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // One node a line: "%3 = loom::mul.Tensor(%1, %2)  # float32 [8, 16]".
  std::string str() const;
  std::map<std::string, int64_t> op_counts() const;
};

// Records the operators that run on this thread while it lives; at most one per thread.
class Capture {
 public:
  explicit Capture(const std::vector<Tensor>& inputs);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Ends the capture: the graph with `outputs` as its results.
  Graph finish(const std::vector<Tensor>& outputs);
  bool broke() const { return !graph_.breaks.empty(); }
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
  // A graph break before the next node.
  void add_break(std::string op, std::string reason);

 private:
  ValueId value_of(const Tensor& t);
  ValueId new_value(Value v, const Tensor& t);

  Graph graph_;
  Capture* previous_;
  std::unordered_map<const TensorImpl*, ValueId> ids_;
  // Every tensor seen, kept alive until the capture ends, so that an address in ids_ is never
  // reused by another tensor.
  std::vector<Tensor> keep_;
};

// The user's frame that called into loom: "function (binary+0x1234)", or "" when unknown.
std::string user_call_site();

}  // namespace loom::compiler
