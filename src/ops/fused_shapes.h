// Shape functions of the fused training kernels (ops layer, internal): the fused cross-entropy
// (fused_loss.cpp), bias + GELU (fused_gelu.cpp) and the multi-tensor Adam step (fused_adam.cpp).
// Pure, like those in shapes.h (Note [Shape functions and kernels] in structured.h); the CPU and
// CUDA kernel files register them with their loops.
#pragma once

#include <array>
#include <string_view>

#include "ops/structured.h"

namespace loom {

// logits (N, V) floating, target (N) int64 on the same device: (loss: 0-dim of logits' dtype,
// lse: (N) float32, each row's log-sum-exp).
LOOM_API std::array<TensorMeta, 2> fused_cross_entropy_shape(TensorMetaRef logits,
                                                             TensorMetaRef target,
                                                             int64_t ignore_index,
                                                             double label_smoothing);
// grad: the loss's gradient (a single element); lse: the forward's. grad_logits: logits' shape and
// dtype.
LOOM_API TensorMeta fused_cross_entropy_backward_shape(TensorMetaRef grad, TensorMetaRef logits,
                                                       TensorMetaRef target, TensorMetaRef lse,
                                                       int64_t ignore_index,
                                                       double label_smoothing);

// input (..., M), bias (M) of input's dtype: (output, input's shape and dtype).
LOOM_API TensorMeta bias_gelu_shape(TensorMetaRef input, TensorMetaRef bias,
                                    std::string_view approximate);
// grad and input (..., M), bias (M): the gradient of the pre-activation input + bias (input's
// shape and dtype); the bias's gradient is its sum over rows.
LOOM_API TensorMeta bias_gelu_backward_shape(TensorMetaRef grad, TensorMetaRef input,
                                             TensorMetaRef bias, std::string_view approximate);

// The approximation named by gelu's `approximate` argument: true for "tanh", false for "none";
// ValueError naming `op` otherwise.
LOOM_API bool gelu_is_tanh(const char* op, std::string_view approximate);

}  // namespace loom

namespace loom {

// Checks the lists of _fused_adam_ (Note [Multi-tensor Adam] in fused_adam.cpp): equal lengths
// (max_exp_avg_sqs empty without amsgrad), every tensor defined, dense, contiguous, of its
// parameter's shape and dtype and on the first parameter's device, float32 (or float64 when
// allow_double), and a step count >= 1 per parameter. ValueError / TypeError naming the list and
// the index otherwise.
LOOM_API void check_fused_adam_lists(TensorList params, TensorList grads, TensorList exp_avgs,
                                     TensorList exp_avg_sqs, TensorList max_exp_avg_sqs,
                                     bool amsgrad, IntArrayRef steps, bool allow_double);

}  // namespace loom
