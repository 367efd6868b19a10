// Matrix products on cuBLASLt (ops layer, CUDA backend; internal, g++ side): the one place where
// loom calls cublasLtMatmul. See Note [Row-major products on cuBLASLt] in cublas_lt.cpp.
//
// Thread-safety: gemm() may be called from any thread; the per-device handle and the algorithm
// cache are shared under a mutex. Work is queued on the device's current stream, never waited for.
#pragma once

#include <cstdint>

#include "loom/device.h"
#include "loom/dtype.h"

namespace loom::cuda_ops {

// One operand of a row-major product, as BLAS reads it (Note [Passing strided operands to gemm] in
// cpu/linalg_kernels.cpp): rows unit-stride (trans = false, ld = row stride) or columns unit-stride
// (trans = true, ld = column stride); batch_stride in elements.
struct GemmOperand {
  const void* data = nullptr;
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// What runs after the product, in the same kernel. The bias is a vector of m elements of the
// product's dtype, added to every row of the result.
enum class GemmEpilogue : uint8_t { None, Bias, ReluBias, GeluBias };

// c[b] = alpha * a[b] @ b[b] + beta * c[b] (+ bias, relu, gelu by the epilogue) for b < batch, with
// a[b]: [n, k], b[b]: [k, m], c[b]: [n, m] row-major with leading dimension ldc. dtype: float32
// (TF32 when cuda::allow_tf32()), float64, float16 or bfloat16 (both accumulate in float32).
// beta == 0 never reads c. n, m, batch >= 1 and k >= 1 (the caller handles empty products).
struct GemmArgs {
  int64_t batch = 1, n = 0, m = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t c_batch_stride = 0;
  DType dtype = kFloat32;
  double alpha = 1.0, beta = 0.0;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;
};

// Whether cuBLASLt takes `dtype` (else the caller uses the plain loop).
bool lt_supports(DType dtype);

// Queues the product on `device`'s current stream and returns true; returns false, having queued
// nothing, when cuBLASLt has no algorithm for this problem (an epilogue some configurations lack,
// or operands whose alignment or leading dimensions no kernel takes): the caller then adds the
// bias itself or runs its own loop. ValueError naming `op` for sizes beyond cuBLASLt's; DeviceError
// naming the failed call and `op` when cuBLASLt fails.
bool gemm(const GemmArgs& args, Device device, const char* op);

}  // namespace loom::cuda_ops
