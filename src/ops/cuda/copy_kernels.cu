// CUDA loops of the copy family: same-dtype copies by element size, casts between any two dtypes
// (one kernel that converts by the operands' dtype codes, instead of one instantiation per pair),
// and fills.
#include "ops/cuda/copy_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

struct Identity {
  template <class T>
  __device__ T operator()(T v) const {
    return v;
  }
};

// A value in transit between two dtypes: integers keep 64 bits, floats go through double.
struct Wide {
  bool is_int;
  int64_t i;
  double f;
};

__device__ __forceinline__ Wide load_wide(const char* p, ScalarCode c) {
  switch (c) {
    case ScalarCode::Bool:
      return {true, *reinterpret_cast<const bool*>(p) ? 1 : 0, 0};
    case ScalarCode::UInt8:
      return {true, *reinterpret_cast<const uint8_t*>(p), 0};
    case ScalarCode::Int8:
      return {true, *reinterpret_cast<const int8_t*>(p), 0};
    case ScalarCode::Int16:
      return {true, *reinterpret_cast<const int16_t*>(p), 0};
    case ScalarCode::Int32:
      return {true, *reinterpret_cast<const int32_t*>(p), 0};
    case ScalarCode::Int64:
      return {true, *reinterpret_cast<const int64_t*>(p), 0};
    case ScalarCode::Float16:
      return {false, 0, static_cast<double>(__half2float(*reinterpret_cast<const __half*>(p)))};
    case ScalarCode::BFloat16:
      return {false, 0,
              static_cast<double>(__bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p)))};
    case ScalarCode::Float32:
      return {false, 0, static_cast<double>(*reinterpret_cast<const float*>(p))};
    default:
      return {false, 0, *reinterpret_cast<const double*>(p)};
  }
}

__device__ __forceinline__ void store_wide(char* p, ScalarCode c, Wide v) {
  const double f = v.is_int ? static_cast<double>(v.i) : v.f;
  // Float to integer truncates toward zero (C++'s and PyTorch's cast).
  const int64_t i = v.is_int ? v.i : static_cast<int64_t>(v.f);
  switch (c) {
    case ScalarCode::Bool:
      *reinterpret_cast<bool*>(p) = v.is_int ? v.i != 0 : v.f != 0.0;
      break;
    case ScalarCode::UInt8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(i);
      break;
    case ScalarCode::Int8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(i);
      break;
    case ScalarCode::Int16:
      *reinterpret_cast<int16_t*>(p) = static_cast<int16_t>(i);
      break;
    case ScalarCode::Int32:
      *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(i);
      break;
    case ScalarCode::Int64:
      *reinterpret_cast<int64_t*>(p) = i;
      break;
    case ScalarCode::Float16:
      *reinterpret_cast<__half*>(p) = __float2half_rn(static_cast<float>(f));
      break;
    case ScalarCode::BFloat16:
      *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(static_cast<float>(f));
      break;
    case ScalarCode::Float32:
      *reinterpret_cast<float*>(p) = static_cast<float>(f);
      break;
    default:
      *reinterpret_cast<double*>(p) = f;
      break;
  }
}

template <class Index>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(int64_t n, OffsetCalc<2, Index> calc, Operands<2> ops, ScalarCode out_code,
                ScalarCode in_code) {
  int64_t idx = static_cast<int64_t>(blockIdx.x) * kBlockWork + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kThreadWork; ++k, idx += kThreads) {
    if (idx >= n) return;
    Index off[2];
    calc.get(static_cast<Index>(idx), off);
    const char* in = (ops.scalar_mask & 2u) ? reinterpret_cast<const char*>(ops.scalar[1])
                                            : ops.data[1] + off[1];
    store_wide(ops.data[0] + off[0], out_code, load_wide(in, in_code));
  }
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

}  // namespace

cudaError_t launch_copy_same(const IterArgs& a, cudaStream_t stream) {
  switch (scalar_size(a.dtype[0])) {
    case 1:
      return gpu_elementwise<uint8_t, uint8_t>(a, Identity{}, stream);
    case 2:
      return gpu_elementwise<uint16_t, uint16_t>(a, Identity{}, stream);
    case 4:
      return gpu_elementwise<uint32_t, uint32_t>(a, Identity{}, stream);
    default:
      return gpu_elementwise<uint64_t, uint64_t>(a, Identity{}, stream);
  }
}

// Note [Fast float casts]
// Autocast casts every weight to bfloat16 each step and every weight gradient back to float32, so
// these casts run as typed loops (vector loads and stores on contiguous tensors, gpu_elementwise in
// loops.cuh) instead of the generic cast_kernel, which switches on both dtypes per element and
// goes through double. The results are the same bits: float -> 16-bit rounds to nearest even
// either way, and 16-bit -> float is exact.
struct FloatToBf16 {
  __device__ __nv_bfloat16 operator()(float v) const { return __float2bfloat16_rn(v); }
};
struct Bf16ToFloat {
  __device__ float operator()(__nv_bfloat16 v) const { return __bfloat162float(v); }
};
struct FloatToHalf {
  __device__ __half operator()(float v) const { return __float2half_rn(v); }
};
struct HalfToFloat {
  __device__ float operator()(__half v) const { return __half2float(v); }
};

cudaError_t launch_cast(const IterArgs& a, cudaStream_t stream) {
  if (a.numel == 0) return cudaSuccess;
  const ScalarCode out = a.dtype[0], in = a.dtype[1];
  if (in == ScalarCode::Float32 && out == ScalarCode::BFloat16)
    return gpu_elementwise<__nv_bfloat16, float>(a, FloatToBf16{}, stream);
  if (in == ScalarCode::BFloat16 && out == ScalarCode::Float32)
    return gpu_elementwise<float, __nv_bfloat16>(a, Bf16ToFloat{}, stream);
  if (in == ScalarCode::Float32 && out == ScalarCode::Float16)
    return gpu_elementwise<__half, float>(a, FloatToHalf{}, stream);
  if (in == ScalarCode::Float16 && out == ScalarCode::Float32)
    return gpu_elementwise<float, __half>(a, HalfToFloat{}, stream);
  Operands<2> ops(a);
  const dim3 grid(static_cast<unsigned>((a.numel + kBlockWork - 1) / kBlockWork));
  if (a.can_use_32bit_indexing()) {
    cast_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(a.numel, OffsetCalc<2, uint32_t>(a), ops,
                                                         a.dtype[0], a.dtype[1]);
  } else {
    cast_kernel<int64_t><<<grid, kThreads, 0, stream>>>(a.numel, OffsetCalc<2, int64_t>(a), ops,
                                                        a.dtype[0], a.dtype[1]);
  }
  return cudaGetLastError();
}

cudaError_t launch_fill(void* p, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  const dim3 grid(static_cast<unsigned>(blocks));
  switch (elem_size) {
    case 1:
      fill_kernel<<<grid, 256, 0, stream>>>(static_cast<uint8_t*>(p), n,
                                            static_cast<uint8_t>(bits));
      break;
    case 2:
      fill_kernel<<<grid, 256, 0, stream>>>(static_cast<uint16_t*>(p), n,
                                            static_cast<uint16_t>(bits));
      break;
    case 4:
      fill_kernel<<<grid, 256, 0, stream>>>(static_cast<uint32_t*>(p), n,
                                            static_cast<uint32_t>(bits));
      break;
    default:
      fill_kernel<<<grid, 256, 0, stream>>>(static_cast<uint64_t*>(p), n, bits);
      break;
  }
  return cudaGetLastError();
}

}  // namespace loom::cuda_ops
