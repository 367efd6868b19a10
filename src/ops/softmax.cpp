// softmax and log_softmax along one dim, numerically stable: the max along the dim is subtracted
// before exp, so large logits never overflow. Any dim and any layout (non-contiguous inputs are
// made contiguous first); float16/bfloat16 compute in float32.
#include <cmath>
#include <limits>
#include <memory>

#include "loom/derivatives.h"
#include "op_call.h"
#include "reduce_engine.h"

namespace loom {
namespace {

using reduce::load;

template <class T>
using compute_t = decltype(load(T{}));

template <class V>
inline V exp_of(V v) {
  if constexpr (std::is_same_v<V, float>) {
    return reduce::exp_f32(v);
  } else {
    return std::exp(v);
  }
}

template <class V>
inline V nan_max(V a, V x) {
  return (x > a || x != x) ? x : a;
}

// Max of a contiguous row, NaN if the row holds one.
template <class T>
compute_t<T> row_max(const T* x, int64_t n) {
  using V = compute_t<T>;
  constexpr int kLanes = 16;
  V lanes[kLanes];
  for (auto& l : lanes) l = -std::numeric_limits<V>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) lanes[j] = nan_max(lanes[j], load(x[i + j]));
  }
  for (int j = 0; i + j < n; ++j) lanes[j] = nan_max(lanes[j], load(x[i + j]));
  V m = lanes[0];
  for (int j = 1; j < kLanes; ++j) m = nan_max(m, lanes[j]);
  return m;
}

// Sum of exp(x - m) over a contiguous row; if `e` is given the exps are also written there. Each
// block of 256 is exponentiated into a buffer (an element-wise loop, which vectorises) and summed
// in float lanes; blocks are added in double.
template <class T, class E>
double row_sum_exp(const T* x, int64_t n, compute_t<T> m, E* e) {
  using V = compute_t<T>;
  constexpr int64_t kBlock = 256;
  constexpr int kLanes = 16;
  V buf[kBlock];
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t len = std::min(kBlock, n - b0);
    V* __restrict dst = buf;
    if constexpr (!std::is_same_v<E, void>) dst = e + b0;
    const T* __restrict src = x + b0;
    for (int64_t i = 0; i < len; ++i) dst[i] = exp_of<V>(load(src[i]) - m);
    V lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
      LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) lanes[j] += dst[i + j];
    }
    for (int j = 0; i + j < len; ++j) lanes[j] += dst[i + j];
    for (int j = 0; j < kLanes; ++j) total += static_cast<double>(lanes[j]);
  }
  return total;
}

template <class T, bool kLog>
void softmax_row(const T* x, T* y, int64_t n) {
  using V = compute_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    // The hand-vectorised kernels of the reduction engine.
    const float m = reduce::max_contig_f32(x, n);
    if constexpr (kLog) {
      const float log_sum = static_cast<float>(std::log(reduce::sum_exp_f32(x, n, m, nullptr)));
      for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
    } else {
      const float inv = static_cast<float>(1.0 / reduce::sum_exp_f32(x, n, m, y));
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    }
    return;
  }
  const V m = row_max(x, n);
  if constexpr (kLog) {
    // (x - m) - log(s), not x - (m + log(s)): the latter rounds at the scale of m.
    const V log_sum = static_cast<V>(std::log(row_sum_exp<T, void>(x, n, m, nullptr)));
    for (int64_t i = 0; i < n; ++i) y[i] = convert<T>((load(x[i]) - m) - log_sum);
  } else if constexpr (std::is_same_v<T, V>) {
    // The exps go straight into the output, which is then scaled.
    const V inv = static_cast<V>(1.0 / row_sum_exp<T, V>(x, n, m, y));
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  } else {
    const V inv = static_cast<V>(1.0 / row_sum_exp<T, void>(x, n, m, nullptr));
    for (int64_t i = 0; i < n; ++i) y[i] = convert<T>(exp_of<V>(load(x[i]) - m) * inv);
  }
}

