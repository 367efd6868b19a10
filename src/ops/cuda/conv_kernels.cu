// The conv family's loops around cuDNN: the bias added to the output per channel, and the bias
// gradient as a per-channel sum.
#include "ops/cuda/conv_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

constexpr int kSumThreads = 256;

template <class T>
__global__ void add_channel_bias_kernel(T* y, const T* bias, int64_t N, int64_t C, int64_t HW) {
  using M = opmath_t<T>;
  const int64_t total = N * C * HW;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (e / HW) % C;
    y[e] = convert<T>(convert<M>(y[e]) + convert<M>(bias[c]));
  }
}

template <class T>
__global__ void channel_sum_kernel(const T* g, T* out, int64_t N, int64_t C, int64_t HW) {
  using M = opmath_t<T>;
  __shared__ M partial[kSumThreads];
  const int64_t c = blockIdx.x;
  const int64_t count = N * HW;
  M acc = 0;
  for (int64_t e = threadIdx.x; e < count; e += kSumThreads) {
    const int64_t n = e / HW, i = e % HW;
    acc += convert<M>(g[(n * C + c) * HW + i]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kSumThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = convert<T>(partial[0]);
}

unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

template <class T>
cudaError_t add_bias_typed(void* y, const void* bias, int64_t N, int64_t C, int64_t HW,
                           cudaStream_t stream) {
  add_channel_bias_kernel<T><<<grid_for(N * C * HW), kThreads, 0, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(bias), N, C, HW);
  return cudaGetLastError();
}

template <class T>
cudaError_t channel_sum_typed(const void* g, void* out, int64_t N, int64_t C, int64_t HW,
                              cudaStream_t stream) {
  channel_sum_kernel<T><<<static_cast<unsigned>(C), kSumThreads, 0, stream>>>(
      static_cast<const T*>(g), static_cast<T*>(out), N, C, HW);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_add_channel_bias(void* y, const void* bias, int64_t N, int64_t C, int64_t HW,
                                    ScalarCode dtype, cudaStream_t stream) {
  if (N * C * HW == 0) return cudaSuccess;
  switch (dtype) {
    case ScalarCode::Float16:
      return add_bias_typed<__half>(y, bias, N, C, HW, stream);
    case ScalarCode::BFloat16:
      return add_bias_typed<__nv_bfloat16>(y, bias, N, C, HW, stream);
    case ScalarCode::Float32:
      return add_bias_typed<float>(y, bias, N, C, HW, stream);
    case ScalarCode::Float64:
      return add_bias_typed<double>(y, bias, N, C, HW, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_channel_sum(const void* g, void* out, int64_t N, int64_t C, int64_t HW,
                               ScalarCode dtype, cudaStream_t stream) {
  if (C == 0) return cudaSuccess;
  if (C > 2147483647) return cudaErrorInvalidValue;
  switch (dtype) {
    case ScalarCode::Float16:
      return channel_sum_typed<__half>(g, out, N, C, HW, stream);
    case ScalarCode::BFloat16:
      return channel_sum_typed<__nv_bfloat16>(g, out, N, C, HW, stream);
    case ScalarCode::Float32:
      return channel_sum_typed<float>(g, out, N, C, HW, stream);
    case ScalarCode::Float64:
      return channel_sum_typed<double>(g, out, N, C, HW, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace loom::cuda_ops
