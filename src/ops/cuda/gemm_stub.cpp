// A build without the CUDA backend: the CUDA matrix product throws (see gemm.h).
#include "ops/cuda/gemm.h"

#include "loom/error.h"

namespace loom::cuda_ops {

void batched_product(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&,
                     const char* op) {
  LOOM_THROW(NotImplementedError, "[", op,
             "] a CUDA matrix product is not available in this build (configure with "
             "-DLOOM_CUDA=ON and the CUDA toolkit)");
}

}  // namespace loom::cuda_ops
