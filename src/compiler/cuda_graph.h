// Mode reduce-overhead: a compiled graph recorded as one CUDA graph (compiler layer; internal).
//
// A CudaGraph owns a stream of its own, the static input buffers its recording read, the static
// outputs it wrote, and the executable graph. Note [CUDA graphs] in compiler/cuda_graph.cpp says
// what can be recorded and how a replay keeps the caller's data safe.
//
// Thread-safety: none; the compiled function serializes a graph's replays (they share the static
// buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/graph.h"
#include "loom/cuda.h"
#include "loom/stream.h"

namespace loom::compiler {

class CudaGraph {
 public:
  // Records `g` replayed on the call's `inputs` (the graph's inputs, on one CUDA device) and runs
  // it once for this call: its results in `outputs`. Null, with the reason in `why`, when the
  // graph cannot be recorded (nothing ran then).
  static std::unique_ptr<CudaGraph> record(const Graph& g, const std::vector<Tensor>& inputs,
                                           std::vector<Tensor>* outputs, std::string* why);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Copies the inputs in (but the previous call's, unwritten since), launches the graph on the
  // current stream, and returns the static outputs (copying out first those of the previous
  // replay that the caller still holds).
  std::vector<Tensor> replay(const std::vector<Tensor>& inputs);
  // "cuda graph: 3 node(s) recorded; 10 replay(s), 4 input(s) copied in; 2 result(s) still held
  // by the caller copied out first"
  std::string str() const;

 private:
  CudaGraph() = default;
  void take_back_outputs();

  Stream stream_;
  Stream last_;  // where the previous replay ran: a replay on another stream waits for it
  cuda::RecordedGraph rec_;
  bool kept_ = false;  // the allocator keeps stream_'s memory (Note [Kept streams])
  std::vector<Tensor> static_in_, static_out_;
  // Per input: the graph's node that copies it into its static buffer (null: copied before the
  // launch instead), and the address that node reads now (null: the node is skipped).
  std::vector<void*> copy_node_;
  std::vector<const void*> copy_src_;
  // The previous call's inputs and their versions: an unchanged one is not copied again.
  std::vector<Tensor> last_in_;
  std::vector<uint32_t> last_version_;
  int64_t replays_ = 0, input_copies_ = 0, outputs_copied_ = 0, copies_refused_ = 0;
};

}  // namespace loom::compiler
