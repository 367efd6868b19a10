// CUDA kernels of the fused bias + GELU (Note [Fused bias GELU] in fused_gelu.cpp): one
// grid-stride pass, the bias added in float (double for double), GELU with the gelu and
// gelu_backward kernels' formulas (unary_kernels.cu, activation_backward_kernels.cu).
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/fused_gelu_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

constexpr int kGeluThreads = 256;

template <class M>
__device__ __forceinline__ M gelu_value(M x, bool tanh_form) {
  if (tanh_form) {
    const M inner = M(dmath::kGeluBeta) * (x + M(dmath::kGeluKappa) * x * x * x);
    return M(0.5) * x * (M(1) + dmath::tanh(inner));
  }
  return M(0.5) * x * (M(1) + dmath::erf(x * M(dmath::kSqrtHalf)));
}

template <class M>
__device__ __forceinline__ M gelu_grad(M g, M x, bool tanh_form) {
  if (tanh_form) {
    const M beta = M(dmath::kGeluBeta), kappa = M(dmath::kGeluKappa);
    const M inner = beta * (x + kappa * x * x * x);
    const M t = dmath::tanh(inner);
    const M d_inner = beta * (M(1) + M(3) * kappa * x * x);
    return g * (M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * d_inner);
  }
  const M cdf = M(0.5) * (M(1) + dmath::erf(x * M(dmath::kSqrtHalf)));
  return g * (cdf + x * M(dmath::kInvSqrt2Pi) * dmath::exp(M(-0.5) * x * x));
}

template <class T>
__global__ void bias_gelu_kernel(const T* x, const T* bias, int64_t n, int64_t m, bool tanh_form,
                                 T* out) {
  using M = opmath_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const M pre = convert<M>(x[i]) + convert<M>(bias[i % m]);
    out[i] = convert<T>(gelu_value(pre, tanh_form));
  }
}

template <class T>
__global__ void bias_gelu_backward_kernel(const T* g, const T* x, const T* bias, int64_t n,
                                          int64_t m, bool tanh_form, T* out) {
  using M = opmath_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const M pre = convert<M>(x[i]) + convert<M>(bias[i % m]);
    out[i] = convert<T>(gelu_grad(convert<M>(g[i]), pre, tanh_form));
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kGeluThreads - 1) / kGeluThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

}  // namespace

cudaError_t launch_bias_gelu(ScalarCode dt, const void* x, const void* bias, int64_t n, int64_t m,
                             bool tanh_form, void* out, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    bias_gelu_kernel<T><<<blocks_for(n), kGeluThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(bias), n, m, tanh_form,
        static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t launch_bias_gelu_backward(ScalarCode dt, const void* grad, const void* x,
                                      const void* bias, int64_t n, int64_t m, bool tanh_form,
                                      void* out, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    bias_gelu_backward_kernel<T><<<blocks_for(n), kGeluThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(bias), n, m,
        tanh_form, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
