// Launchers of nll_loss and nll_loss_backward on CUDA (loss_kernels.cu); see Note [CUDA kernel
// files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// input: contiguous (N, C, S) log-probabilities of dtype dt (S = the spatial elements, 1 without);
// target: N * S checked int64 classes (or ignore_index); weight: C doubles, or null for ones.
// reduction 0 writes N * S losses, 1 and 2 one value (the weighted mean or the sum), in dt.
cudaError_t launch_nll_loss(ScalarCode dt, const void* input, const int64_t* target,
                            const double* weight, int64_t count, int64_t classes, int64_t spatial,
                            int64_t reduction, int64_t ignore_index, void* out,
                            cudaStream_t stream);

// grad_input (zeroed by the caller, contiguous like input): -weight[t] * g at each sample's
// target, g the sample's grad_output (reduction 0) or the single grad_output (divided by the
// summed weight of the non-ignored targets for the mean). `scale` is one device double of scratch.
cudaError_t launch_nll_loss_backward(ScalarCode dt, const void* grad_output, const int64_t* target,
                                     const double* weight, int64_t count, int64_t classes,
                                     int64_t spatial, int64_t reduction, int64_t ignore_index,
                                     void* grad_input, double* scale, cudaStream_t stream);

}  // namespace loom::cuda_ops
