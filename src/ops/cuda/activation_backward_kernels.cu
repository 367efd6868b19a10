// CUDA loops of the activation backwards; each case mirrors its CPU functor
// (cpu/activation_backward_kernels.cpp), computed in M (float for 16-bit floats).
#include "ops/cuda/activation_backward_kernels.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

template <class T>
struct ActivationBackward {
  using M = opmath_t<T>;
  ActivationBackwardOp op;
  M threshold;
  __device__ __forceinline__ T operator()(T gs, T xs) const {
    const M g = convert<M>(gs), x = convert<M>(xs);
    M r;
    switch (op) {
      case ActivationBackwardOp::Threshold:
        r = x <= threshold ? M(0) : g;  // a NaN x passes g through
        break;
      case ActivationBackwardOp::Sigmoid:
        r = g * (M(1) - x) * x;
        break;
      case ActivationBackwardOp::Tanh:
        r = g * (M(1) - x * x);
        break;
      case ActivationBackwardOp::Silu: {
        const M s = dmath::sigmoid(x);
        r = g * s * (M(1) + x * (M(1) - s));
        break;
      }
      case ActivationBackwardOp::GeluErf: {
        const M cdf = M(0.5) * (M(1) + dmath::erf(x * M(dmath::kSqrtHalf)));
        r = g * (cdf + x * M(dmath::kInvSqrt2Pi) * dmath::exp(M(-0.5) * x * x));
        break;
      }
      case ActivationBackwardOp::GeluTanh: {
        const M beta = M(dmath::kGeluBeta), kappa = M(dmath::kGeluKappa);
        const M inner = beta * (x + kappa * x * x * x);
        const M t = dmath::tanh(inner);
        const M d_inner = beta * (M(1) + M(3) * kappa * x * x);
        r = g * (M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * d_inner);
        break;
      }
      default:
        r = g;
        break;
    }
    return convert<T>(r);
  }
};

}  // namespace

cudaError_t launch_activation_backward(ActivationBackwardOp op, const IterArgs& a, double threshold,
                                       cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(a.dtype[1], [&] {
    using M = opmath_t<scalar_t>;
    const ActivationBackward<scalar_t> f{op, static_cast<M>(threshold)};
    return gpu_elementwise<scalar_t, scalar_t, scalar_t>(a, f, stream);
  });
}

}  // namespace loom::cuda_ops
