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
//
// Note [Remembered index checks]
//   The same indices are often checked more than once: a GPT step checks its token ids in the
//   embedding and again in the embedding's backward, its targets in the loss and its backward, and
//   a benchmark or an evaluation loop reuses one batch. A check that passed is remembered (the last
//   kRememberedChecks of them, for index tensors of at most kRememberedMaxNumel elements) by the
//   tensor's storage, which the record holds so that its address cannot be reused, the storage's
//   version counter, the data pointer, offset, sizes, strides and dtype, and the bound it was
//   checked against; a later check of the same view at the same version against the same or a
//   larger bound (and the same ignore value, or none) passes without the device pass or the round
//   trip. Every write through an operator bumps the version (as autograd's saved tensors rely on),
//   so a write forgets the record. A record whose storage nobody else holds is dropped at the next
//   check, so the memory it would keep alive is at most the few small index tensors still in use.
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
