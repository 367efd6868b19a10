// Device loops for pointwise kernels (ops layer, CUDA backend; included by .cu files only).
//
// gpu_elementwise<Out, In...>(args, f, stream) runs out = f(in...) over an IterArgs (iter_args.h):
//   - contiguous operands: each thread handles kVec consecutive elements with 16-byte (or
//     narrower) vector loads and stores when every pointer is aligned for them, else plain loads;
//   - otherwise an offset calculator turns the linear index into one byte offset per operand,
//     with 32-bit index math (division by magic numbers) when every offset fits, 64-bit otherwise;
//   - CPU scalar operands (IterArgs::cpu_scalar_mask) are read from the kernel's parameters.
// Out and In are the operands' storage types (bool, uint8_t, ..., __half, __nv_bfloat16, float,
// double); f is a __device__ functor or an extended __device__ lambda. Launch errors are checked
// by the caller (check_launch in cuda_ops.h) — the .cu side returns the cudaError_t.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/tuple>
#include <type_traits>
#include <utility>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

constexpr int kThreads = 128;
constexpr int kThreadWork = 4;  // elements per thread per block step
constexpr int kBlockWork = kThreads * kThreadWork;

// Computation type: float for 16-bit floats, the type itself otherwise.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<__half> {
  using type = float;
};
template <>
struct OpMath<__nv_bfloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

