// Launchers of the conv family's own CUDA loops (conv_kernels.cu); the convolutions themselves run
// on cuDNN (conv_cuda.cpp). See Note [CUDA kernel files].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// y[n, c, i] += bias[c] for a contiguous [N, C, HW] tensor y of a floating dtype.
cudaError_t launch_add_channel_bias(void* y, const void* bias, int64_t N, int64_t C, int64_t HW,
                                    ScalarCode dtype, cudaStream_t stream);
// out[c] = sum over n, i of g[n, c, i] (contiguous [N, C, HW], a floating dtype): one block per
// channel, accumulated in float (double for float64) in a fixed order, so runs agree bit for bit.
cudaError_t launch_channel_sum(const void* g, void* out, int64_t N, int64_t C, int64_t HW,
                               ScalarCode dtype, cudaStream_t stream);

}  // namespace loom::cuda_ops