// Softmax over dim 0 of a contiguous [d, inner] block, for the columns [b0, b0 + w): the max, the
// sum and the result each take one pass down the rows, vectorised across the columns. Rows are read
// as long contiguous segments (narrow column tiles would defeat the hardware prefetcher).
template <class T, bool kLog>
void softmax_columns(const T* x, T* y, int64_t d, int64_t inner, int64_t b0, int64_t w) {
  using V = compute_t<T>;
  std::unique_ptr<V[]> buf(new V[static_cast<size_t>(2 * w)]);
  V* __restrict m = buf.get();
  V* __restrict s = m + w;
  for (int64_t b = 0; b < w; ++b) {
    m[b] = -std::numeric_limits<V>::infinity();
    s[b] = 0;
  }
  for (int64_t k = 0; k < d; ++k) {
    const T* __restrict row = x + k * inner + b0;
    for (int64_t b = 0; b < w; ++b) m[b] = nan_max(m[b], load(row[b]));
  }
  // softmax keeps the exps in the output (when it has the compute type) and rescales them below.
  constexpr bool kKeepExps = !kLog && std::is_same_v<T, V>;
  for (int64_t k = 0; k < d; ++k) {
    const T* __restrict row = x + k * inner + b0;
    if constexpr (kKeepExps) {
      T* __restrict out = y + k * inner + b0;
      for (int64_t b = 0; b < w; ++b) {
        out[b] = exp_of<V>(row[b] - m[b]);
        s[b] += out[b];
      }
    } else {
      for (int64_t b = 0; b < w; ++b) s[b] += exp_of<V>(load(row[b]) - m[b]);
    }
  }
  for (int64_t b = 0; b < w; ++b) {
    if constexpr (kLog) {
      s[b] = std::log(s[b]);
    } else {
      s[b] = V(1) / s[b];
    }
  }
  for (int64_t k = 0; k < d; ++k) {
    const T* __restrict row = x + k * inner + b0;
    T* __restrict out = y + k * inner + b0;
    for (int64_t b = 0; b < w; ++b) {
      if constexpr (kLog) {
        out[b] = convert<T>((load(row[b]) - m[b]) - s[b]);
      } else if constexpr (kKeepExps) {
        out[b] *= s[b];
      } else {
        out[b] = convert<T>(exp_of<V>(load(row[b]) - m[b]) * s[b]);
      }
    }
  }
}

template <class T, bool kLog>
void softmax_cpu(const Tensor& in, const Tensor& out, int64_t dim) {
  const IntArrayRef sizes = in.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= sizes[static_cast<size_t>(i)];
  for (int64_t i = dim + 1; i < in.dim(); ++i) inner *= sizes[static_cast<size_t>(i)];
  const int64_t d = in.dim() == 0 ? 1 : sizes[static_cast<size_t>(dim)];
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / d), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) softmax_row<T, kLog>(x + o * d, y + o * d, d);
    });
    return;
  }
  // Column tiles: wide (see softmax_columns), but enough of them to share out. Each column's result
  // does not depend on the tiling, so it may follow the thread count.
  const int64_t per_thread = (inner + 2 * get_num_threads() - 1) / (2 * get_num_threads());
  const int64_t kTile = std::clamp<int64_t>((per_thread + 15) / 16 * 16, 64, 4096);
  const int64_t tiles = (inner + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / (d * std::min(inner, kTile)));
  parallel_for(0, outer * tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / tiles, b0 = (t % tiles) * kTile;
      softmax_columns<T, kLog>(x + o * d * inner, y + o * d * inner, d, inner, b0,
                               std::min(kTile, inner - b0));
    }
  });
}

template <bool kLog>
Tensor softmax_kernel(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  check_defined(self, op, "self");
  const int64_t d = wrap_dim(dim, self.dim(), op);
  Tensor in = dtype && *dtype != self.dtype() ? self.to(*dtype) : self;
  LOOM_CHECK_TYPE(is_floating(in.dtype()), "[", op, "] expected a floating point input but got ",
                  in.dtype(), " (pass dtype= to compute in a floating type)");
  Tensor out = empty_tensor(in.sizes(), in.dtype(), in.device());
  if (in.is_meta() || in.numel() == 0) return out;
  Tensor x = in.contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), op, [&] { softmax_cpu<scalar_t, kLog>(x, out, d); });
  return out;
}

// ---- backward ----
// With y the forward's output and g = grad_output, each along dim:
//   softmax:     grad_input = y * (g - sum(g * y))
//   log_softmax: grad_input = g - exp(y) * sum(g)

template <class V, bool kLog>
inline V backward_term(V g, V y) {
  if constexpr (kLog) {
    return g;
  } else {
    return g * y;
  }
}
template <class V, bool kLog>
inline V backward_value(V g, V y, V s) {
  if constexpr (kLog) {
    return g - exp_of<V>(y) * s;
  } else {
    return y * (g - s);
  }
}

