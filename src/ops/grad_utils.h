// Helpers shared by the derivative formulas of the ops layer (internal).
#pragma once

#include <vector>

#include "loom/derivatives.h"
#include "loom/ops.h"

namespace loom::grad_utils {

// The reduced dims of a reduction over `dim` (None or empty = all) of a tensor of rank `rank`,
// normalised and sorted.
std::vector<int64_t> reduced_dims(const IValue& dim, int64_t rank, const char* op);

// Gradient of a reduction's output, shaped back to the input: the reduced dims are re-inserted
// (when keepdim was false) and expanded to `input_sizes`.
Tensor unreduce(const Tensor& g, IntArrayRef input_sizes, const std::vector<int64_t>& dims,
                bool keepdim);

// Same, without expanding (keeps size-1 dims so the result broadcasts against the input).
Tensor unsqueeze_reduced(const Tensor& g, int64_t rank, const std::vector<int64_t>& dims,
                         bool keepdim);

// A tensor of the given sizes, dtype and device whose elements are never read (one zero, expanded):
// stands in for a forward input that a backward kernel takes only for its shape and dtype, so the
// derivative need not save (and keep alive) the real one.
Tensor shape_only(IntArrayRef sizes, DType dtype, Device device);

}  // namespace loom::grad_utils
