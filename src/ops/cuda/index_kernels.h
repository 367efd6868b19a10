// Launchers of the index family's CUDA kernels (index_kernels.cu) and of the device check of index
// values; see Note [CUDA kernel files] in iter_args.h and Note [Device index checks] in
// index_check.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

constexpr int kMaxIndexDims = 12;

// *first_bad (device, set to n by the caller) becomes the smallest position i < n whose idx[i]
// is outside [0, limit) and is not `ignore` (when has_ignore). idx: n contiguous int64.
cudaError_t launch_find_bad_index(const int64_t* idx, int64_t n, int64_t limit, bool has_ignore,
                                  int64_t ignore, unsigned long long* first_bad,
                                  cudaStream_t stream);

// index_select on a contiguous src seen as [outer, dim_size, inner]: out[o, k, i] =
// src[o, idx[k], i] for k < n; elements of elem_size bytes.
cudaError_t launch_index_select(const void* src, void* out, const int64_t* idx, int64_t outer,
                                int64_t dim_size, int64_t n, int64_t inner, int elem_size,
                                cudaStream_t stream);

// Sizes and element strides of gather / scatter: `sizes` is the index's shape (0-dim as [1]).
struct IndexGeometry {
  int ndim = 0;
  int dim = 0;
  int64_t sizes[kMaxIndexDims] = {};
  int64_t self_strides[kMaxIndexDims] = {};
  int64_t src_strides[kMaxIndexDims] = {};  // scatter's src, or gather's output (contiguous)
  int64_t idx_strides[kMaxIndexDims] = {};  // the index (contiguous)
};

// gather: out[e] = self[e with its `dim` coordinate replaced by idx[e]].
cudaError_t launch_gather(const IndexGeometry& g, const void* self, void* out, const int64_t* idx,
                          int elem_size, cudaStream_t stream);

enum class ScatterMode : int8_t { Src, Value, Add };
// Scatters into self in place, one thread per row along `dim` (Note [Rows along dim] in
// cpu/index_kernels.cpp): duplicates within a row apply in order, so the result is the CPU's and
// deterministic without atomics. Value: `value_bits` holds the value in self's dtype.
cudaError_t launch_scatter(const IndexGeometry& g, ScatterMode mode, ScalarCode dt, void* self,
                           const void* src, const int64_t* idx, uint64_t value_bits,
                           cudaStream_t stream);

// embedding_dense_backward, deterministic: the n indices are sorted (stably, with their
// positions), then each of the num_weights result rows adds its grad_output rows in position
// order (the CPU's order, so the sums are the CPU's). grad: contiguous [n, dim] of dtype dt.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t num_weights);
cudaError_t launch_embedding_backward(ScalarCode dt, const void* grad, const int64_t* idx,
                                      int64_t n, int64_t dim, int64_t num_weights,
                                      int64_t padding_idx, void* out, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream);

}  // namespace loom::cuda_ops