// One contiguous row: the sum in float lanes added in double (as row_sum_exp), then one pass.
template <class T, bool kLog>
void softmax_backward_row(const T* g, const T* y, T* out, int64_t n) {
  using V = compute_t<T>;
  constexpr int kLanes = 16;
  V lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) {
      lanes[j] += backward_term<V, kLog>(load(g[i + j]), load(y[i + j]));
    }
  }
  for (int j = 0; i + j < n; ++j)
    lanes[j] += backward_term<V, kLog>(load(g[i + j]), load(y[i + j]));
  double total = 0;
  for (int j = 0; j < kLanes; ++j) total += static_cast<double>(lanes[j]);
  const V s = static_cast<V>(total);
  for (i = 0; i < n; ++i) out[i] = convert<T>(backward_value<V, kLog>(load(g[i]), load(y[i]), s));
}

// Columns [b0, b0 + w) of a contiguous [d, inner] block: one pass down the rows for the sums, one
// for the result, vectorised across the columns (as softmax_columns).
template <class T, bool kLog>
void softmax_backward_columns(const T* g, const T* y, T* out, int64_t d, int64_t inner, int64_t b0,
                              int64_t w) {
  using V = compute_t<T>;
  std::unique_ptr<V[]> buf(new V[static_cast<size_t>(w)]());
  V* __restrict s = buf.get();
  for (int64_t k = 0; k < d; ++k) {
    const T* __restrict gr = g + k * inner + b0;
    const T* __restrict yr = y + k * inner + b0;
    for (int64_t b = 0; b < w; ++b) s[b] += backward_term<V, kLog>(load(gr[b]), load(yr[b]));
  }
  for (int64_t k = 0; k < d; ++k) {
    const T* __restrict gr = g + k * inner + b0;
    const T* __restrict yr = y + k * inner + b0;
    T* __restrict o = out + k * inner + b0;
    for (int64_t b = 0; b < w; ++b)
      o[b] = convert<T>(backward_value<V, kLog>(load(gr[b]), load(yr[b]), s[b]));
  }
}

template <class T, bool kLog>
void softmax_backward_cpu(const Tensor& grad, const Tensor& output, const Tensor& result,
                          int64_t dim) {
  const IntArrayRef sizes = output.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= sizes[static_cast<size_t>(i)];
  for (int64_t i = dim + 1; i < output.dim(); ++i) inner *= sizes[static_cast<size_t>(i)];
  const int64_t d = output.dim() == 0 ? 1 : sizes[static_cast<size_t>(dim)];
  const T* g = static_cast<const T*>(grad.data_ptr());
  const T* y = static_cast<const T*>(output.data_ptr());
  T* out = static_cast<T*>(result.data_ptr());
  if (inner == 1) {  // the fast path: dim is the last (contiguous) dim
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / d), [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        softmax_backward_row<T, kLog>(g + o * d, y + o * d, out + o * d, d);
      }
    });
    return;
  }
  constexpr int64_t kTile = 256;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / (d * std::min(inner, kTile)));
  parallel_for(0, outer * tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / tiles, b0 = (t % tiles) * kTile, off = o * d * inner;
      softmax_backward_columns<T, kLog>(g + off, y + off, out + off, d, inner, b0,
                                        std::min(kTile, inner - b0));
    }
  });
}

template <bool kLog>
Tensor softmax_backward_kernel(const Tensor& grad_output, const Tensor& output, int64_t dim,
                               DType input_dtype) {
  const char* op = kLog ? "_log_softmax_backward_data" : "_softmax_backward_data";
  check_defined(grad_output, op, "grad_output");
  check_defined(output, op, "output");
  const int64_t d = wrap_dim(dim, output.dim(), op);
  LOOM_CHECK(grad_output.sizes() == output.sizes(), "[", op, "] expected grad_output of shape ",
             output.sizes(), " (the shape of output) but got ", grad_output.sizes());
  const DType dt = output.dtype();
  LOOM_CHECK_TYPE(is_floating(dt) && grad_output.dtype() == dt, "[", op,
                  "] expected grad_output and output of one floating dtype but got ",
                  grad_output.dtype(), " and ", dt);
  LOOM_CHECK_TYPE(is_floating(input_dtype), "[", op, "] expected a floating input_dtype but got ",
                  input_dtype);
  LOOM_CHECK(grad_output.device() == output.device(), "[", op, "] expected grad_output on ",
             output.device(), " (like output) but it is on ", grad_output.device());
  if (output.is_meta()) return empty_tensor(output.sizes(), input_dtype, output.device());
  Tensor result = empty_tensor(output.sizes(), dt, output.device());
  if (result.numel() > 0) {
    const Tensor g = grad_output.contiguous(), y = output.contiguous();
    LOOM_DISPATCH_FLOAT_TYPES(dt, op,
                              [&] { softmax_backward_cpu<scalar_t, kLog>(g, y, result, d); });
  }
  return input_dtype == dt ? result : result.to(input_dtype);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def(
      "_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) "
      "-> Tensor");
  m.def(
      "_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, "
      "ScalarType input_dtype) -> Tensor");
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {
    m.impl("softmax", k, softmax_kernel<false>);
    m.impl("log_softmax", k, softmax_kernel<true>);
    m.impl("_softmax_backward_data", k, softmax_backward_kernel<false>);
    m.impl("_log_softmax_backward_data", k, softmax_backward_kernel<true>);
  }
}

