// Launchers of the linalg family's own CUDA loops (linalg_kernels.cu); the floating products run on
// cuBLASLt (cublas_lt.h). See Note [CUDA kernel files].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// c[b] = alpha * a[b] @ b[b] + beta * c[b] with a plain loop, for what cuBLASLt does not take:
// integer dtypes (accumulated in int64, wrapping like the CPU loop) and empty inner dimensions
// (k == 0: c = beta * c). Strides in elements; c's columns are unit-stride. beta_zero: c is not
// read. Floating dtypes use alpha/beta, integer ones alpha_i/beta_i.
struct PlainGemmArgs {
  int64_t batch = 1, n = 0, m = 0, k = 0;
  const char* a = nullptr;
  int64_t a_batch = 0, a_row = 0, a_col = 0;
  const char* b = nullptr;
  int64_t b_batch = 0, b_row = 0, b_col = 0;
  char* c = nullptr;
  int64_t c_batch = 0, c_row = 0;
  ScalarCode dtype = ScalarCode::Float32;
  double alpha = 1, beta = 0;
  int64_t alpha_i = 1, beta_i = 0;
  bool beta_zero = true;
};
cudaError_t launch_plain_gemm(const PlainGemmArgs& g, cudaStream_t stream);

}  // namespace loom::cuda_ops
