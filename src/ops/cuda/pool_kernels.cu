// CUDA loops of 2-D max and average pooling and their gradients.
//
// Note [CUDA pooling loops]
// The results must be the CPU's (src/ops/cpu/pool_kernels.cpp) to the bit, indices included:
// - forward: one thread per output element scans its window in the CPU's order (rows, then
//   columns); max pooling starts at -inf (the dtype's lowest for integers) with the index of the
//   window's first in-bounds position, a strictly greater value or a NaN takes over; average
//   pooling sums in the compute type and divides by the CPU's divisor;
// - backward: one thread per input element gathers the gradients of the outputs whose windows
//   cover it, in the order the CPU's scatter adds them (max: outputs in increasing order; average:
//   output rows increasing, columns decreasing), so sums round identically and nothing needs
//   atomics. Max pooling's backward only looks at outputs whose window covers the element: an
//   index that points outside its own window (never produced by the forward) is ignored, where
//   the CPU would add it anyway (or raise IndexError when it is outside the plane).
#include <limits>

#include "ops/cuda/loops.cuh"
#include "ops/cuda/pool_kernels.h"

namespace loom::cuda_ops {
namespace {

unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

template <class M>
__device__ __forceinline__ M lowest_of() {
  if constexpr (std::numeric_limits<M>::has_infinity) {
    return -std::numeric_limits<M>::infinity();
  } else {
    return std::numeric_limits<M>::lowest();
  }
}

#define LOOM_GRID_STRIDE(e, total)                                                           \
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < (total); \
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <class T>
__global__ void max_pool_kernel(const T* in, T* out, int64_t* ind, PoolParams p) {
  using M = opmath_t<T>;
  const int64_t total = p.planes * p.Ho * p.Wo;
  LOOM_GRID_STRIDE(e, total) {
    const int64_t ow = e % p.Wo, oh = (e / p.Wo) % p.Ho, plane = e / (p.Wo * p.Ho);
    const T* src = in + plane * p.H * p.W;
    const int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
    int64_t h0 = hs, w0 = ws;
    while (h0 < 0) h0 += p.dh;
    while (w0 < 0) w0 += p.dw;
    int64_t best_i = h0 * p.W + w0;
    M best = lowest_of<M>();
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t ih = hs + i * p.dh;
      if (ih < 0 || ih >= p.H) continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t iw = ws + j * p.dw;
        if (iw < 0 || iw >= p.W) continue;
        const M v = convert<M>(src[ih * p.W + iw]);
        bool take = v > best;
        if constexpr (!std::is_integral_v<M>) take = take || v != v;  // NaN wins
        if (take) {
          best = v;
          best_i = ih * p.W + iw;
        }
      }
    }
    out[e] = convert<T>(best);
    ind[e] = best_i;
  }
}

// First output (along one axis) whose window [o*s - pad, o*s - pad + span) may cover x, and the
// last; span = (k - 1) * dilation + 1.
__device__ __forceinline__ void covering(int64_t x, int64_t s, int64_t pad, int64_t span,
                                         int64_t n_out, int64_t* lo, int64_t* hi) {
  const int64_t first = x + pad - span + 1;  // o*s >= first
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  const int64_t last = (x + pad) / s;  // o*s <= x + pad
  *hi = last < n_out - 1 ? last : n_out - 1;
}

template <class T>
__global__ void max_pool_backward_kernel(const T* go, const int64_t* ind, T* gi, PoolParams p) {
  using M = opmath_t<T>;
  const int64_t total = p.planes * p.H * p.W;
  LOOM_GRID_STRIDE(e, total) {
    const int64_t w = e % p.W, h = (e / p.W) % p.H, plane = e / (p.W * p.H);
    const int64_t flat = h * p.W + w;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, p.sh, p.ph, (p.kh - 1) * p.dh + 1, p.Ho, &oh0, &oh1);
    covering(w, p.sw, p.pw, (p.kw - 1) * p.dw + 1, p.Wo, &ow0, &ow1);
    const int64_t base = plane * p.Ho * p.Wo;
    M acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = base + oh * p.Wo + ow;
        if (ind[o] == flat) acc += convert<M>(go[o]);
      }
    }
    gi[e] = convert<T>(acc);
  }
}

