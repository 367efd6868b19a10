// Launchers of the CUDA 2-D pooling loops (pool_kernels.cu); see Note [CUDA kernel files] and Note
// [CUDA pooling loops] in pool_kernels.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// PoolGeometry (ops/shapes.h) for the device: `planes` = N * C contiguous H x W input planes and
// Ho x Wo output planes.
struct PoolParams {
  int64_t planes = 0, H = 0, W = 0, Ho = 0, Wo = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// Any dtype but bool; `ind` gets each maximum's flat index in its H*W input plane.
cudaError_t launch_max_pool(const void* in, void* out, int64_t* ind, const PoolParams& p,
                            ScalarCode dtype, cudaStream_t stream);
// Floating dtypes; gi (contiguous, like the input) is written, not accumulated into.
cudaError_t launch_max_pool_backward(const void* grad_out, const int64_t* ind, void* gi,
                                     const PoolParams& p, ScalarCode dtype, cudaStream_t stream);
// Any dtype but bool (integers average in int64 and truncate, as the CPU); divisor_override 0 =
// none. No dilation (p.dh = p.dw = 1).
cudaError_t launch_avg_pool(const void* in, void* out, const PoolParams& p, bool count_include_pad,
                            int64_t divisor_override, ScalarCode dtype, cudaStream_t stream);
// Floating dtypes; gi is written, not accumulated into.
cudaError_t launch_avg_pool_backward(const void* grad_out, void* gi, const PoolParams& p,
                                     bool count_include_pad, int64_t divisor_override,
                                     ScalarCode dtype, cudaStream_t stream);

}  // namespace loom::cuda_ops
