// CPU kernels of softmax and log_softmax along one dim, numerically stable: the max along the dim
// is subtracted before exp, so large logits never overflow. Any dim and any layout (non-contiguous
// inputs are made contiguous first); float16/bfloat16 compute in float32.
#include <cmath>
#include <limits>
#include <memory>

#include "ops/op_call.h"
#include "ops/reduce_engine.h"
#include "ops/shapes.h"
#include "ops/structured.h"

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
void softmax_loop(const Tensor& out, const Tensor& self, int64_t dim, std::optional<DType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, self.dim(), op);
  const Tensor x = (dtype && *dtype != self.dtype() ? self.to(*dtype) : self).contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), op, [&] { softmax_cpu<scalar_t, kLog>(x, out, d); });
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
void softmax_backward_loop(const Tensor& out, const Tensor& grad_output, const Tensor& output,
                           int64_t dim, DType input_dtype) {
  const char* op = kLog ? "_log_softmax_backward_data" : "_softmax_backward_data";
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, output.dim(), op);
  const DType dt = output.dtype();
  // Computed in output's dtype, then cast to the forward input's.
  const Tensor result = input_dtype == dt ? out : empty_tensor(output.sizes(), dt, kCPU);
  const Tensor g = grad_output.contiguous(), y = output.contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(dt, op, [&] { softmax_backward_cpu<scalar_t, kLog>(g, y, result, d); });
  if (result.impl() != out.impl()) out.copy_(result);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&softmax_shape<false>, &softmax_loop<false>>::register_cpu(m, "softmax");
  Structured<&softmax_shape<true>, &softmax_loop<true>>::register_cpu(m, "log_softmax");
  Structured<&softmax_backward_shape<false>, &softmax_backward_loop<false>>::register_cpu(
      m, "_softmax_backward_data");
  Structured<&softmax_backward_shape<true>, &softmax_backward_loop<true>>::register_cpu(
      m, "_log_softmax_backward_data");
}

}  // namespace loom
