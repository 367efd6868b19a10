// 2-D pooling: max_pool2d_with_indices and avg_pool2d are CPU and Meta kernels (direct loops, one
// (n, c) plane per task on loom's pool); max_pool2d is CompositeImplicit over
// max_pool2d_with_indices, so autograd needs one formula. Output sizes, padding limits and
// ceil_mode follow PyTorch exactly (a last window that would start in the right padding is
// dropped).
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "grad_utils.h"
#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "op_call.h"

namespace loom {
namespace {

struct PoolGeometry {
  int64_t N, C, H, W;  // N = 1 for an unbatched (C, H, W) input
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t Ho, Wo;
  bool batched;
};

std::array<int64_t, 2> pair_arg(const char* op, const char* name, IntArrayRef v) {
  LOOM_CHECK(v.size() == 1 || v.size() == 2, "[", op, "] expected ", name,
             " to have 1 or 2 values but got ", v);
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// PyTorch's pooling_output_shape.
int64_t pool_output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                         bool ceil_mode) {
  int64_t out =
      floor_div(in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry check_pool2d(const char* op, const Tensor& self, IntArrayRef kernel_size,
                          IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                          bool ceil_mode) {
  check_defined(self, op, "self");
  PoolGeometry g{};
  const auto [kh, kw] = pair_arg(op, "kernel_size", kernel_size);
  const auto [sh, sw] =
      stride.empty() ? std::array<int64_t, 2>{kh, kw} : pair_arg(op, "stride", stride);
  const auto [ph, pw] = pair_arg(op, "padding", padding);
  const auto [dh, dw] = pair_arg(op, "dilation", dilation);
  LOOM_CHECK(kh > 0 && kw > 0, "[", op, "] kernel_size must be greater than zero, but got ",
             kernel_size);
  LOOM_CHECK(sh > 0 && sw > 0, "[", op, "] stride must be greater than zero, but got ", stride);
  LOOM_CHECK(dh > 0 && dw > 0, "[", op, "] dilation must be greater than zero, but got ", dilation);
  LOOM_CHECK(ph >= 0 && pw >= 0, "[", op, "] padding must be non-negative, but got ", padding);
  LOOM_CHECK(ph <= (dh * (kh - 1) + 1) / 2 && pw <= (dw * (kw - 1) + 1) / 2, "[", op,
             "] pad should be at most half of the effective kernel size, but got padding ", padding,
             " for kernel_size ", kernel_size, " and dilation ", dilation);
  const int64_t nd = self.dim();
  bool ok = nd == 3 || nd == 4;
  for (int64_t d = nd == 4 ? 1 : 0; ok && d < nd; ++d) ok = self.size(d) > 0;
  LOOM_CHECK(ok, "[", op,
             "] expected a 3-D (C, H, W) or 4-D (N, C, H, W) input with non-zero C, H "
             "and W (N may be 0), but got shape ",
             self.sizes());
  LOOM_CHECK_TYPE(self.dtype() != kBool, "[", op, "] is not implemented for bool tensors");
  g.batched = nd == 4;
  g.N = g.batched ? self.size(0) : 1;
  g.C = self.size(-3);
  g.H = self.size(-2);
  g.W = self.size(-1);
  g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw;
  g.Ho = pool_output_size(g.H, kh, ph, sh, dh, ceil_mode);
  g.Wo = pool_output_size(g.W, kw, pw, sw, dw, ceil_mode);
  LOOM_CHECK(g.Ho >= 1 && g.Wo >= 1, "[", op, "] given input of shape ", self.sizes(),
             ", the calculated output size (", g.Ho, " x ", g.Wo, ") is too small (kernel_size ",
             kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ", dilation, ")");
  return g;
}

std::vector<int64_t> output_shape(const PoolGeometry& g) {
  if (g.batched) return {g.N, g.C, g.Ho, g.Wo};
  return {g.C, g.Ho, g.Wo};
}

int64_t plane_grain(const PoolGeometry& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.Ho * g.Wo * g.kh * g.kw));
}

// Note [Pooling loops, tap by tap]
// The obvious loop (for each output, scan its window) runs a few unpredictable compare-and-branch
// steps per output and was ~10x slower than memory speed. Instead, for each output row we walk
// the kernel taps (i, j) in window order and update the whole row of running results at once:
// the inner loop over output columns is a branch-free select the compiler vectorises. The scan
// order per output is unchanged (rows, then columns, strictly greater wins, a NaN always wins), so
// values and indices match PyTorch exactly, ties included. Taps that fall in the padding are
// skipped by clipping each tap's range of output columns, as im2col does in conv.cpp.

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

std::tuple<Tensor, Tensor> max_pool2d_with_indices_kernel(const Tensor& self,
                                                          IntArrayRef kernel_size,
                                                          IntArrayRef stride, IntArrayRef padding,
                                                          IntArrayRef dilation, bool ceil_mode) {
  const PoolGeometry g =
      check_pool2d("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  const std::vector<int64_t> shape = output_shape(g);
  Tensor out = empty_tensor(shape, self.dtype(), self.device());
  Tensor ind = empty_tensor(shape, kInt64, self.device());
  if (self.is_meta() || out.numel() == 0) return {out, ind};
  const Tensor x = self.contiguous();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      max_pool_cpu<T>(x.data_ptr<T>(), out.data_ptr<T>(), ind.data_ptr<int64_t>(), g);
    }
  };
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "max_pool2d", [&] { run(scalar_t{}); });
  return {out, ind};
}

