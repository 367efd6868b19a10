// Launchers of the binary family's CUDA loops (binary_kernels.cu): arithmetic, comparisons and
// logical ops, where and masked_fill; see Note [CUDA kernel files]. Inputs arrive in the iterator's
// common dtype; each op is a runtime code of one functor per dtype (Note [Op codes instead of
// instantiations] in unary_kernels.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

enum class BinaryOp : int8_t { Add, Sub, Mul, Div, Maximum, Minimum };
// out = op(a, b, alpha) in the dtype of operand 1, computed in its compute type M (float for 16-bit
// floats); alpha_bits holds alpha converted to M on the host (its first sizeof(M) bytes).
cudaError_t launch_binary(BinaryOp op, const IterArgs& a, uint64_t alpha_bits, cudaStream_t stream);

enum class CompareOp : int8_t { Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr, LogicalXor };
// A bool output from two inputs of operand 1's dtype.
cudaError_t launch_compare(CompareOp op, const IterArgs& a, cudaStream_t stream);

// out = cond ? self : other: operands (out, cond, self, other), cond bool or uint8.
cudaError_t launch_where(const IterArgs& a, cudaStream_t stream);
// out = mask ? value : self: operands (out, self, mask), mask bool; value_bits holds the value in
// self's dtype (its first element-size bytes).
cudaError_t launch_masked_fill(const IterArgs& a, uint64_t value_bits, cudaStream_t stream);

// allclose and equal: clears *flag (a device int the caller set nonzero) when some pair of
// operands 0 and 1 (one dtype, no output) fails the predicate; Close is isclose(rtol, atol,
// equal_nan) in double as the CPU kernel (cpu/compare_kernels.cpp), Equal is == in the compute
// type.
enum class PairPredicate : int8_t { Equal, Close };
cudaError_t launch_all_pairs(PairPredicate pred, const IterArgs& a, double rtol, double atol,
                             bool equal_nan, int* flag, cudaStream_t stream);

}  // namespace loom::cuda_ops
