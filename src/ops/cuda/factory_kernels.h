// Launchers of the factories' and dropout's CUDA loops (factory_kernels.cu); see Note [CUDA kernel
// files]. Outputs are contiguous, `n` elements of dtype `code`. The random ones take the state a
// Generator reserved (Note [Same random numbers on every device], philox.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// Element i: start + i * step, in int64 when all_int (istart, istep), else in double.
cudaError_t launch_arange(void* out, ScalarCode code, int64_t n, bool all_int, int64_t istart,
                          int64_t istep, double start, double step, cudaStream_t stream);
// The first half counts up from start, the second down from end (both ends exact).
cudaError_t launch_linspace(void* out, ScalarCode code, int64_t steps, double start, double end,
                            double step, cudaStream_t stream);
// A rows x cols identity.
cudaError_t launch_eye(void* out, ScalarCode code, int64_t rows, int64_t cols, cudaStream_t stream);
// out (n x classes int64, zeroed by the caller) gets a 1 at (i, idx[i]); indices already checked.
cudaError_t launch_one_hot(int64_t* out, const int64_t* idx, int64_t n, int64_t classes,
                           cudaStream_t stream);

cudaError_t launch_rand(void* out, ScalarCode code, int64_t n, uint64_t seed, uint64_t offset,
                        cudaStream_t stream);
cudaError_t launch_randn(void* out, ScalarCode code, int64_t n, uint64_t seed, uint64_t offset,
                         cudaStream_t stream);
cudaError_t launch_randint(void* out, ScalarCode code, int64_t n, int64_t low, uint64_t range,
                           uint64_t seed, uint64_t offset, cudaStream_t stream);

// out[i] = keep_i ? in[i] * scale : 0 and mask[i] = keep_i, keep_i = unit_float(draw i) < keep;
// in, out, mask contiguous.
cudaError_t launch_dropout(void* out, bool* mask, const void* in, ScalarCode code, int64_t n,
                           float keep, double scale, uint64_t seed, uint64_t offset,
                           cudaStream_t stream);
// grad_input = g * (mask ? scale : 0): operands (out, grad_output, mask).
cudaError_t launch_dropout_backward(const IterArgs& a, double scale, cudaStream_t stream);

}  // namespace loom::cuda_ops
