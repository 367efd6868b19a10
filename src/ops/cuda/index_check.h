// The device check of index values for the CUDA index and loss kernels (ops layer, CUDA backend;
// internal, g++ side).
//
// Note [Device index checks]
//   Indices are data. The CPU kernels check every value before they write anything and throw a
//   typed IndexError naming the op and the first bad value; the CUDA kernels keep that contract.
//   Before the kernel runs, a small device pass finds the first bad position (an integer
//   atomicMin, so the same position on every run) and 8 bytes come back: the stream is
//   synchronised once per call, only in the operators whose CPU kernels check (index_select,
//   embedding, embedding_dense_backward, gather, scatter*, nll_loss*). A failed check leaves the
//   outputs and, for in-place scatters, self untouched. The price is one host round trip per call;
//   device-side asserts would avoid it but end the process instead of throwing.
#pragma once

#include <functional>
#include <optional>

#include "loom/tensor.h"

namespace loom::cuda_ops {

// `index` (a CUDA integer tensor) as contiguous int64, after checking that every value lies in
// [0, limit) or equals `ignore`; for the first value that does not, calls fail(value), which
// throws the operator's error.
Tensor checked_indices(const char* name, const Tensor& index, int64_t limit,
                       std::optional<int64_t> ignore,
                       const std::function<void(int64_t value)>& fail);

}  // namespace loom::cuda_ops