// Checks grad_output (and indices) against the forward's output shape for self and the geometry.
void check_pool_grad(const char* op, const Tensor& grad_output, const Tensor& self,
                     const PoolGeometry& g) {
  check_defined(grad_output, op, "grad_output");
  const std::vector<int64_t> shape = output_shape(g);
  LOOM_CHECK(grad_output.sizes() == IntArrayRef(shape), "[", op, "] expected grad_output of shape ",
             IntArrayRef(shape), " (the pooling output for self of shape ", self.sizes(),
             ") but got ", grad_output.sizes());
  LOOM_CHECK_TYPE(is_floating(self.dtype()) && grad_output.dtype() == self.dtype(), "[", op,
                  "] expected grad_output and self of one floating dtype but got ",
                  grad_output.dtype(), " and ", self.dtype());
  LOOM_CHECK(grad_output.device() == self.device(), "[", op, "] expected grad_output on ",
             self.device(), " (like self) but it is on ", grad_output.device());
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

// Adds each output's gradient to the input element its index names (an index into the H*W plane).
Tensor max_pool2d_with_indices_backward_kernel(const Tensor& grad_output, const Tensor& self,
                                               IntArrayRef kernel_size, IntArrayRef stride,
                                               IntArrayRef padding, IntArrayRef dilation,
                                               bool ceil_mode, const Tensor& indices) {
  constexpr const char* op = "max_pool2d_with_indices_backward";
  const PoolGeometry g = check_pool2d(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  check_pool_grad(op, grad_output, self, g);
  check_defined(indices, op, "indices");
  LOOM_CHECK(indices.sizes() == grad_output.sizes(), "[", op, "] expected indices of shape ",
             grad_output.sizes(), " (like grad_output) but got ", indices.sizes());
  LOOM_CHECK_TYPE(indices.dtype() == kInt64, "[", op, "] expected int64 indices but got ",
                  indices.dtype());
  Tensor gi = empty_tensor(self.sizes(), self.dtype(), self.device());
  if (self.is_meta()) return gi;
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
  return gi;
}

Tensor max_pool2d_composite(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                            IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(
      max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode));
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

Tensor avg_pool2d_kernel(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                         IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override) {
  const int64_t one = 1;  // avg_pool2d has no dilation
  const PoolGeometry g =
      check_pool2d("avg_pool2d", self, kernel_size, stride, padding, one, ceil_mode);
  LOOM_CHECK(!divisor_override || *divisor_override != 0,
             "[avg_pool2d] divisor_override must be non-zero");
  Tensor out = empty_tensor(output_shape(g), self.dtype(), self.device());
  if (self.is_meta() || out.numel() == 0) return out;
  const Tensor x = self.contiguous();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      avg_pool_cpu<T>(x.data_ptr<T>(), out.data_ptr<T>(), g, count_include_pad, divisor_override);
    }
  };
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "avg_pool2d", [&] { run(scalar_t{}); });
  return out;
}

// Spreads each output's gradient, divided by the forward's divisor, over the input elements its
// window summed: the forward's loop (Note [Pooling loops, tap by tap]) with the data flow
// reversed, one output row's scaled gradients added to an input row per tap.
Tensor avg_pool2d_backward_kernel(const Tensor& grad_output, const Tensor& self,
                                  IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                                  bool ceil_mode, bool count_include_pad,
                                  std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool2d_backward";
  const int64_t one = 1;
  const PoolGeometry g = check_pool2d(op, self, kernel_size, stride, padding, one, ceil_mode);
  LOOM_CHECK(!divisor_override || *divisor_override != 0, "[", op,
             "] divisor_override must be non-zero");
  check_pool_grad(op, grad_output, self, g);
  Tensor gi = empty_tensor(self.sizes(), self.dtype(), self.device());
  if (self.is_meta()) return gi;
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
  return gi;
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], "
      "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)");
  m.def(
      "avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
      "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor");
  m.def(
      "max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, "
      "int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor");
  m.def(
      "avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, "
      "int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override=None) -> "
      "Tensor");
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {
    m.impl("max_pool2d_with_indices", k, max_pool2d_with_indices_kernel);
    m.impl("max_pool2d_with_indices_backward", k, max_pool2d_with_indices_backward_kernel);
    m.impl("avg_pool2d", k, avg_pool2d_kernel);
    m.impl("avg_pool2d_backward", k, avg_pool2d_backward_kernel);
  }
  m.def(
      "max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
      "int[2] dilation=1, bool ceil_mode=False) -> Tensor",
      max_pool2d_composite);
}

