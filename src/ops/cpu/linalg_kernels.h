// The CPU matrix product behind mm, bmm, addmm and linear's gradient sink (ops layer, internal).
#pragma once

#include "loom/scalar.h"
#include "loom/tensor.h"

namespace loom {

// out[b] = alpha * a[b] @ b[b] + beta * out[b] for every batch b. a: [B, n, k], b: [B, k, m], out a
// contiguous [B, n, m] of the same dtype, prefilled when beta != 0. Besides the mm family's loops,
// linear's derivative calls it to add a weight gradient straight into .grad() (Note [Accumulating
// into .grad]); a CUDA `out` goes to cuda_ops::batched_product (ops/cuda/gemm.h).
void batched_product(const Tensor& out, Tensor a, Tensor b, const Scalar& alpha, const Scalar& beta,
                     const char* op);

}  // namespace loom
