// Launcher of the multi-tensor Adam step on CUDA (fused_adam_kernels.cu; Note [Multi-tensor Adam]
// in fused_adam.cpp); see Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda_ops {

// Elements per chunk, chunks and tensors per launch: the table is a kernel parameter, kept under
// the 4 KiB every architecture takes.
constexpr int64_t kAdamChunk = 65536;
constexpr int kAdamMaxTensors = 36;
constexpr int kAdamMaxChunks = 320;

// One float32 tensor's pointers (vmax null without amsgrad) and its step's bias corrections,
// rounded to float like the CPU fused step's scalars.
struct AdamTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;
  int64_t n;
  float neg_step_size;  // -lr / (1 - beta1^t)
  float bc2_sqrt;       // sqrt(1 - beta2^t)
};

// The (tensor slot, chunk index) pairs of one launch, one block each.
struct AdamTable {
  AdamTensor tensors[kAdamMaxTensors];
  int32_t chunk[kAdamMaxChunks];
  uint8_t tensor[kAdamMaxChunks];
};

// The group's scalars, rounded to float (Note [Optimizer arithmetic] in src/optim/fused_step.cpp).
struct AdamScalarsF {
  float grad_sign, b1, b2, one_minus_b1, one_minus_b2, wd, decay, eps;
  bool coupled_weight_decay, amsgrad;
};

cudaError_t launch_fused_adam(const AdamTable& table, int chunks, const AdamScalarsF& s,
                              cudaStream_t stream);

}  // namespace loom::cuda_ops
