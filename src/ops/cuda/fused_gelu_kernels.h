// Launchers of the fused bias + GELU on CUDA (fused_gelu_kernels.cu; Note [Fused bias GELU] in
// fused_gelu.cpp); see Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// out = gelu(x + bias) over contiguous x of n elements in rows of m (bias: m values); dtype dt.
cudaError_t launch_bias_gelu(ScalarCode dt, const void* x, const void* bias, int64_t n, int64_t m,
                             bool tanh_form, void* out, cudaStream_t stream);
// out = grad * gelu'(x + bias).
cudaError_t launch_bias_gelu_backward(ScalarCode dt, const void* grad, const void* x,
                                      const void* bias, int64_t n, int64_t m, bool tanh_form,
                                      void* out, cudaStream_t stream);

}  // namespace loom::cuda_ops
