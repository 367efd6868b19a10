// CUDA loops of the factories (arange, linspace, eye, one_hot), the random factories (rand, randn,
// randint) and dropout. Each repeats the CPU loop's arithmetic (cpu/factory_kernels.cpp,
// cpu/nn_kernels.cpp): sums of products use the _rn intrinsics, which nvcc never fuses into a
// multiply-add, so the values equal the CPU's bit for bit; random values come from the same
// Philox draws (Note [Same random numbers on every device], philox.h).
#include <type_traits>

#include "ops/cuda/factory_kernels.h"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/philox.h"

namespace loom::cuda_ops {
namespace {

constexpr int kGroupThreads = 256;

// f(k) for k in [0, groups): one thread per group of elements, grid-stride.
template <class F>
__global__ void __launch_bounds__(kGroupThreads) group_kernel(int64_t groups, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kGroupThreads;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kGroupThreads + threadIdx.x; k < groups;
       k += stride) {
    f(k);
  }
}

template <class F>
cudaError_t launch_groups(int64_t groups, const F& f, cudaStream_t stream) {
  if (groups <= 0) return cudaSuccess;
  int64_t blocks = (groups + kGroupThreads - 1) / kGroupThreads;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;
  group_kernel<<<static_cast<unsigned>(blocks), kGroupThreads, 0, stream>>>(groups, f);
  return cudaGetLastError();
}

template <class T>
struct Arange {
  T* out;
  bool all_int;
  int64_t istart, istep;
  double start, step;
  __device__ __forceinline__ void operator()(int64_t i) const {
    if (all_int) {
      out[i] = convert<T>(istart + i * istep);
    } else {
      out[i] = convert<T>(fma(static_cast<double>(i), step, start));  // as the CPU: one rounding
    }
  }
};

template <class T>
struct Linspace {
  T* out;
  int64_t steps;
  double start, end, step;
  __device__ __forceinline__ void operator()(int64_t i) const {
    const int64_t half = steps / 2;
    const double v = i < half ? fma(step, static_cast<double>(i), start)
                              : fma(-step, static_cast<double>(steps - 1 - i), end);
    out[i] = convert<T>(v);
  }
};

template <class T>
struct Eye {
  T* out;
  int64_t cols;
  __device__ __forceinline__ void operator()(int64_t i) const {
    out[i] = convert<T>(i / cols == i % cols ? 1 : 0);
  }
};

struct OneHot {
  int64_t* out;
  const int64_t* idx;
  int64_t classes;
  __device__ __forceinline__ void operator()(int64_t i) const { out[i * classes + idx[i]] = 1; }
};

// Float types but float64: element i <- draw i; group k is block k (elements 4k .. 4k+3).
template <class T>
struct RandFloat {
  T* out;
  int64_t n;
  uint64_t seed, offset;
  __device__ __forceinline__ void operator()(int64_t k) const {
    const philox::Block b = philox::block(seed, offset, static_cast<uint64_t>(k));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * k + j;
      if (i < n) out[i] = convert<T>(philox::unit_float(b.v[j]));
    }
  }
};

// float64 rand and randint: element i <- draws 2i, 2i+1; group k is block k (elements 2k, 2k+1).
struct RandDouble {
  double* out;
  int64_t n;
  uint64_t seed, offset;
  __device__ __forceinline__ void operator()(int64_t k) const {
    const philox::Block b = philox::block(seed, offset, static_cast<uint64_t>(k));
    for (int64_t i = 2 * k; i < 2 * k + 2 && i < n; ++i)
      out[i] = philox::rand_double(b, static_cast<uint64_t>(i));
  }
};

template <class T>
struct Randint {
  T* out;
  int64_t n, low;
  uint64_t range, seed, offset;
  __device__ __forceinline__ void operator()(int64_t k) const {
    const philox::Block b = philox::block(seed, offset, static_cast<uint64_t>(k));
    for (int64_t i = 2 * k; i < 2 * k + 2 && i < n; ++i)
      out[i] = convert<T>(philox::randint_value(b, static_cast<uint64_t>(i), low, range));
  }
};

// randn: elements 2k, 2k+1 <- block k.
template <class T>
struct Randn {
  T* out;
  int64_t n;
  uint64_t seed, offset;
  __device__ __forceinline__ void operator()(int64_t k) const {
    double z0, z1;
    philox::randn_pair(philox::block(seed, offset, static_cast<uint64_t>(k)), &z0, &z1);
    out[2 * k] = convert<T>(z0);
    if (2 * k + 1 < n) out[2 * k + 1] = convert<T>(z1);
  }
};

