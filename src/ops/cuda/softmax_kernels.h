// Launchers of softmax and log_softmax and their backwards on CUDA (softmax_kernels.cu); see Note
// [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// y = softmax (or log_softmax) of x along the middle dim of contiguous [outer, d, inner] tensors
// of dtype `dt` (a float type).
cudaError_t launch_softmax(ScalarCode dt, bool log, const void* x, void* y, int64_t outer,
                           int64_t d, int64_t inner, cudaStream_t stream);

// grad_input from grad_output g and the forward's output y, all contiguous [outer, d, inner]:
//   softmax:     y * (g - sum(g * y)),   log_softmax: g - exp(y) * sum(g).
cudaError_t launch_softmax_backward(ScalarCode dt, bool log, const void* g, const void* y,
                                    void* grad_input, int64_t outer, int64_t d, int64_t inner,
                                    cudaStream_t stream);

}  // namespace loom::cuda_ops
