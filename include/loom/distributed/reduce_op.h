// Reduction operators of collectives (distributed layer). A plain enum; thread-safe.
#pragma once

#include <cstdint>

#include "loom/export.h"

namespace loom::dist {

// Sum, Prod, Min, Max work for every dtype (on bool: or, and, and, or). Avg is Sum divided by the
// group size and needs a floating dtype. bf16 and f16 are accumulated in f32.
enum class ReduceOp : int8_t { Sum = 0, Prod, Min, Max, Avg };

LOOM_API const char* reduce_op_name(ReduceOp op);

}  // namespace loom::dist