template <class T>
struct Dropout {
  using M = opmath_t<T>;
  T* out;
  bool* mask;
  const T* in;
  int64_t n;
  float keep;
  M scale;
  uint64_t seed, offset;
  __device__ __forceinline__ void operator()(int64_t k) const {
    const philox::Block b = philox::block(seed, offset, static_cast<uint64_t>(k));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * k + j;
      if (i >= n) break;
      const bool kept = philox::unit_float(b.v[j]) < keep;
      mask[i] = kept;
      out[i] = kept ? convert<T>(convert<M>(in[i]) * scale) : convert<T>(M(0));
    }
  }
};

template <class T>
struct DropoutBackward {
  using M = opmath_t<T>;
  M scale;
  __device__ __forceinline__ T operator()(T g, bool m) const {
    return convert<T>(convert<M>(g) * (m ? scale : M(0)));
  }
};

}  // namespace

cudaError_t launch_arange(void* out, ScalarCode code, int64_t n, bool all_int, int64_t istart,
                          int64_t istep, double start, double step, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(code, [&] {
    const Arange<scalar_t> f{static_cast<scalar_t*>(out), all_int, istart, istep, start, step};
    return launch_groups(n, f, stream);
  });
}

cudaError_t launch_linspace(void* out, ScalarCode code, int64_t steps, double start, double end,
                            double step, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(code, [&] {
    const Linspace<scalar_t> f{static_cast<scalar_t*>(out), steps, start, end, step};
    return launch_groups(steps, f, stream);
  });
}

cudaError_t launch_eye(void* out, ScalarCode code, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(code, [&] {
    return launch_groups(rows * cols, Eye<scalar_t>{static_cast<scalar_t*>(out), cols}, stream);
  });
}

cudaError_t launch_one_hot(int64_t* out, const int64_t* idx, int64_t n, int64_t classes,
                           cudaStream_t stream) {
  return launch_groups(n, OneHot{out, idx, classes}, stream);
}

cudaError_t launch_rand(void* out, ScalarCode code, int64_t n, uint64_t seed, uint64_t offset,
                        cudaStream_t stream) {
  if (code == ScalarCode::Float64) {
    return launch_groups((n + 1) / 2, RandDouble{static_cast<double*>(out), n, seed, offset},
                         stream);
  }
  return LOOM_CUDA_DISPATCH_FLOAT(code, [&] {
    const RandFloat<scalar_t> f{static_cast<scalar_t*>(out), n, seed, offset};
    return launch_groups((n + 3) / 4, f, stream);
  });
}

cudaError_t launch_randn(void* out, ScalarCode code, int64_t n, uint64_t seed, uint64_t offset,
                         cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(code, [&] {
    const Randn<scalar_t> f{static_cast<scalar_t*>(out), n, seed, offset};
    return launch_groups((n + 1) / 2, f, stream);
  });
}

cudaError_t launch_randint(void* out, ScalarCode code, int64_t n, int64_t low, uint64_t range,
                           uint64_t seed, uint64_t offset, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_ALL(code, [&] {
    const Randint<scalar_t> f{static_cast<scalar_t*>(out), n, low, range, seed, offset};
    return launch_groups((n + 1) / 2, f, stream);
  });
}

cudaError_t launch_dropout(void* out, bool* mask, const void* in, ScalarCode code, int64_t n,
                           float keep, double scale, uint64_t seed, uint64_t offset,
                           cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(code, [&] {
    using M = opmath_t<scalar_t>;
    const Dropout<scalar_t> f{static_cast<scalar_t*>(out),
                              mask,
                              static_cast<const scalar_t*>(in),
                              n,
                              keep,
                              static_cast<M>(scale),
                              seed,
                              offset};
    return launch_groups((n + 3) / 4, f, stream);
  });
}

cudaError_t launch_dropout_backward(const IterArgs& a, double scale, cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(a.dtype[1], [&] {
    using M = opmath_t<scalar_t>;
    return gpu_elementwise<scalar_t, scalar_t, bool>(
        a, DropoutBackward<scalar_t>{static_cast<M>(scale)}, stream);
  });
}

}  // namespace loom::cuda_ops
