// CPU kernels of 2-D pooling: direct loops, one (n, c) plane per task on loom's pool, into outputs
// the shape functions sized (the geometry comes from pool2d_geometry).
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/parallel.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

// Note [Pooling loops, tap by tap]
// The obvious loop (for each output, scan its window) runs a few unpredictable compare-and-branch
// steps per output and was ~10x slower than memory speed. Instead, for each output row we walk
// the kernel taps (i, j) in window order and update the whole row of running results at once:
// the inner loop over output columns is a branch-free select the compiler vectorises. The scan
// order per output is unchanged (rows, then columns, strictly greater wins, a NaN always wins), so
// values and indices match PyTorch exactly, ties included. Taps that fall in the padding are
// skipped by clipping each tap's range of output columns, as im2col does in conv_kernels.cpp.

int64_t plane_grain(const PoolGeometry& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.Ho * g.Wo * g.kh * g.kw));
}

// Output columns [lo, hi) whose input column ow*stride + off lies in [0, W).
inline void valid_columns(int64_t off, int64_t stride, int64_t W, int64_t Wo, int64_t* lo,
                          int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
  int64_t h = W - 1 - off < 0 ? 0 : (W - 1 - off) / stride + 1;
  *lo = std::min(l, Wo);
  *hi = std::max(*lo, std::min(h, Wo));
}

template <class T>
void max_pool_cpu(const T* in, T* out, int64_t* ind, const PoolGeometry& geom) {
  using M = opmath_t<T>;
  const M lowest = std::numeric_limits<M>::has_infinity ? -std::numeric_limits<M>::infinity()
                                                        : std::numeric_limits<M>::lowest();
  parallel_for(0, geom.N * geom.C, plane_grain(geom), [&](int64_t p0, int64_t p1) {
    // Locals, not the struct: stores through the int64 index pointer could alias its fields.
    const int64_t H = geom.H, W = geom.W, Ho = geom.Ho, Wo = geom.Wo, kh = geom.kh, kw = geom.kw;
    const int64_t sh = geom.sh, sw = geom.sw, ph = geom.ph, pw = geom.pw, dh = geom.dh,
                  dw = geom.dw;
    std::vector<M> best(static_cast<size_t>(Wo));
    M* __restrict b = best.data();
    for (int64_t p = p0; p < p1; ++p) {
      const T* src = in + p * H * W;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        int64_t* __restrict idx = ind + (p * Ho + oh) * Wo;
        // Start values as PyTorch's: -inf at the window's first in-bounds position.
        int64_t h0 = oh * sh - ph;
        while (h0 < 0) h0 += dh;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          int64_t w0 = ow * sw - pw;
          while (w0 < 0) w0 += dw;
          idx[ow] = h0 * W + w0;
          b[ow] = lowest;
        }
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t ih = oh * sh - ph + i * dh;
          if (ih < 0 || ih >= H) continue;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t off = j * dw - pw;
            int64_t lo, hi;
            valid_columns(off, sw, W, Wo, &lo, &hi);
            const T* __restrict row = src + ih * W + off;
            const int64_t base = ih * W + off;
            for (int64_t ow = lo; ow < hi; ++ow) {
              const M v = static_cast<M>(row[ow * sw]);
              bool take = v > b[ow];
              if constexpr (std::is_floating_point_v<M>) take = take || v != v;  // NaN wins
              b[ow] = take ? v : b[ow];
              idx[ow] = take ? base + ow * sw : idx[ow];
            }
          }
        }
        T* o = out + (p * Ho + oh) * Wo;
        for (int64_t ow = 0; ow < Wo; ++ow) o[ow] = static_cast<T>(b[ow]);
      }
    }
  });
}

void max_pool2d_with_indices_loop(const std::array<Tensor, 2>& outs, const Tensor& self,
                                  IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                                  IntArrayRef dilation, bool ceil_mode) {
  const Tensor &out = outs[0], &ind = outs[1];
  if (out.numel() == 0) return;
  const PoolGeometry g =
      pool2d_geometry("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor x = self.contiguous();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      max_pool_cpu<T>(x.data_ptr<T>(), out.data_ptr<T>(), ind.data_ptr<int64_t>(), g);
    }
  };
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "max_pool2d", [&] { run(scalar_t{}); });
}

