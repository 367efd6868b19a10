// Reduction operators of collectives (dist layer). A plain enum; thread-safe.
#pragma once

#include <cstdint>

#include "loom/export.h"

namespace loom::dist {

// SUM, PROD, MIN, MAX work for every dtype (on bool: or, and, and, or). AVG is SUM divided by the
// group size and needs a floating dtype. bf16 and f16 are accumulated in f32.
enum class ReduceOp : int8_t { SUM = 0, PROD, MIN, MAX, AVG };

LOOM_API const char* reduce_op_name(ReduceOp op);

}  // namespace loom::dist
