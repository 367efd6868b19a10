// The compiler's differential tester (compiler layer): random operator programs run eagerly and
// through loom::compile, with their outputs, the inputs they mutate and their gradients compared.
//
// A program is made from a seed: 1 to 3 float inputs of rank 1 to 3 whose shapes broadcast
// against each other (some requiring grad), then 3 to 12 steps, each an operator over earlier
// values: unary pointwise, binary with broadcasting, scalar arithmetic, reductions over a dim,
// views (transpose, unsqueeze, flatten, narrow), in-place updates of intermediates, and a branch
// on a host read (a graph break). A check
// compiles the program, calls it on three sets of inputs (a capture, then replays), and compares
// each call with the eager run on copies of the same inputs: outputs, inputs afterwards, and the
// gradients of the inputs that require grad (of the sum of the outputs). An error raised eagerly
// must be raised compiled too, with the same type. A program whose joint graph has few enough
// candidates to save has its min cut checked against every choice.
//
// Thread-safety: the functions are thread-safe; a check uses the calling thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::compiler {

struct FuzzFailure {
  uint64_t seed = 0;
  std::string program;  // the program's text, to reproduce it
  std::string what;     // the first difference
};

struct LOOM_API FuzzReport {
  int64_t programs = 0;
  int64_t replays = 0;          // compiled calls that replayed a graph
  int64_t dynamic_replays = 0;  // of those, replays of a graph with symbolic sizes
  int64_t fused_kernels = 0;    // kernels the inductor backend generated
  int64_t resumed_breaks = 0;   // host reads the graph resumed after (Note [Graph breaks])
  int64_t eager_errors = 0;     // programs whose eager run raised (and the compiled run as well)
  // Programs with a joint graph (Note [Joint graph] in compiler/joint.h), and of those, the ones
  // whose min cut was checked against every choice of saved tensors.
  int64_t joint_graphs = 0;
  int64_t min_cuts_checked = 0;
  int64_t dynamic_joint_graphs = 0;  // graphs with symbolic sizes that replayed as a joint graph
  // Note [Memory planning]: kernel outputs written into dead buffers, and plans refused at run
  // time because the buffer was held elsewhere.
  int64_t buffers_taken = 0, buffers_refused = 0;
  std::vector<FuzzFailure> failures;
  std::string str() const;
};

// The text of the program made from `seed`.
LOOM_API std::string fuzz_program_text(uint64_t seed);

// Checks the programs of seeds first_seed .. first_seed + count - 1.
LOOM_API FuzzReport fuzz_compile(uint64_t first_seed, int64_t count);

}  // namespace loom::compiler
