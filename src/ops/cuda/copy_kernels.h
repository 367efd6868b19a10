// Launchers of the copy family's CUDA loops (copy_kernels.cu); see Note [CUDA kernel files].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// out = in, one dtype (operand 0 and 1 of `a` have the same element size).
cudaError_t launch_copy_same(const IterArgs& a, cudaStream_t stream);
// out = cast(in) between any two dtypes, converting per element by the operands' dtype codes.
cudaError_t launch_cast(const IterArgs& a, cudaStream_t stream);
// Sets n contiguous elements of elem_size bytes (1, 2, 4 or 8) at p to the bit pattern `bits`.
cudaError_t launch_fill(void* p, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream);

}  // namespace loom::cuda_ops
