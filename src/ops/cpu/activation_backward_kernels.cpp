// CPU kernels of the activation backwards: g * f'(x) as functors over contiguous arrays (the
// compiler vectorises them; float32 uses unary_math.h), strided inputs through TensorIterator.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>

#include "loom/parallel.h"
#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/tensor_iterator.h"
#include "ops/unary_math.h"

namespace loom {
namespace {

// ---- backward of the activations ----

// Functors `M operator()(M g, M x)`: the input gradient from grad_output g and the forward's input
// or output x, in the compute type M.
struct ThresholdBackwardOp {
  static constexpr const char* name = "threshold_backward";
  double threshold = 0;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T x) const {
    return x <= static_cast<T>(threshold) ? T(0) : g;  // a NaN x passes g through, as PyTorch
  }
};
struct SigmoidBackwardOp {
  static constexpr const char* name = "sigmoid_backward";
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T y) const {
    return g * (T(1) - y) * y;
  }
};
struct TanhBackwardOp {
  static constexpr const char* name = "tanh_backward";
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T y) const {
    return g * (T(1) - y * y);
  }
};
// d/dx x*s(x) = s * (1 + x * (1 - s)).
struct SiluBackwardOp {
  static constexpr const char* name = "silu_backward";
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T x) const {
    T s;
    if constexpr (std::is_same_v<T, float>) {
      s = fastmath::sigmoid_f32(x);
    } else {
      s = T(1) / (T(1) + std::exp(-x));
    }
    return g * s * (T(1) + x * (T(1) - s));
  }
};
// d/dx x*Phi(x) = Phi(x) + x * phi(x).
struct GeluErfBackwardOp {
  static constexpr const char* name = "gelu_backward";
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T x) const {
    constexpr T kSqrtHalf = T(0.70710678118654752440);
    constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
    if constexpr (std::is_same_v<T, float>) {
      const float cdf = 0.5f * (1.0f + fastmath::erf_f32(x * kSqrtHalf));
      return g * (cdf + x * kInvSqrt2Pi * fastmath::exp_f32(-0.5f * x * x));
    } else {
      const T cdf = T(0.5) * (T(1) + std::erf(x * kSqrtHalf));
      return g * (cdf + x * kInvSqrt2Pi * std::exp(T(-0.5) * x * x));
    }
  }
};
// The exact derivative of GeluTanhOp's formula (not of the erf gelu it approximates).
struct GeluTanhBackwardOp {
  static constexpr const char* name = "gelu_backward";
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T g, T x) const {
    constexpr T kBeta = T(0.79788456080286535588);
    constexpr T kKappa = T(0.044715);
    const T inner = kBeta * (x + kKappa * x * x * x);
    T t;
    if constexpr (std::is_same_v<T, float>) {
      t = fastmath::tanh_f32(inner);
    } else {
      t = std::tanh(inner);
    }
    const T d_inner = kBeta * (T(1) + T(3) * kKappa * x * x);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * d_inner);
  }
};

// y[i] = op(g[i], x[i]) over contiguous arrays; 16-bit floats are widened as in map_contiguous.
template <class T, class Op>
LOOM_WIDE_VECTOR_LOOP void map2_contiguous(const Op& op, const T* g, const T* x, T* y, int64_t n) {
  if constexpr (is_reduced_float_v<T>) {
    constexpr int64_t kBlock = 256;
    float a[kBlock], b[kBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      for (int64_t j = 0; j < m; ++j) a[j] = static_cast<float>(g[i0 + j]);
      for (int64_t j = 0; j < m; ++j) b[j] = static_cast<float>(x[i0 + j]);
      for (int64_t j = 0; j < m; ++j) a[j] = op(a[j], b[j]);
      for (int64_t j = 0; j < m; ++j) y[i0 + j] = T(a[j]);
    }
  } else {
    const T* __restrict gr = g;
    const T* __restrict xr = x;
    T* __restrict yr = y;
    for (int64_t i = 0; i < n; ++i) yr[i] = op(gr[i], xr[i]);
  }
}