// Runs plane_fn(p, acc) for each (n, c) plane p on the pool, with acc a zeroed H*W buffer in the
// compute type M, then writes acc into plane p of gi (T elements). For float and double, acc is
// the plane of gi itself.
template <class T, class F>
void for_each_grad_plane(const PoolGeometry& g, T* gi, const F& plane_fn) {
  using M = opmath_t<T>;
  const int64_t HW = g.H * g.W;
  parallel_for(0, g.N * g.C, plane_grain(g), [&](int64_t p0, int64_t p1) {
    std::vector<M> buf(std::is_same_v<T, M> ? 0 : static_cast<size_t>(HW));
    for (int64_t p = p0; p < p1; ++p) {
      M* acc = std::is_same_v<T, M> ? reinterpret_cast<M*>(gi + p * HW) : buf.data();
      std::fill(acc, acc + HW, M(0));
      plane_fn(p, acc);
      if constexpr (!std::is_same_v<T, M>) {
        for (int64_t i = 0; i < HW; ++i) gi[p * HW + i] = convert<T>(acc[i]);
      }
    }
  });
}

void max_pool2d_with_indices_backward_loop(const Tensor& gi, const Tensor& grad_output,
                                           const Tensor& self, IntArrayRef kernel_size,
                                           IntArrayRef stride, IntArrayRef padding,
                                           IntArrayRef dilation, bool ceil_mode,
                                           const Tensor& indices) {
  constexpr const char* op = "max_pool2d_with_indices_backward";
  const PoolGeometry g =
      pool2d_geometry(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor go = grad_output.contiguous(), ind = indices.contiguous();
  const int64_t* ip = ind.data_ptr<int64_t>();
  const int64_t HW = g.H * g.W, out_plane = g.Ho * g.Wo;
  LOOM_DISPATCH_FLOAT_TYPES(self.dtype(), op, [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* gp = go.data_ptr<scalar_t>();
    for_each_grad_plane<scalar_t>(g, gi.data_ptr<scalar_t>(), [&](int64_t p, M* acc) {
      for (int64_t o = p * out_plane; o < (p + 1) * out_plane; ++o) {
        const int64_t i = ip[o];
        LOOM_CHECK_INDEX(i >= 0 && i < HW, "[", op, "] index ", i, " is out of range for an input ",
                         "plane of ", g.H, " x ", g.W, " elements");
        acc[i] += static_cast<M>(gp[o]);
      }
    });
  });
}

// Tap by tap as max_pool_cpu (Note [Pooling loops, tap by tap]); the divisor follows PyTorch: the
// window clipped to the padded input when count_include_pad, else to the input.
template <class T>
void avg_pool_cpu(const T* in, T* out, const PoolGeometry& geom, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  using M = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>;
  parallel_for(0, geom.N * geom.C, plane_grain(geom), [&](int64_t p0, int64_t p1) {
    const int64_t H = geom.H, W = geom.W, Ho = geom.Ho, Wo = geom.Wo, kh = geom.kh, kw = geom.kw;
    const int64_t sh = geom.sh, sw = geom.sw, ph = geom.ph, pw = geom.pw;
    std::vector<M> acc(static_cast<size_t>(Wo));
    std::vector<int64_t> col_all(static_cast<size_t>(Wo)), col_valid(static_cast<size_t>(Wo));
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const int64_t w0 = ow * sw - pw, w1 = std::min(w0 + kw, W + pw);
      col_all[static_cast<size_t>(ow)] = w1 - w0;
      col_valid[static_cast<size_t>(ow)] = std::min(w1, W) - std::max<int64_t>(w0, 0);
    }
    M* __restrict a = acc.data();
    for (int64_t p = p0; p < p1; ++p) {
      const T* src = in + p * H * W;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        std::fill(acc.begin(), acc.end(), M(0));
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t ih = oh * sh - ph + i;
          if (ih < 0 || ih >= H) continue;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t off = j - pw;
            int64_t lo, hi;
            valid_columns(off, sw, W, Wo, &lo, &hi);
            const T* __restrict row = src + ih * W + off;
            for (int64_t ow = lo; ow < hi; ++ow) a[ow] += static_cast<M>(row[ow * sw]);
          }
        }
        const int64_t h0 = oh * sh - ph, h1 = std::min(h0 + kh, H + ph);
        const int64_t rows_all = h1 - h0, rows_valid = std::min(h1, H) - std::max<int64_t>(h0, 0);
        T* o = out + (p * Ho + oh) * Wo;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t valid = rows_valid * col_valid[static_cast<size_t>(ow)];
          const int64_t divisor = divisor_override    ? *divisor_override
                                  : count_include_pad ? rows_all * col_all[static_cast<size_t>(ow)]
                                                      : valid;
          o[ow] = valid <= 0 ? T(0) : static_cast<T>(a[ow] / static_cast<M>(divisor));
        }
      }
    }
  });
}

