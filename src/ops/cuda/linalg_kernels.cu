// The linalg family's plain product loop (integer dtypes and empty inner dimensions): one thread
// per output element, accumulating along k in order, as the CPU's loop does.
#include "ops/cuda/linalg_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

template <class T>
__global__ void plain_gemm_kernel(PlainGemmArgs g) {
  constexpr bool kInt = std::is_integral_v<T>;
  using Acc = std::conditional_t<kInt, int64_t, opmath_t<T>>;
  const int64_t total = g.batch * g.n * g.m;
  const T* a = reinterpret_cast<const T*>(g.a);
  const T* b = reinterpret_cast<const T*>(g.b);
  T* c = reinterpret_cast<T*>(g.c);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % g.m, i = (e / g.m) % g.n, bi = e / (g.m * g.n);
    const T* pa = a + bi * g.a_batch + i * g.a_row;
    const T* pb = b + bi * g.b_batch + j * g.b_col;
    Acc acc = 0;
    for (int64_t p = 0; p < g.k; ++p) {
      acc += convert<Acc>(pa[p * g.a_col]) * convert<Acc>(pb[p * g.b_row]);
    }
    T* pc = c + bi * g.c_batch + i * g.c_row + j;
    if constexpr (kInt) {
      int64_t v = g.alpha_i * acc;
      if (!g.beta_zero) v += g.beta_i * static_cast<int64_t>(*pc);
      *pc = static_cast<T>(v);
    } else {
      Acc v = static_cast<Acc>(g.alpha) * acc;
      if (!g.beta_zero) v += static_cast<Acc>(g.beta) * convert<Acc>(*pc);
      *pc = convert<T>(v);
    }
  }
}

template <class T>
cudaError_t launch_typed(const PlainGemmArgs& g, unsigned blocks, cudaStream_t stream) {
  plain_gemm_kernel<T><<<blocks, kThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_plain_gemm(const PlainGemmArgs& g, cudaStream_t stream) {
  const int64_t total = g.batch * g.n * g.m;
  if (total == 0) return cudaSuccess;
  const int64_t blocks64 = (total + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(blocks64 < 65535 * 16 ? blocks64 : 65535 * 16);
  switch (g.dtype) {
    case ScalarCode::UInt8:
      return launch_typed<uint8_t>(g, blocks, stream);
    case ScalarCode::Int8:
      return launch_typed<int8_t>(g, blocks, stream);
    case ScalarCode::Int16:
      return launch_typed<int16_t>(g, blocks, stream);
    case ScalarCode::Int32:
      return launch_typed<int32_t>(g, blocks, stream);
    case ScalarCode::Int64:
      return launch_typed<int64_t>(g, blocks, stream);
    case ScalarCode::Float16:
      return launch_typed<__half>(g, blocks, stream);
    case ScalarCode::BFloat16:
      return launch_typed<__nv_bfloat16>(g, blocks, stream);
    case ScalarCode::Float32:
      return launch_typed<float>(g, blocks, stream);
    case ScalarCode::Float64:
      return launch_typed<double>(g, blocks, stream);
    case ScalarCode::Bool:
      break;
  }
  return cudaErrorInvalidValue;  // bool products are refused before the launch
}

}  // namespace loom::cuda_ops
