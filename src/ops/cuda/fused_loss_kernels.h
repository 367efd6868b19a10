// Launchers of the fused cross-entropy on CUDA (fused_loss_kernels.cu; Note [Fused cross-entropy]
// in fused_loss.cpp); see Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// logits: contiguous (n, v) of dtype dt; target: n checked int64 classes (or ignore_index).
// Writes lse (n floats), the mean loss (one dt value) into loss, using row_loss (n doubles of
// device scratch). n >= 1, v >= 1.
cudaError_t launch_fused_cross_entropy(ScalarCode dt, const void* logits, const int64_t* target,
                                       int64_t n, int64_t v, int64_t ignore_index, double smoothing,
                                       float* lse, double* row_loss, void* loss,
                                       cudaStream_t stream);

// grad: one dt value (the loss's gradient); writes grad_logits (contiguous (n, v), dt). count is
// one int64 of device scratch (the rows not ignored).
cudaError_t launch_fused_cross_entropy_backward(ScalarCode dt, const void* grad, const void* logits,
                                                const int64_t* target, const float* lse, int64_t n,
                                                int64_t v, int64_t ignore_index, double smoothing,
                                                int64_t* count, void* grad_logits,
                                                cudaStream_t stream);

}  // namespace loom::cuda_ops