using SoftmaxSig = Tensor(const Tensor&, int64_t, std::optional<DType>);

Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  LOOM_CALL_OP("loom::softmax", SoftmaxSig, self, dim, dtype);
}
Tensor log_softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  LOOM_CALL_OP("loom::log_softmax", SoftmaxSig, self, dim, dtype);
}

using SoftmaxBackwardSig = Tensor(const Tensor&, const Tensor&, int64_t, DType);

Tensor _softmax_backward_data(const Tensor& grad_output, const Tensor& output, int64_t dim,
                              DType input_dtype) {
  LOOM_CALL_OP("loom::_softmax_backward_data", SoftmaxBackwardSig, grad_output, output, dim,
               input_dtype);
}
Tensor _log_softmax_backward_data(const Tensor& grad_output, const Tensor& output, int64_t dim,
                                  DType input_dtype) {
  LOOM_CALL_OP("loom::_log_softmax_backward_data", SoftmaxBackwardSig, grad_output, output, dim,
               input_dtype);
}

// ---- derivatives ----
// With y the forward's output, g its gradient and sums along dim (kept):
//   softmax:     y (g - sum(g y))
//   log_softmax: g - exp(y) sum(g)
// The fused _backward_data kernels serve without create_graph (Note [Fused backward kernels],
// unary.cpp); with it, the same formulas are written with differentiable operators.

namespace {
using autograd::BackwardContext;
using autograd::GradList;

Tensor sum_along(const Tensor& t, int64_t dim) { return sum(t, IntArrayRef{dim}, /*keepdim=*/true); }
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("softmax", autograd::saves({}, {0}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    if (!c.needs(0) || !g.defined()) return {Tensor()};
    const Tensor y = c.output(0);
    const int64_t dim = c.int_arg(1);
    if (!c.create_graph()) return {_softmax_backward_data(g, y, dim, c.input_dtype(0))};
    return {mul(y, sub(g, sum_along(mul(g, y), dim)))};
  });
  m.def("log_softmax", autograd::saves({}, {0}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    if (!c.needs(0) || !g.defined()) return {Tensor()};
    const Tensor y = c.output(0);
    const int64_t dim = c.int_arg(1);
    if (!c.create_graph()) return {_log_softmax_backward_data(g, y, dim, c.input_dtype(0))};
    return {sub(g, mul(exp(y), sum_along(g, dim)))};
  });
  // r = y (g - sum(g y)): dr/dg is the same map applied to the incoming gg;
  // d<gg, r>/dy = gg (g - sum(g y)) - g sum(gg y).
  m.def("_softmax_backward_data", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!gg.defined()) return r;
    const Tensor g = c.input(0), y = c.input(1);
    const int64_t dim = c.int_arg(2);
    const Tensor gg_y = sum_along(mul(gg, y), dim);
    if (c.needs(0)) r[0] = mul(y, sub(gg, gg_y));
    if (c.needs(1)) r[1] = sub(mul(gg, sub(g, sum_along(mul(g, y), dim))), mul(g, gg_y));
    return r;
  });
  // r = g - exp(y) sum(g): d<gg, r>/dg = gg - sum(gg exp(y)); d<gg, r>/dy = -gg exp(y) sum(g).
  m.def("_log_softmax_backward_data", autograd::saves({0, 1}),
        [](const BackwardContext& c) -> GradList {
          const Tensor& gg = c.grad(0);
          GradList r(2);
          if (!gg.defined()) return r;
          const Tensor ey = exp(c.input(1));
          const int64_t dim = c.int_arg(2);
          if (c.needs(0)) r[0] = sub(gg, sum_along(mul(gg, ey), dim));
          if (c.needs(1)) r[1] = neg(mul(mul(gg, ey), sum_along(c.input(0), dim)));
          return r;
        });
}

}  // namespace loom