// Converts between storage types (through float for 16-bit floats; bool: nonzero).
template <class To, class From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Unsigned 32-bit division by a fixed divisor with a multiply and a shift (Granlund-Montgomery).
struct IntDivider32 {
  uint32_t divisor = 1, m1 = 0, shift = 0;
  IntDivider32() = default;
  explicit IntDivider32(uint32_t d) : divisor(d) {
    for (shift = 0; shift < 32; ++shift)
      if ((uint64_t{1} << shift) >= d) break;
    const uint64_t one = 1;
    m1 = static_cast<uint32_t>(((one << 32) * ((one << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    const uint32_t t = __umulhi(n, m1);
    return (t + n) >> shift;
  }
};

template <int N, class Index>
struct OffsetCalc {
  int dims = 0;
  Index sizes[kMaxIterDims];
  IntDivider32 divs[kMaxIterDims];  // 32-bit only
  Index strides[kMaxIterDims][N];

  OffsetCalc(const IterArgs& a) : dims(a.ndim) {
    for (int d = 0; d < a.ndim; ++d) {
      sizes[d] = static_cast<Index>(a.sizes[d]);
      if constexpr (sizeof(Index) == 4) divs[d] = IntDivider32(static_cast<uint32_t>(a.sizes[d]));
      for (int t = 0; t < N; ++t) strides[d][t] = static_cast<Index>(a.strides[t][d]);
    }
  }
  __device__ __forceinline__ void get(Index linear, Index (&off)[N]) const {
#pragma unroll
    for (int t = 0; t < N; ++t) off[t] = 0;
#pragma unroll
    for (int d = 0; d < kMaxIterDims; ++d) {
      if (d == dims) break;
      Index q;
      if constexpr (sizeof(Index) == 4) {
        q = divs[d].div(linear);
      } else {
        q = linear / sizes[d];
      }
      const Index r = linear - q * sizes[d];
      linear = q;
#pragma unroll
      for (int t = 0; t < N; ++t) off[t] += r * strides[d][t];
    }
  }
};

template <int N>
struct Operands {
  char* data[N];
  uint32_t scalar_mask;
  alignas(8) unsigned char scalar[N][8];

  explicit Operands(const IterArgs& a) : scalar_mask(a.cpu_scalar_mask) {
    for (int t = 0; t < N; ++t) {
      data[t] = a.data[t];
      for (int b = 0; b < 8; ++b) scalar[t][b] = a.scalar[t][b];
    }
  }
  template <class T>
  __device__ __forceinline__ T load(int t, int64_t offset) const {
    if (scalar_mask & (1u << t)) return *reinterpret_cast<const T*>(scalar[t]);
    return *reinterpret_cast<const T*>(data[t] + offset);
  }
};

template <class T>
struct TypeTag {
  using type = T;
};

template <class T, int V>
struct alignas(sizeof(T) * V) AlignedVector {
  T val[V];
};

// The per-element work of gpu_elementwise: out = f(in...) at the offsets `calc` gives (strided) or
// at consecutive elements (contiguous). A class, because __global__ templates cannot be variadic.
template <class Out, class F, class Calc, class... In>
struct ElementwiseBody {
  static constexpr int N = 1 + sizeof...(In);
  F f;
  Calc calc;
  Operands<N> ops;

  __device__ __forceinline__ void strided(int64_t idx) const {
    strided_impl(idx, std::index_sequence_for<In...>{});
  }
  template <size_t... I>
  __device__ __forceinline__ void strided_impl(int64_t idx, std::index_sequence<I...>) const {
    using Index = std::remove_cv_t<std::remove_reference_t<decltype(calc.sizes[0])>>;
    Index off[N];
    calc.get(static_cast<Index>(idx), off);
    *reinterpret_cast<Out*>(ops.data[0] + off[0]) =
        f(ops.template load<In>(static_cast<int>(I) + 1, static_cast<int64_t>(off[I + 1]))...);
  }
  __device__ __forceinline__ void element(int64_t e) const {
    element_impl(e, std::index_sequence_for<In...>{});
  }
  template <size_t... I>
  __device__ __forceinline__ void element_impl(int64_t e, std::index_sequence<I...>) const {
    reinterpret_cast<Out*>(ops.data[0])[e] =
        f(ops.template load<In>(static_cast<int>(I) + 1, e * static_cast<int64_t>(sizeof(In)))...);
  }
  template <int V, class T>
  __device__ __forceinline__ AlignedVector<T, V> load_vector(int t, int64_t first) const {
    AlignedVector<T, V> v;
    if (ops.scalar_mask & (1u << t)) {
      const T x = *reinterpret_cast<const T*>(ops.scalar[t]);
#pragma unroll
      for (int j = 0; j < V; ++j) v.val[j] = x;
    } else {
      v = *reinterpret_cast<const AlignedVector<T, V>*>(reinterpret_cast<const T*>(ops.data[t]) +
                                                         first);
    }
    return v;
  }
  // V elements from `first` (all in range, pointers aligned for V).
  template <int V>
  __device__ __forceinline__ void vector(int64_t first) const {
    vector_impl<V>(first, std::index_sequence_for<In...>{});
  }
  template <int V, size_t... I>
  __device__ __forceinline__ void vector_impl(int64_t first, std::index_sequence<I...>) const {
    auto ins = cuda::std::make_tuple(load_vector<V, In>(static_cast<int>(I) + 1, first)...);
    AlignedVector<Out, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.val[j] = f(cuda::std::get<I>(ins).val[j]...);
    *reinterpret_cast<AlignedVector<Out, V>*>(reinterpret_cast<Out*>(ops.data[0]) + first) = o;
  }
};

template <class Body>
__global__ void __launch_bounds__(kThreads) strided_kernel(int64_t n, Body body) {
  int64_t idx = static_cast<int64_t>(blockIdx.x) * kBlockWork + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kThreadWork; ++k, idx += kThreads) {
    if (idx >= n) return;
    body.strided(idx);
  }
}

// Contiguous operands; V elements per vector access (1 when some pointer is not aligned for more).
// kThreadWork / V steps of one V-element vector per thread: a block covers kBlockWork elements.
template <int V, class Body>
__global__ void __launch_bounds__(kThreads) contiguous_kernel(int64_t n, Body body) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kBlockWork;
  if constexpr (V > 1) {
    constexpr int kSteps = kThreadWork / V > 0 ? kThreadWork / V : 1;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int64_t first = base + (static_cast<int64_t>(s) * kThreads + threadIdx.x) * V;
      if (first + V <= n) {
        body.template vector<V>(first);
      } else {
        for (int64_t e = first; e < n; ++e) body.element(e);
      }
    }
  } else {
    int64_t e = base + threadIdx.x;
#pragma unroll
    for (int k = 0; k < kThreadWork; ++k, e += kThreads) {
      if (e >= n) return;
      body.element(e);
    }
  }
}

// A calculator that is never used (contiguous loops index directly).
struct NoCalc {
  int64_t sizes[1];
};

template <class... T>
constexpr int max_size() {
  int m = 1;
  ((m = sizeof(T) > static_cast<size_t>(m) ? static_cast<int>(sizeof(T)) : m), ...);
  return m;
}

// The vector width for contiguous operands: 16-byte accesses of the widest type, if every pointer
// is aligned for it, else narrower, else 1.
template <class Out, class... In>
int vector_width(const IterArgs& a) {
  constexpr int widest = max_size<Out, In...>();
  int v = 16 / widest;
  if (v > kThreadWork) v = kThreadWork;
  const int sizes[] = {static_cast<int>(sizeof(Out)), static_cast<int>(sizeof(In))...};
  while (v > 1) {
    bool ok = true;
    for (int t = 0; t < a.ntensors; ++t) {
      if (a.cpu_scalar_mask & (1u << t)) continue;
      if (reinterpret_cast<uintptr_t>(a.data[t]) % (static_cast<uintptr_t>(sizes[t]) * v) != 0)
        ok = false;
    }
    if (ok) return v;
    v /= 2;
  }
  return 1;
}

// Runs out = f(in...) over `a` on `stream`. Returns the launch's error (cudaSuccess when nothing
// needed launching).
template <class Out, class... In, class F>
cudaError_t gpu_elementwise(const IterArgs& a, const F& f, cudaStream_t stream) {
  constexpr int N = 1 + sizeof...(In);
  if (a.numel == 0) return cudaSuccess;
  const Operands<N> ops(a);
  const int64_t blocks = (a.numel + kBlockWork - 1) / kBlockWork;
  const dim3 grid(static_cast<unsigned>(blocks));
  if (a.is_contiguous()) {
    const ElementwiseBody<Out, F, NoCalc, In...> body{f, NoCalc{}, ops};
    switch (vector_width<Out, In...>(a)) {
      case 4:
        contiguous_kernel<4><<<grid, kThreads, 0, stream>>>(a.numel, body);
        break;
      case 2:
        contiguous_kernel<2><<<grid, kThreads, 0, stream>>>(a.numel, body);
        break;
      default:
        contiguous_kernel<1><<<grid, kThreads, 0, stream>>>(a.numel, body);
        break;
    }
  } else if (a.can_use_32bit_indexing()) {
    using Calc = OffsetCalc<N, uint32_t>;
    const ElementwiseBody<Out, F, Calc, In...> body{f, Calc(a), ops};
    strided_kernel<<<grid, kThreads, 0, stream>>>(a.numel, body);
  } else {
    using Calc = OffsetCalc<N, int64_t>;
    const ElementwiseBody<Out, F, Calc, In...> body{f, Calc(a), ops};
    strided_kernel<<<grid, kThreads, 0, stream>>>(a.numel, body);
  }
  return cudaGetLastError();
}

}  // namespace loom::cuda_ops