// The Loop1d body: strided runs are gathered into blocks so the math still vectorises.
template <class T, class Op>
void map2_strided(const Op& op, char** data, const int64_t* s, int64_t n) {
  constexpr auto es = static_cast<int64_t>(sizeof(T));
  if (s[0] == es && s[1] == es && s[2] == es) {
    map2_contiguous<T>(op, reinterpret_cast<const T*>(data[1]), reinterpret_cast<const T*>(data[2]),
                       reinterpret_cast<T*>(data[0]), n);
    return;
  }
  constexpr int64_t kBlock = 256;
  T a[kBlock], b[kBlock], r[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    for (int64_t j = 0; j < m; ++j) {
      a[j] = *reinterpret_cast<const T*>(data[1] + (i0 + j) * s[1]);
      b[j] = *reinterpret_cast<const T*>(data[2] + (i0 + j) * s[2]);
    }
    map2_contiguous<T>(op, a, b, r, m);
    for (int64_t j = 0; j < m; ++j) *reinterpret_cast<T*>(data[0] + (i0 + j) * s[0]) = r[j];
  }
}

// grad_input = op(grad_output, x) elementwise; x_name is the schema's name of x.
template <class Op>
Tensor activation_backward(const Tensor& grad_output, const Tensor& x, const char* x_name,
                           const Op& op = Op{}) {
  check_defined(grad_output, Op::name, "grad_output");
  check_defined(x, Op::name, x_name);
  LOOM_CHECK(grad_output.sizes() == x.sizes(), "[", Op::name, "] expected grad_output of shape ",
             x.sizes(), " (the shape of ", x_name, ") but got ", grad_output.sizes());
  const DType dt = x.dtype();
  LOOM_CHECK_TYPE(is_floating(dt) && grad_output.dtype() == dt, "[", Op::name,
                  "] expected grad_output and ", x_name, " of one floating dtype but got ",
                  grad_output.dtype(), " and ", dt);
  if (x.is_cpu() && grad_output.is_cpu() && x.is_contiguous() && grad_output.is_contiguous()) {
    Tensor y = empty_tensor(x.sizes(), dt, kCPU);
    LOOM_DISPATCH_FLOAT_TYPES(dt, Op::name, [&] {
      const auto* gp = grad_output.data_ptr<scalar_t>();
      const auto* xp = x.data_ptr<scalar_t>();
      auto* yp = y.data_ptr<scalar_t>();
      parallel_for(0, x.numel(), 32768, [&](int64_t b, int64_t e) {
        map2_contiguous<scalar_t>(op, gp + b, xp + b, yp + b, e - b);
      });
    });
    return y;
  }
  TensorIteratorConfig cfg;
  cfg.op = Op::name;
  cfg.outputs = {Tensor()};
  cfg.inputs = {grad_output, x};
  TensorIterator it(std::move(cfg));
  LOOM_DISPATCH_FLOAT_TYPES(dt, Op::name, [&] {
    it.for_each(
        [&op](char** d, const int64_t* s, int64_t n) { map2_strided<scalar_t>(op, d, s, n); });
  });
  it.finish();
  return it.output(0);
}

Tensor threshold_backward_kernel(const Tensor& grad_output, const Tensor& self,
                                 const Scalar& threshold) {
  ThresholdBackwardOp op;
  op.threshold = threshold.to_double();
  return activation_backward(grad_output, self, "self", op);
}
Tensor sigmoid_backward_kernel(const Tensor& grad_output, const Tensor& output) {
  return activation_backward<SigmoidBackwardOp>(grad_output, output, "output");
}
Tensor tanh_backward_kernel(const Tensor& grad_output, const Tensor& output) {
  return activation_backward<TanhBackwardOp>(grad_output, output, "output");
}
Tensor silu_backward_kernel(const Tensor& grad_output, const Tensor& self) {
  return activation_backward<SiluBackwardOp>(grad_output, self, "self");
}
Tensor gelu_backward_kernel(const Tensor& grad_output, const Tensor& self,
                            std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu_backward] approximate argument must be either 'none' or 'tanh' but got '",
             approximate, "'");
  if (approximate == "tanh") {
    return activation_backward<GeluTanhBackwardOp>(grad_output, self, "self");
  }
  return activation_backward<GeluErfBackwardOp>(grad_output, self, "self");
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("threshold_backward", threshold_backward_kernel);
  m.impl("sigmoid_backward", sigmoid_backward_kernel);
  m.impl("tanh_backward", tanh_backward_kernel);
  m.impl("silu_backward", silu_backward_kernel);
  m.impl("gelu_backward", gelu_backward_kernel);
}

}  // namespace loom
