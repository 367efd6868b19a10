// Launchers of the unary family's CUDA loops (unary_kernels.cu); see Note [CUDA kernel files].
// Operand 0 of each IterArgs is the output, operand 1 the input, already in the op's compute dtype
// (the TensorIterator cast it); the launchers dispatch on operand 1's dtype code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// Note [Op codes instead of instantiations]
//   Each op of a family is a case of one functor's switch on a runtime code, so a family costs one
//   template instantiation per dtype (five kernels each: three vector widths, 32- and 64-bit
//   strided), not one per op and dtype. The code is the same for every thread, so the switch is a
//   uniform branch; pointwise kernels are bound by memory traffic, so it costs nothing measurable,
//   and the family's .cu compiles several times faster.
enum class UnaryOp : int8_t {
  // Keep (any dtype the CPU accepts, computed in it)
  Neg,
  Abs,
  Relu,
  Sign,
  // floating dtypes only (integers were promoted to the default float dtype)
  Exp,
  Log,
  Log1p,
  Sqrt,
  Rsqrt,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Erf,
  Reciprocal,
  Silu,
  GeluErf,
  GeluTanh,
  // a bool output
  LogicalNot,
};

cudaError_t launch_unary(UnaryOp op, const IterArgs& a, cudaStream_t stream);

// pow(x, e) with a scalar exponent. `kind` picks an exact body for the common exponents (0, 1, 2,
// 3, 0.5, -0.5, -1, -2) as the CPU kernel does, else kPowGeneral; integer dtypes always use ie.
enum class PowKind : int8_t { Zero, One, Two, Three, Half, MinusHalf, MinusOne, MinusTwo, General };
cudaError_t launch_pow_scalar(const IterArgs& a, PowKind kind, double e, int64_t ie,
                              cudaStream_t stream);
// pow(x, y) elementwise: operands 1 and 2 are base and exponent (same dtype).
cudaError_t launch_pow_tensor(const IterArgs& a, cudaStream_t stream);
// min(max(x, lo), hi), NaN kept. Floating dtypes read flo/fhi (bounds already rounded to the
// compute type on the host, +-inf when absent); integer dtypes ilo/ihi (saturated to the dtype's
// range).
cudaError_t launch_clamp(const IterArgs& a, double flo, double fhi, int64_t ilo, int64_t ihi,
                         cudaStream_t stream);

}  // namespace loom::cuda_ops