// Dtype dispatch: LOOM_CUDA_DISPATCH_*(code, [&] { ... }) runs the lambda with scalar_t bound to the
// device storage type of a ScalarCode and returns its result; a code outside the list returns
// cudaErrorInvalidValue where the result is a cudaError_t (a launcher's), else a value-initialised
// result (the host side refuses those dtypes first). A function, not a switch in the macro: C++17
// allows no lambda inside the decltype a macro would need for the fallback.
namespace loom::cuda_ops {
template <class R>
R unhandled_dtype() {
  if constexpr (std::is_same_v<R, cudaError_t>) {
    return cudaErrorInvalidValue;
  } else {
    return R();
  }
}
template <class F>
auto dispatch_all_types(ScalarCode code, const F& f) {
  switch (code) {
    case ScalarCode::Bool:
      return f(TypeTag<bool>{});
    case ScalarCode::UInt8:
      return f(TypeTag<uint8_t>{});
    case ScalarCode::Int8:
      return f(TypeTag<int8_t>{});
    case ScalarCode::Int16:
      return f(TypeTag<int16_t>{});
    case ScalarCode::Int32:
      return f(TypeTag<int32_t>{});
    case ScalarCode::Int64:
      return f(TypeTag<int64_t>{});
    case ScalarCode::Float16:
      return f(TypeTag<__half>{});
    case ScalarCode::BFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case ScalarCode::Float32:
      return f(TypeTag<float>{});
    case ScalarCode::Float64:
      return f(TypeTag<double>{});
  }
  return unhandled_dtype<decltype(f(TypeTag<float>{}))>();
}
template <class F>
auto dispatch_float_types(ScalarCode code, const F& f) {
  switch (code) {
    case ScalarCode::Float16:
      return f(TypeTag<__half>{});
    case ScalarCode::BFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case ScalarCode::Float32:
      return f(TypeTag<float>{});
    case ScalarCode::Float64:
      return f(TypeTag<double>{});
    default:
      break;
  }
  return unhandled_dtype<decltype(f(TypeTag<float>{}))>();
}
}  // namespace loom::cuda_ops

#define LOOM_CUDA_DISPATCH_ALL(code, ...)                                    \
  ::loom::cuda_ops::dispatch_all_types((code), [&](auto loom_dispatch_tag) { \
    using scalar_t = typename decltype(loom_dispatch_tag)::type;             \
    return __VA_ARGS__();                                                    \
  })
#define LOOM_CUDA_DISPATCH_FLOAT(code, ...)                                    \
  ::loom::cuda_ops::dispatch_float_types((code), [&](auto loom_dispatch_tag) { \
    using scalar_t = typename decltype(loom_dispatch_tag)::type;               \
    return __VA_ARGS__();                                                      \
  })