using PoolSig = std::tuple<Tensor, Tensor>(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef,
                                           IntArrayRef, bool);

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, IntArrayRef kernel_size,
                                                   IntArrayRef stride, IntArrayRef padding,
                                                   IntArrayRef dilation, bool ceil_mode) {
  LOOM_CALL_OP("loom::max_pool2d_with_indices", PoolSig, self, kernel_size, stride, padding,
               dilation, ceil_mode);
}
Tensor max_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  LOOM_CALL_OP("loom::max_pool2d",
               Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, IntArrayRef, bool),
               self, kernel_size, stride, padding, dilation, ceil_mode);
}
Tensor avg_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad) {
  LOOM_CALL_OP("loom::avg_pool2d",
               Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool,
                      std::optional<int64_t>),
               self, kernel_size, stride, padding, ceil_mode, count_include_pad, std::nullopt);
}

Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Tensor& self,
                                        IntArrayRef kernel_size, IntArrayRef stride,
                                        IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                        const Tensor& indices) {
  LOOM_CALL_OP("loom::max_pool2d_with_indices_backward",
               Tensor(const Tensor&, const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef,
                      IntArrayRef, bool, const Tensor&),
               grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices);
}
Tensor avg_pool2d_backward(const Tensor& grad_output, const Tensor& self, IntArrayRef kernel_size,
                           IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                           bool count_include_pad, std::optional<int64_t> divisor_override) {
  LOOM_CALL_OP("loom::avg_pool2d_backward",
               Tensor(const Tensor&, const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool,
                      bool, std::optional<int64_t>),
               grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
               divisor_override);
}

// ---- derivatives ----
// The pooling backward kernels read only the shape of self, so the derivatives save nothing of it
// (a grad_utils::shape_only stand-in is passed). Each backward kernel is linear in grad_output and
// its adjoint is the forward pooling (max: a gather at the indices), which gives its derivative.

namespace {
using autograd::BackwardContext;
using autograd::GradList;

std::optional<int64_t> optional_int(const IValue& v) {
  return v.is_none() ? std::nullopt : std::optional<int64_t>(v.to_int());
}

// avg_pool2d with divisor_override, which the C++ API does not take.
Tensor avg_pool2d_full(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                       IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                       std::optional<int64_t> divisor_override) {
  LOOM_CALL_OP("loom::avg_pool2d",
               Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool,
                      std::optional<int64_t>),
               self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("max_pool2d_with_indices", autograd::saves({}, {1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    if (!c.needs(0) || !g.defined()) return {Tensor()};
    const Tensor self = grad_utils::shape_only(c.input_sizes(0), c.input_dtype(0), g.device());
    return {max_pool2d_with_indices_backward(g, self, c.int_list_arg(1), c.int_list_arg(2),
                                             c.int_list_arg(3), c.int_list_arg(4), c.bool_arg(5),
                                             c.output(1))};
  });
  // grad_input[plane, indices[o]] += grad_output[o]: the adjoint reads gg at the indices.
  m.def("max_pool2d_with_indices_backward", autograd::saves({2}),
        [](const BackwardContext& c) -> GradList {
          const Tensor& gg = c.grad(0);
          GradList r(3);
          if (!c.needs(0) || !gg.defined()) return r;
          const Tensor indices = c.input(2);
          r[0] = gather(gg.flatten(-2), -1, indices.flatten(-2)).view(indices.sizes());
          return r;
        });
  m.def("avg_pool2d", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    if (!c.needs(0) || !g.defined()) return {Tensor()};
    const Tensor self = grad_utils::shape_only(c.input_sizes(0), c.input_dtype(0), g.device());
    return {avg_pool2d_backward(g, self, c.int_list_arg(1), c.int_list_arg(2), c.int_list_arg(3),
                                c.bool_arg(4), c.bool_arg(5), optional_int(c.arg(6)))};
  });
  m.def("avg_pool2d_backward", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& gg = c.grad(0);
    GradList r(2);
    if (!c.needs(0) || !gg.defined()) return r;
    r[0] = avg_pool2d_full(gg, c.int_list_arg(2), c.int_list_arg(3), c.int_list_arg(4),
                           c.bool_arg(5), c.bool_arg(6), optional_int(c.arg(7)));
    return r;
  });
}

}  // namespace loom
