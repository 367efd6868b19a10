// Launchers of the reduction family's CUDA kernels (reduce_kernels.cu, column reductions in
// reduce_column_kernels.cu, shared pieces in reduce_common.cuh); see Note [CUDA kernel
// files] in iter_args.h and Note [Deterministic device reductions] in block_reduce.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

constexpr int kMaxReduceDims = 12;  // kept or reduced dims after coalescing

enum class ReduceOp : int8_t {
  Sum,
  Mean,
  Prod,
  Max,  // amax, amin, max(), min(): the value
  Min,
  ArgMax,  // argmax/argmin (out0 = indices) and max.dim/min.dim (out0 = values, out1 = indices)
  ArgMin,
  Var,
  Std,
  LogSumExp,
  Norm,
  All,
  Any,
};

enum class NormKind : int8_t { L0, L1, L2, Inf, NegInf, P };

// One reduction: the input seen as kept dims x reduced dims (the CPU engine's Geometry, Note
// [Reduction geometry] in reduce_engine.h), strides in elements, outermost dims first. Output
// element m (a flat index over the kept dims) is written at its kept_out offset.
struct ReduceArgs {
  ReduceOp op = ReduceOp::Sum;
  ScalarCode in_dtype = ScalarCode::Float32;
  const char* in = nullptr;
  char* out0 = nullptr;
  char* out1 = nullptr;  // max.dim / min.dim: the indices; null otherwise
  int64_t num_outputs = 0;
  int64_t reduce_size = 0;
  bool outer = false;  // the innermost kept dim has stride 1 (columns are reduced)
  int kept_ndim = 0;
  int64_t kept_sizes[kMaxReduceDims] = {};
  int64_t kept_in_strides[kMaxReduceDims] = {};
  int64_t kept_out_strides[kMaxReduceDims] = {};
  int red_ndim = 0;
  int64_t red_sizes[kMaxReduceDims] = {};
  int64_t red_strides[kMaxReduceDims] = {};
  int64_t correction = 1;  // var, std
  NormKind norm = NormKind::L2;
  double p = 2;  // norm with NormKind::P
};

// How a reduction is laid out on the device; depends on the shape only.
struct ReducePlan {
  bool outer = false;
  int tx = 32, ty = 1;   // block shape
  int64_t blocks_x = 1;  // blocks along the outputs
  int64_t splits = 1;    // blocks along the reduced elements (partials combined by a 2nd pass)
  int64_t chunk = 0;     // reduced elements per split
  size_t workspace_bytes = 0;  // device memory the caller provides for the partials
};

ReducePlan plan_reduce(const ReduceArgs& a);
cudaError_t launch_reduce(const ReduceArgs& a, const ReducePlan& plan, void* workspace,
                          cudaStream_t stream);

// dot: out[0] = sum x[i * sx] * y[i * sy] over n elements of dtype `dt` (strides in elements),
// float types accumulated in float (double for float64), integers in int64 (wrapping to the
// dtype as the CPU's loop does). Partials of the split go to `workspace` (dot_workspace_bytes).
size_t dot_workspace_bytes(ScalarCode dt, int64_t n);
cudaError_t launch_dot(ScalarCode dt, const char* x, int64_t sx, const char* y, int64_t sy,
                       int64_t n, char* out, void* workspace, cudaStream_t stream);

// equal / allclose over the broadcast operands 0 and 1 of `a` (one dtype, no outputs): sets
// *mismatch (device int, zeroed by the caller) to 1 where the predicate fails somewhere.
cudaError_t launch_compare_all(const IterArgs& a, bool close, double rtol, double atol,
                               bool equal_nan, int* mismatch, cudaStream_t stream);

}  // namespace loom::cuda_ops
