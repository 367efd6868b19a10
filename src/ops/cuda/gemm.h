// The CUDA matrix product as a plain function (ops layer, internal; no CUDA headers), for code that
// computes into an existing tensor below the dispatcher: linear's derivative adds the weight's
// gradient straight into .grad() (Note [Accumulating into .grad]). A build without CUDA has a stub
// (gemm_stub.cpp) that throws.
#pragma once

#include "loom/scalar.h"
#include "loom/tensor.h"

namespace loom::cuda_ops {

// out[b] = alpha * a[b] @ b[b] + beta * out[b] for every batch b; a: [B, n, k], b: [B, k, m], out:
// [B, n, m], all on one CUDA device, of one dtype (errors name `op`).
void batched_product(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha,
                     const Scalar& beta, const char* op);

}  // namespace loom::cuda_ops
