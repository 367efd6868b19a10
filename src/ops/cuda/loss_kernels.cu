// CUDA kernels of nll_loss and nll_loss_backward. Per-sample terms are computed in double as on
// the CPU (cpu/nn_kernels.cpp), so the unreduced loss and the gradient are the CPU's bits; the
// reduced loss and the mean's weight sum are one block's fixed-order reduction in double (Note
// [Deterministic device reductions]).
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/loops.cuh"
#include "ops/cuda/loss_kernels.h"

namespace loom::cuda_ops {
namespace {

constexpr int kThreads512 = 512;

__device__ __forceinline__ double class_weight(const double* w, int64_t c) {
  return w != nullptr ? w[c] : 1.0;
}

template <class T>
__global__ void nll_loss_none_kernel(const T* x, const int64_t* t, const double* w, int64_t count,
                                     int64_t classes, int64_t spatial, int64_t ignore, T* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = t[i];
    double loss = 0.0;
    if (c != ignore) {
      const int64_t n = i / spatial, s = i % spatial;
      loss = -class_weight(w, c) *
             static_cast<double>(convert<opmath_t<T>>(x[(n * classes + c) * spatial + s]));
    }
    out[i] = convert<T>(loss);
  }
}

struct LossSums {
  double total, wsum;
};

// One block: the summed loss and weight, then out = sum (reduction 2) or sum / weight (1).
template <class T>
__global__ void __launch_bounds__(kThreads512)
    nll_loss_reduce_kernel(const T* x, const int64_t* t, const double* w, int64_t count,
                           int64_t classes, int64_t spatial, int64_t ignore, int64_t reduction,
                           T* out) {
  LOOM_SHARED_ARRAY(LossSums, smem, kThreads512 / 32);
  LossSums acc{0.0, 0.0};
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t c = t[i];
    if (c == ignore) continue;
    const int64_t n = i / spatial, s = i % spatial;
    const double wc = class_weight(w, c);
    acc.wsum += wc;
    acc.total +=
        -wc * static_cast<double>(convert<opmath_t<T>>(x[(n * classes + c) * spatial + s]));
  }
  acc = block_reduce_x(
      acc,
      [](const LossSums& a, const LossSums& b) {
        return LossSums{a.total + b.total, a.wsum + b.wsum};
      },
      LossSums{0.0, 0.0}, smem);
  // Mean over zero total weight is 0/0 = NaN, as on the CPU.
  if (threadIdx.x == 0) *out = convert<T>(reduction == 2 ? acc.total : acc.total / acc.wsum);
}

// scale = grad_output[0] (sum) or grad_output[0] / summed weight (mean).
template <class T>
__global__ void __launch_bounds__(kThreads512)
    nll_backward_scale_kernel(const T* go, const int64_t* t, const double* w, int64_t count,
                              int64_t ignore, int64_t reduction, double* scale) {
  LOOM_SHARED_ARRAY(double, smem, kThreads512 / 32);
  double wsum = 0.0;
  if (reduction == 1) {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      if (t[i] != ignore) wsum += class_weight(w, t[i]);
    }
    wsum = block_reduce_x(
        wsum, [](double a, double b) { return a + b; }, 0.0, smem);
  }
  if (threadIdx.x == 0) {
    const double g = static_cast<double>(convert<opmath_t<T>>(go[0]));
    *scale = reduction == 1 ? g / wsum : g;
  }
}

template <class T>
__global__ void nll_backward_kernel(const T* go, const int64_t* t, const double* w, int64_t count,
                                    int64_t classes, int64_t spatial, int64_t ignore,
                                    int64_t reduction, const double* scale, T* gi) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = t[i];
    if (c == ignore) continue;
    const double g = reduction == 0 ? static_cast<double>(convert<opmath_t<T>>(go[i])) : *scale;
    const int64_t n = i / spatial, s = i % spatial;
    gi[(n * classes + c) * spatial + s] = convert<T>(-class_weight(w, c) * g);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

}  // namespace

cudaError_t launch_nll_loss(ScalarCode dt, const void* input, const int64_t* target,
                            const double* weight, int64_t count, int64_t classes, int64_t spatial,
                            int64_t reduction, int64_t ignore_index, void* out,
                            cudaStream_t stream) {
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    const T* x = static_cast<const T*>(input);
    if (reduction == 0) {
      if (count == 0) return cudaSuccess;
      nll_loss_none_kernel<T><<<grid_for(count), 256, 0, stream>>>(
          x, target, weight, count, classes, spatial, ignore_index, static_cast<T*>(out));
    } else {
      nll_loss_reduce_kernel<T><<<1, kThreads512, 0, stream>>>(x, target, weight, count, classes,
                                                               spatial, ignore_index, reduction,
                                                               static_cast<T*>(out));
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_nll_loss_backward(ScalarCode dt, const void* grad_output, const int64_t* target,
                                     const double* weight, int64_t count, int64_t classes,
                                     int64_t spatial, int64_t reduction, int64_t ignore_index,
                                     void* grad_input, double* scale, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    const T* go = static_cast<const T*>(grad_output);
    if (reduction != 0) {
      nll_backward_scale_kernel<T><<<1, kThreads512, 0, stream>>>(go, target, weight, count,
                                                                  ignore_index, reduction, scale);
      const cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) return e;
    }
    nll_backward_kernel<T><<<grid_for(count), 256, 0, stream>>>(go, target, weight, count, classes,
                                                                spatial, ignore_index, reduction,
                                                                scale, static_cast<T*>(grad_input));
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
