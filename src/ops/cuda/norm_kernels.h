// Launchers of native_layer_norm and native_layer_norm_backward on CUDA (norm_kernels.cu); see
// Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// Per row of a contiguous [rows, cols] x of dtype dt: mean, rstd = 1 / sqrt(var + eps) (biased
// var), y = (x - mean) * rstd [* w] [+ b]. w and b (nullable) are contiguous in the compute type
// (float for 16-bit floats, else dt); mean and rstd are written in dt.
cudaError_t launch_layer_norm(ScalarCode dt, const void* x, const void* w, const void* b, void* y,
                              void* mean, void* rstd, int64_t rows, int64_t cols, double eps,
                              cudaStream_t stream);

// grad_input (nullable) of a contiguous [rows, cols] layer norm from grad_out g, the input x and
// the forward's mean and rstd (dt) and w (nullable, compute type):
//   grad_input = rstd * (g w - mean(g w) - xhat * mean(g w xhat)), xhat = (x - mean) * rstd.
cudaError_t launch_layer_norm_backward_input(ScalarCode dt, const void* g, const void* x,
                                             const void* mean, const void* rstd, const void* w,
                                             void* grad_input, int64_t rows, int64_t cols,
                                             cudaStream_t stream);

// Column sums over the rows: grad_weight[j] = sum g xhat, grad_bias[j] = sum g (either nullable),
// written in the compute type (float, double for float64). The rows are split across blocks whose
// partials (layer_norm_backward_workspace_bytes) are added in block order.
size_t layer_norm_backward_workspace_bytes(ScalarCode dt, int64_t rows, int64_t cols);
cudaError_t launch_layer_norm_backward_params(ScalarCode dt, const void* g, const void* x,
                                              const void* mean, const void* rstd, void* grad_weight,
                                              void* grad_bias, int64_t rows, int64_t cols,
                                              void* workspace, cudaStream_t stream);

}  // namespace loom::cuda_ops