__device__ __forceinline__ int64_t lesser(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int64_t greater(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// The CPU's divisor of output (oh, ow)'s window, or 0 when the window holds no input element.
__device__ __forceinline__ int64_t avg_divisor(const PoolParams& p, int64_t oh, int64_t ow,
                                               bool count_include_pad, int64_t divisor_override) {
  const int64_t h0 = oh * p.sh - p.ph, h1 = lesser(h0 + p.kh, p.H + p.ph);
  const int64_t w0 = ow * p.sw - p.pw, w1 = lesser(w0 + p.kw, p.W + p.pw);
  const int64_t valid = (lesser(h1, p.H) - greater(h0, 0)) * (lesser(w1, p.W) - greater(w0, 0));
  if (valid <= 0) return 0;
  if (divisor_override != 0) return divisor_override;
  return count_include_pad ? (h1 - h0) * (w1 - w0) : valid;
}

template <class T>
__global__ void avg_pool_kernel(const T* in, T* out, PoolParams p, bool count_include_pad,
                                int64_t divisor_override) {
  using M = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>;
  const int64_t total = p.planes * p.Ho * p.Wo;
  LOOM_GRID_STRIDE(e, total) {
    const int64_t ow = e % p.Wo, oh = (e / p.Wo) % p.Ho, plane = e / (p.Wo * p.Ho);
    const T* src = in + plane * p.H * p.W;
    const int64_t hs = oh * p.sh - p.ph, ws = ow * p.sw - p.pw;
    M acc = 0;
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t ih = hs + i;
      if (ih < 0 || ih >= p.H) continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t iw = ws + j;
        if (iw < 0 || iw >= p.W) continue;
        acc += convert<M>(src[ih * p.W + iw]);
      }
    }
    const int64_t divisor = avg_divisor(p, oh, ow, count_include_pad, divisor_override);
    out[e] = divisor == 0 ? convert<T>(M(0)) : convert<T>(acc / static_cast<M>(divisor));
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* go, T* gi, PoolParams p, bool count_include_pad,
                                         int64_t divisor_override) {
  using M = opmath_t<T>;
  const int64_t total = p.planes * p.H * p.W;
  LOOM_GRID_STRIDE(e, total) {
    const int64_t w = e % p.W, h = (e / p.W) % p.H, plane = e / (p.W * p.H);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, p.sh, p.ph, p.kh, p.Ho, &oh0, &oh1);
    covering(w, p.sw, p.pw, p.kw, p.Wo, &ow0, &ow1);
    const T* g = go + plane * p.Ho * p.Wo;
    M acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow1; ow >= ow0; --ow) {  // the CPU's order (Note above)
        const int64_t divisor = avg_divisor(p, oh, ow, count_include_pad, divisor_override);
        if (divisor == 0) continue;
        acc += convert<M>(g[oh * p.Wo + ow]) / static_cast<M>(divisor);
      }
    }
    gi[e] = convert<T>(acc);
  }
}

#undef LOOM_GRID_STRIDE

// Calls f(TypeTag<T>{}) with T the device type of `code`; integer types only when `integers`.
template <class F>
cudaError_t dispatch(ScalarCode code, bool integers, const F& f) {
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
  if (!integers) return cudaErrorInvalidValue;
  switch (code) {
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
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_max_pool(const void* in, void* out, int64_t* ind, const PoolParams& p,
                            ScalarCode dtype, cudaStream_t stream) {
  const int64_t total = p.planes * p.Ho * p.Wo;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, true, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const T*>(in),
                                                                 static_cast<T*>(out), ind, p);
    return cudaGetLastError();
  });
}

cudaError_t launch_max_pool_backward(const void* grad_out, const int64_t* ind, void* gi,
                                     const PoolParams& p, ScalarCode dtype, cudaStream_t stream) {
  const int64_t total = p.planes * p.H * p.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, false, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), ind, static_cast<T*>(gi), p);
    return cudaGetLastError();
  });
}

cudaError_t launch_avg_pool(const void* in, void* out, const PoolParams& p, bool count_include_pad,
                            int64_t divisor_override, ScalarCode dtype, cudaStream_t stream) {
  const int64_t total = p.planes * p.Ho * p.Wo;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, true, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), p, count_include_pad, divisor_override);
    return cudaGetLastError();
  });
}

cudaError_t launch_avg_pool_backward(const void* grad_out, void* gi, const PoolParams& p,
                                     bool count_include_pad, int64_t divisor_override,
                                     ScalarCode dtype, cudaStream_t stream) {
  const int64_t total = p.planes * p.H * p.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, false, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), static_cast<T*>(gi), p, count_include_pad,
        divisor_override);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
