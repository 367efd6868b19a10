// The memory tools' standard workload (tools): a real loom training run recorded under a
// RecordingAllocator. It uses the nn and optim layers, so it lives with the tools that use it
// (`loom mem`, `loom bench mem`) rather than in the memory layer.
#pragma once

#include <cstdint>

#include "loom/memory/alloc_trace.h"

namespace loom::memory {

// Note [training trace]
//   record_training_trace runs `steps` training steps of a transformer-block-like MLP on CPU under
//   a RecordingAllocator: Linear(784 -> H), LayerNorm(H), GELU, Linear(H -> H), GELU,
//   Linear(H -> 10) with H = hidden (1024 by default), cross-entropy, Adam (so parameters,
//   gradients and two moments per parameter are live). Each step draws its batch size uniformly
//   from 32..512 (any integer, as with variable sequence lengths or ragged last batches) and makes
//   a fresh random batch, then zero_grad(set_to_none), forward, backward and step. The trace holds
//   everything loom allocated from model construction on (parameters, optimizer state created on
//   the first step, inputs, activations saved for backward, gradients, temporaries of the
//   optimizer). Requests range from a few bytes (scalars) to several MiB (with H = 1024, a 512 x
//   1024 float32 activation is 2 MiB, the 1024 x 1024 weight 4 MiB), so both pools of the caching
//   allocator are exercised. Single-threaded (intra-op threads set to 1 while recording) so that
//   the trace is deterministic for a seed.
struct TrainingTraceOptions {
  int steps = 20;
  uint64_t seed = 0;
  int64_t min_batch = 32;
  int64_t max_batch = 512;
  int64_t hidden = 1024;  // fixed for the whole trace
};
AllocTrace record_training_trace(const TrainingTraceOptions& options = {});

}  // namespace loom::memory
