// Guards and cache entries of compiled functions (compiler layer; internal): what a cached graph
// was captured for, and the check that a call still matches it (Note [Guards]).
//
// Thread-safety: an Entry is filled before it is published to the compiled function's cache; its
// mutable counters are updated under the function's lock, its CUDA graph under cuda_mu.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiler/cuda_graph.h"
#include "compiler/graph.h"
#include "compiler/joint.h"
#include "loom/tensor.h"

namespace loom::compiler {

// Note [Guards]: a flat list checked in order; the first that fails names the recompile. A tensor
// guard compares what a graph's replay depends on: defined, dtype, device, sizes, strides,
// requires_grad, and for constants the very tensor (identity). Inputs that shared storage when
// captured must share it again, and inputs that did not must not (a replay of an in-place
// operator on one of them would otherwise see the other change, or not).
struct TensorGuard {
  bool defined = false;
  DType dtype = kFloat32;
  Device device = kCPU;
  std::vector<int64_t> sizes, strides;
  bool requires_grad = false;
  // In a dynamic graph: per dim its symbol (-1: the size is guarded), and contiguity is guarded
  // instead of the strides.
  std::vector<int> symbol;
  bool contiguous_only = false;

  static TensorGuard of(const Tensor& t);
  // "" when t matches, else what differs (without describe: "x", which is cheaper).
  std::string mismatch(const Tensor& t, bool describe = true) const;
  std::string str() const;
  // "[8, s0, 64]"
  std::string sizes_str() const;
};

struct Entry {
  Graph graph;
  // Note [Joint graph] in compiler/joint.h: when set, a replay runs it instead of `graph`.
  std::shared_ptr<const JointGraph> joint;
  std::vector<TensorGuard> inputs;
  std::vector<std::pair<size_t, size_t>> shared;  // input pairs that shared storage
  std::vector<TensorGuard> constants;
  bool grad_mode = true;
  DType default_dtype = kFloat32;
  // Autocast (loom/autocast.h) on the CPU and on CUDA: a graph captured under autocast holds its
  // casts, so a call with another autocast state must not replay it. Checked with the default
  // dtype (guard 1).
  struct AutocastState {
    bool cpu = false, cuda = false;
    DType cpu_dtype = kBFloat16, cuda_dtype = kBFloat16;
    bool operator==(const AutocastState& o) const {
      return cpu == o.cpu && cuda == o.cuda && (!cpu || cpu_dtype == o.cpu_dtype) &&
             (!cuda || cuda_dtype == o.cuda_dtype);
    }
    static AutocastState current();
    std::string str() const;
  };
  AutocastState autocast;
  // Failures per guard, in the order of describe_guards().
  mutable std::vector<int64_t> failures;
  mutable int64_t replays = 0;
  // Mode reduce-overhead (Note [CUDA graphs] in compiler/cuda_graph.cpp): recorded on the first
  // replay, or why not. cuda_mu serializes the recording and the replays (static buffers).
  mutable std::mutex cuda_mu;
  mutable std::unique_ptr<CudaGraph> cuda_graph;
  mutable bool cuda_graph_tried = false;
  mutable std::string cuda_graph_refused;

  // The graphs a replay runs, with their labels: the captured one, or the joint graph's halves.
  std::vector<std::pair<std::string, const Graph*>> replayed() const {
    if (!joint) return {{"", &graph}};
    return {{"forward", &joint->forward}, {"backward", &joint->backward}};
  }

  size_t num_guards() const { return host_guard_base() + graph.host_nodes().size(); }
  // The first host guard's index: they come last, checked during the replay.
  size_t host_guard_base() const {
    return 2 + inputs.size() + 1 + constants.size() + graph.symbols.size();
  }

  std::vector<std::string> describe_guards() const;

  // The index of the first failing guard (and what failed), or -1 when all hold.
  // `why` may be null: the index alone is cheaper (no text built).
  int check(const std::vector<Tensor>& in, std::string* why) const;
};

}  // namespace loom::compiler
