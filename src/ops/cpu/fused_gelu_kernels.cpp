// CPU kernels of the fused bias + GELU (Note [Fused bias GELU] in fused_gelu.cpp): one pass over
// the rows, the bias added in float (double for double) and GELU applied with the formulas of the
// gelu / gelu_backward kernels, so float32 results equal add + gelu bit for bit.
#include <cmath>
#include <vector>

#include "loom/parallel.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"
#include "ops/unary_math.h"

namespace loom {
namespace {

template <class A>
LOOM_ALWAYS_INLINE A gelu_value(A x, bool tanh_form) {
  if (tanh_form) {
    constexpr A kBeta = A(0.79788456080286535588);  // sqrt(2 / pi)
    constexpr A kKappa = A(0.044715);
    const A inner = kBeta * (x + kKappa * x * x * x);
    if constexpr (std::is_same_v<A, float>) {
      return 0.5f * x * (1.0f + fastmath::tanh_f32(inner));
    } else {
      return A(0.5) * x * (A(1) + std::tanh(inner));
    }
  }
  constexpr A kSqrtHalf = A(0.70710678118654752440);
  if constexpr (std::is_same_v<A, float>) {
    return 0.5f * x * (1.0f + fastmath::erf_f32(x * kSqrtHalf));
  } else {
    return A(0.5) * x * (A(1) + std::erf(x * kSqrtHalf));
  }
}

template <class A>
LOOM_ALWAYS_INLINE A gelu_grad(A g, A x, bool tanh_form) {
  if (tanh_form) {
    constexpr A kBeta = A(0.79788456080286535588);
    constexpr A kKappa = A(0.044715);
    const A inner = kBeta * (x + kKappa * x * x * x);
    A t;
    if constexpr (std::is_same_v<A, float>) {
      t = fastmath::tanh_f32(inner);
    } else {
      t = std::tanh(inner);
    }
    const A d_inner = kBeta * (A(1) + A(3) * kKappa * x * x);
    return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * d_inner);
  }
  constexpr A kSqrtHalf = A(0.70710678118654752440);
  constexpr A kInvSqrt2Pi = A(0.39894228040143267794);
  if constexpr (std::is_same_v<A, float>) {
    const float cdf = 0.5f * (1.0f + fastmath::erf_f32(x * kSqrtHalf));
    return g * (cdf + x * kInvSqrt2Pi * fastmath::exp_f32(-0.5f * x * x));
  } else {
    const A cdf = A(0.5) * (A(1) + std::erf(x * kSqrtHalf));
    return g * (cdf + x * kInvSqrt2Pi * std::exp(A(-0.5) * x * x));
  }
}

// Rows of m elements, each pre-activation x + b computed once in A; `f(row, j, pre)` writes.
template <class F>
void for_rows(int64_t rows, int64_t m, const F& f) {
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(m, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) f(r);
               });
}

void bias_gelu_loop(const Tensor& out, const Tensor& input, const Tensor& bias,
                    std::string_view approximate) {
  const bool tanh_form = gelu_is_tanh("_bias_gelu", approximate);
  const int64_t m = input.size(-1);
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / m;
  const Tensor x = input.contiguous(), b = bias.contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), "_bias_gelu", [&] {
    using A = opmath_t<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = out.data_ptr<scalar_t>();
    std::vector<A> bf(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j)
      bf[static_cast<size_t>(j)] = convert<A>(b.data_ptr<scalar_t>()[j]);
    const A* bp = bf.data();
    for_rows(rows, m, [&](int64_t r) {
      const scalar_t* xr = xp + r * m;
      scalar_t* yr = yp + r * m;
      if (tanh_form) {
        for (int64_t j = 0; j < m; ++j)
          yr[j] = convert<scalar_t>(gelu_value<A>(convert<A>(xr[j]) + bp[j], true));
      } else {
        for (int64_t j = 0; j < m; ++j)
          yr[j] = convert<scalar_t>(gelu_value<A>(convert<A>(xr[j]) + bp[j], false));
      }
    });
  });
}

void bias_gelu_backward_loop(const Tensor& out, const Tensor& grad, const Tensor& input,
                             const Tensor& bias, std::string_view approximate) {
  const bool tanh_form = gelu_is_tanh("_bias_gelu_backward", approximate);
  const int64_t m = input.size(-1);
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / m;
  const Tensor g = grad.contiguous(), x = input.contiguous(), b = bias.contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), "_bias_gelu_backward", [&] {
    using A = opmath_t<scalar_t>;
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = out.data_ptr<scalar_t>();
    std::vector<A> bf(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j)
      bf[static_cast<size_t>(j)] = convert<A>(b.data_ptr<scalar_t>()[j]);
    const A* bp = bf.data();
    for_rows(rows, m, [&](int64_t r) {
      const int64_t o = r * m;
      if (tanh_form) {
        for (int64_t j = 0; j < m; ++j) {
          yp[o + j] = convert<scalar_t>(
              gelu_grad<A>(convert<A>(gp[o + j]), convert<A>(xp[o + j]) + bp[j], true));
        }
      } else {
        for (int64_t j = 0; j < m; ++j) {
          yp[o + j] = convert<scalar_t>(
              gelu_grad<A>(convert<A>(gp[o + j]), convert<A>(xp[o + j]) + bp[j], false));
        }
      }
    });
  });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&bias_gelu_shape, &bias_gelu_loop>::register_cpu(m, "_bias_gelu");
  Structured<&bias_gelu_backward_shape, &bias_gelu_backward_loop>::register_cpu(
      m, "_bias_gelu_backward");
}

}  // namespace loom