void avg_pool2d_loop(const Tensor& out, const Tensor& self, IntArrayRef kernel_size,
                     IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                     bool count_include_pad, std::optional<int64_t> divisor_override) {
  if (out.numel() == 0) return;
  const int64_t one = 1;
  const PoolGeometry g =
      pool2d_geometry("avg_pool2d", self, kernel_size, stride, padding, one, ceil_mode);
  const Tensor x = self.contiguous();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      avg_pool_cpu<T>(x.data_ptr<T>(), out.data_ptr<T>(), g, count_include_pad, divisor_override);
    }
  };
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "avg_pool2d", [&] { run(scalar_t{}); });
}

// Spreads each output's gradient, divided by the forward's divisor, over the input elements its
// window summed: the forward's loop (Note [Pooling loops, tap by tap]) with the data flow
// reversed, one output row's scaled gradients added to an input row per tap.
void avg_pool2d_backward_loop(const Tensor& gi, const Tensor& grad_output, const Tensor& self,
                              IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                              bool ceil_mode, bool count_include_pad,
                              std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool2d_backward";
  const int64_t one = 1;
  const PoolGeometry g = pool2d_geometry(op, self, kernel_size, stride, padding, one, ceil_mode);
  const Tensor go = grad_output.contiguous();
  LOOM_DISPATCH_FLOAT_TYPES(self.dtype(), op, [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* gp = go.data_ptr<scalar_t>();
    // The divisor of each output column's window across the row (as avg_pool_cpu).
    std::vector<int64_t> col_all(static_cast<size_t>(g.Wo)), col_valid(static_cast<size_t>(g.Wo));
    for (int64_t ow = 0; ow < g.Wo; ++ow) {
      const int64_t w0 = ow * g.sw - g.pw, w1 = std::min(w0 + g.kw, g.W + g.pw);
      col_all[static_cast<size_t>(ow)] = w1 - w0;
      col_valid[static_cast<size_t>(ow)] = std::min(w1, g.W) - std::max<int64_t>(w0, 0);
    }
    for_each_grad_plane<scalar_t>(g, gi.data_ptr<scalar_t>(), [&](int64_t p, M* acc) {
      std::vector<M> scaled(static_cast<size_t>(g.Wo));
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t h0 = oh * g.sh - g.ph, h1 = std::min(h0 + g.kh, g.H + g.ph);
        const int64_t rows_all = h1 - h0, rows_valid = std::min(h1, g.H) - std::max<int64_t>(h0, 0);
        const scalar_t* grow = gp + (p * g.Ho + oh) * g.Wo;
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const auto o = static_cast<size_t>(ow);
          const int64_t valid = rows_valid * col_valid[o];
          const int64_t divisor = divisor_override    ? *divisor_override
                                  : count_include_pad ? rows_all * col_all[o]
                                                      : valid;
          scaled[o] = valid <= 0 ? M(0) : static_cast<M>(grow[ow]) / static_cast<M>(divisor);
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = h0 + i;
          if (ih < 0 || ih >= g.H) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t off = j - g.pw;
            int64_t lo, hi;
            valid_columns(off, g.sw, g.W, g.Wo, &lo, &hi);
            M* __restrict row = acc + ih * g.W + off;
            const M* __restrict sc = scaled.data();
            for (int64_t ow = lo; ow < hi; ++ow) row[ow * g.sw] += sc[ow];
          }
        }
      }
    });
  });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&max_pool2d_with_indices_shape, &max_pool2d_with_indices_loop>::register_cpu(
      m, "max_pool2d_with_indices");
  Structured<&max_pool2d_with_indices_backward_shape, &max_pool2d_with_indices_backward_loop>::
      register_cpu(m, "max_pool2d_with_indices_backward");
  Structured<&avg_pool2d_shape, &avg_pool2d_loop>::register_cpu(m, "avg_pool2d");
  Structured<&avg_pool2d_backward_shape, &avg_pool2d_backward_loop>::register_cpu(
      m, "avg_pool2d_backward");
}

}  // namespace loom
