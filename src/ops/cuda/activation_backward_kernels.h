// Launchers of the activation backwards' CUDA loops (activation_backward_kernels.cu); see Note
// [CUDA kernel files]. Operands (grad_input, grad_output, x) of one floating dtype; each op is a
// runtime code of one functor per dtype (Note [Op codes instead of instantiations]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

enum class ActivationBackwardOp : int8_t {
  Threshold,  // x <= threshold ? 0 : g (x is the forward's input or output)
  Sigmoid,    // g * (1 - y) * y, y the forward's output
  Tanh,       // g * (1 - y * y)
  Silu,       // g * s * (1 + x * (1 - s)), s = sigmoid(x)
  GeluErf,    // g * (Phi(x) + x * phi(x))
  GeluTanh,   // the derivative of the tanh approximation's formula
};

// `threshold` is read by Threshold only (converted to the compute type on the device, as the CPU).
cudaError_t launch_activation_backward(ActivationBackwardOp op, const IterArgs& a, double threshold,
                                       cudaStream_t stream);

}  // namespace loom::cuda_ops
