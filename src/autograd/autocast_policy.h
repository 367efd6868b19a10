// Autocast's operator lists (internal to the autograd layer): which operators autocast casts, and
// to what (include/loom/autocast.h for the public side, Note [Autocast] in autocast.cpp).
#pragma once

#include "loom/array_ref.h"
#include "loom/autocast.h"

namespace loom::autocast {

struct PolicyEntry {
  const char* name;  // "mm", "pow.Tensor_Scalar": an operator of namespace loom with its overload
  CastPolicy policy;
};

// Every listed operator overload, as PyTorch's CUDA autocast lists restricted to what loom has
// (plus scaled_dot_product_attention, listed before it exists). out= and in-place overloads are
// never listed.
ArrayRef<PolicyEntry> policy_table();

}  // namespace loom::autocast
