// conv2d: im2col + OpenBLAS gemm on the CPU, shapes and dtypes only on Meta. float16/bfloat16 are
// computed in float32; integer dtypes are rejected, as in PyTorch.
#include <cblas.h>

#include <array>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "blas.h"
#include "op_call.h"

namespace loom {
namespace {

// Note [conv2d as im2col + gemm]
// For one image, out[Cout, Ho*Wo] = weight[Cout, Cin*kh*kw] @ columns[Cin*kh*kw, Ho*Wo]: each row
// of `columns` is one input channel shifted by one kernel tap (zeros where the tap falls in the
// padding). Groups split the rows of both the weight and the columns, one gemm per group. Small
// images give thin gemms that BLAS runs poorly, so `nb` images share one gemm: their columns sit
// side by side
// ([K, nb*Ho*Wo]), the product lands in a scratch [Cout, nb*Ho*Wo] and is scattered back to NCHW
// with the bias added. With nb == 1 the gemm writes straight into the output, and a 1x1 kernel with
// stride 1 and no padding needs no columns at all (the image already is [Cin, H*W]). im2col and the
// scatter run on loom's pool; the gemms run outside it (Note [Thread pool and BLAS], parallel.cpp).

// Budget (elements; 16 MiB of float32) for each of the two scratch buffers, the columns
// [K, nb*Ho*Wo] and the gemm result [Cout, nb*Ho*Wo], which bounds how many images share one gemm.
// Few wide gemms beat many thin ones: OpenBLAS threads small gemms poorly (measured on 2 and 16
// threads, a 3x3 conv on 64 images of 14x14 and of 28x28: this budget was best or within noise).
constexpr int64_t kScratchBudget = int64_t{1} << 22;

struct ConvGeometry {
  int64_t N, C, H, W;    // input (N = 1 for an unbatched input)
  int64_t Cout, kh, kw;  // weight
  int64_t Ho, Wo;        // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool batched;
};

std::array<int64_t, 2> pair_arg(const char* op, const char* name, IntArrayRef v) {
  LOOM_CHECK(v.size() == 1 || v.size() == 2, "[", op, "] expected ", name,
             " to have 1 or 2 values but got ", v);
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

ConvGeometry check_conv2d(const char* op, const Tensor& input, const Tensor& weight,
                          const Tensor& bias, IntArrayRef stride, IntArrayRef padding,
                          IntArrayRef dilation, int64_t groups) {
  check_defined(input, op, "input");
  check_defined(weight, op, "weight");
  LOOM_CHECK(weight.dim() == 4, "[", op, "] expected weight to have 4 dimensions, got ",
             weight.dim(), " (shape ", weight.sizes(),
             "; expected [out_channels, in_channels/groups, kH, kW])");
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "[", op,
             "] expected a 3-D (unbatched) or 4-D "
             "(batched) input, but got input of shape ",
             input.sizes());
  const auto [sh, sw] = pair_arg(op, "stride", stride);
  const auto [ph, pw] = pair_arg(op, "padding", padding);
  const auto [dh, dw] = pair_arg(op, "dilation", dilation);
  LOOM_CHECK(sh > 0 && sw > 0, "[", op, "] stride must be positive, but got ", stride);
  LOOM_CHECK(ph >= 0 && pw >= 0, "[", op, "] padding must be non-negative, but got ", padding);
  LOOM_CHECK(dh > 0 && dw > 0, "[", op, "] dilation must be positive, but got ", dilation);
  LOOM_CHECK(groups > 0, "[", op, "] groups must be positive, but got ", groups);
  ConvGeometry g{};
  g.batched = input.dim() == 4;
  const int64_t o = g.batched ? 1 : 0;
  g.N = g.batched ? input.size(0) : 1;
  g.C = input.size(o);
  g.H = input.size(o + 1);
  g.W = input.size(o + 2);
  g.Cout = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw, g.groups = groups;
  LOOM_CHECK(g.Cout % groups == 0, "[", op, "] weight of shape ", weight.sizes(),
             " has out_channels = ", g.Cout, ", which is not divisible by groups = ", groups);
  LOOM_CHECK(g.C == weight.size(1) * groups, "[", op, "] given groups=", groups,
             " and weight of shape ", weight.sizes(), " (in_channels/groups = ", weight.size(1),
             "), expected input of shape ", input.sizes(), " to have ", weight.size(1) * groups,
             " channels, but got ", g.C, " channels");
  LOOM_CHECK_TYPE(input.dtype() == weight.dtype(), "[", op,
                  "] expected input and weight to have the "
                  "same dtype, but got input ",
                  input.dtype(), " and weight ", weight.dtype());
  LOOM_CHECK(input.device() == weight.device(), "[", op,
             "] expected input and weight on the same "
             "device, but got input on ",
             input.device(), " and weight on ", weight.device());
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == g.Cout, "[", op,
               "] expected bias to be 1-D with ", g.Cout, " elements (out_channels of weight ",
               weight.sizes(), "), but got shape ", bias.sizes());
    LOOM_CHECK_TYPE(bias.dtype() == input.dtype(), "[", op,
                    "] expected bias to have the dtype of "
                    "input (",
                    input.dtype(), ") but got ", bias.dtype());
    LOOM_CHECK(bias.device() == input.device(), "[", op, "] expected bias on ", input.device(),
               " but it is on ", bias.device());
  }
  LOOM_CHECK_TYPE(is_floating(input.dtype()), "[", op, "] expected a floating dtype but got ",
                  input.dtype());
  const int64_t eff_kh = dh * (g.kh - 1) + 1, eff_kw = dw * (g.kw - 1) + 1;
  LOOM_CHECK(g.H + 2 * ph >= eff_kh && g.W + 2 * pw >= eff_kw, "[", op,
             "] calculated padded input size per channel: (", g.H + 2 * ph, " x ", g.W + 2 * pw,
             ") for input of shape ", input.sizes(), ". Kernel size: (", eff_kh, " x ", eff_kw,
             ") for weight of shape ", weight.sizes(), " and dilation ", dilation,
             ". Kernel size can't be greater than actual input size");
  g.Ho = (g.H + 2 * ph - eff_kh) / sh + 1;
  g.Wo = (g.W + 2 * pw - eff_kw) / sw + 1;
  return g;
}

// Columns of images [0, nb) of `in` (contiguous [nb, C, H, W]) into col [C*kh*kw, nb*Ho*Wo].
template <class T>
void im2col(const T* in, int64_t nb, const ConvGeometry& g, T* col) {
  const int64_t HW = g.Ho * g.Wo, taps = g.kh * g.kw, row_len = nb * HW;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, HW));
  parallel_for(0, g.C * taps * nb, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t idx = r0; idx < r1; ++idx) {
      const int64_t r = idx / nb, b = idx % nb;
      const int64_t c = r / taps, ki = (r / g.kw) % g.kh, kj = r % g.kw;
      const T* src = in + (b * g.C + c) * g.H * g.W;
      T* dst = col + r * row_len + b * HW;
      // Output columns whose input column lies inside the image: iw = ow*sw + off in [0, W).
      const int64_t off = kj * g.dw - g.pw;
      int64_t ow_lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
      int64_t ow_hi = g.W - 1 - off < 0 ? 0 : (g.W - 1 - off) / g.sw + 1;
      ow_lo = std::min(ow_lo, g.Wo);
      ow_hi = std::max(ow_lo, std::min(ow_hi, g.Wo));
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* d = dst + oh * g.Wo;
        const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
        if (ih < 0 || ih >= g.H) {
          std::fill(d, d + g.Wo, T(0));
          continue;
        }
        const T* s = src + ih * g.W + off;
        std::fill(d, d + ow_lo, T(0));
        if (g.sw == 1) {
          std::memcpy(d + ow_lo, s + ow_lo, static_cast<size_t>(ow_hi - ow_lo) * sizeof(T));
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow] = s[ow * g.sw];
        }
        std::fill(d + ow_hi, d + g.Wo, T(0));
      }
    }
  });
}

// The adjoint of im2col: zeroes images [0, nb) of `out` (contiguous [nb, C, H, W]) and adds every
// entry of col [C*kh*kw, nb*Ho*Wo] to the input element im2col copied it from. One (image,
// channel) plane per task, so no two tasks write the same element.
template <class T>
void col2im(const T* col, int64_t nb, const ConvGeometry& g, T* out) {
  const int64_t HW = g.Ho * g.Wo, taps = g.kh * g.kw, row_len = nb * HW;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, taps * HW));
  parallel_for(0, nb * g.C, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / g.C, c = p % g.C;
      T* dst = out + p * g.H * g.W;
      std::fill(dst, dst + g.H * g.W, T(0));
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t ki = t / g.kw, kj = t % g.kw;
        const T* src = col + (c * taps + t) * row_len + b * HW;
        const int64_t off = kj * g.dw - g.pw;
        int64_t ow_lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        int64_t ow_hi = g.W - 1 - off < 0 ? 0 : (g.W - 1 - off) / g.sw + 1;
        ow_lo = std::min(ow_lo, g.Wo);
        ow_hi = std::max(ow_lo, std::min(ow_hi, g.Wo));
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* d = dst + ih * g.W + off;
          const T* s = src + oh * g.Wo;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow * g.sw] += s[ow];
        }
      }
    }
  });
}

// c[m, n] = op(a)[m, k] @ op(b)[k, n] + beta * c, row-major, where op transposes a stored
// operand when ta / tb is set (lda / ldb are the stored operands' row lengths).
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  blas::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

// in: contiguous [N, C, H, W]; w: contiguous [Cout, C/groups, kh, kw]; bias: Cout values or null;
// out: contiguous [N, Cout, Ho, Wo].
template <class T>
void conv2d_cpu(const T* in, const T* w, const T* bias, T* out, const ConvGeometry& g) {
  const int64_t HW = g.Ho * g.Wo, Cg = g.C / g.groups, Og = g.Cout / g.groups;
  const int64_t Kg = Cg * g.kh * g.kw, K = g.C * g.kh * g.kw;
  if (g.N == 0 || g.Cout == 0 || HW == 0) return;
  if (Kg == 0) {  // no input channels: the output is the bias
    parallel_for(0, g.N * g.Cout, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        std::fill(out + p * HW, out + (p + 1) * HW, bias ? bias[p % g.Cout] : T(0));
    });
    return;
  }
  const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  const int64_t per_image = std::max(K, g.Cout) * HW;
  const int64_t nb = std::clamp<int64_t>(kScratchBudget / per_image, 1, g.N);
  // Uninitialised scratch: im2col and gemm write every element.
  std::unique_ptr<T[]> col(direct && nb == 1 ? nullptr : new T[static_cast<size_t>(K * nb * HW)]);
  std::unique_ptr<T[]> scratch(nb > 1 ? new T[static_cast<size_t>(g.Cout * nb * HW)] : nullptr);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), cols = cnt * HW;
    const T* image = in + n0 * g.C * g.H * g.W;
    const T* columns = image;
    if (!(direct && nb == 1)) {
      im2col(image, cnt, g, col.get());
      columns = col.get();
    }
    T* dst = nb > 1 ? scratch.get() : out + n0 * g.Cout * HW;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      gemm<T>(false, false, Og, cols, Kg, w + gi * Og * Kg, Kg, columns + gi * Kg * cols, cols,
              T(0), dst + gi * Og * cols, cols);
    }
    if (nb == 1 && !bias) continue;
    // Scatter [Cout, cnt, HW] to [cnt, Cout, HW] (in place when nb == 1), adding the bias.
    const int64_t grain = std::max<int64_t>(1, 32768 / HW);
    parallel_for(0, cnt * g.Cout, grain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / g.Cout, c = p % g.Cout;
        const T* src = dst + (c * cnt + b) * HW;
        T* o = out + ((n0 + b) * g.Cout + c) * HW;
        const T add = bias ? bias[c] : T(0);
        for (int64_t j = 0; j < HW; ++j) o[j] = src[j] + add;
      }
    });
  }
}

Tensor conv2d_kernel(const Tensor& input, const Tensor& weight,
                     const std::optional<Tensor>& bias_opt, IntArrayRef stride, IntArrayRef padding,
                     IntArrayRef dilation, int64_t groups) {
  const Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
  const ConvGeometry g =
      check_conv2d("conv2d", input, weight, bias, stride, padding, dilation, groups);
  const DType dt = input.dtype();
  std::vector<int64_t> out_shape = {g.Cout, g.Ho, g.Wo};
  if (g.batched) out_shape.insert(out_shape.begin(), g.N);
  if (input.is_meta()) return empty_tensor(out_shape, dt, input.device());
  if (is_reduced_float(dt)) {
    std::optional<Tensor> bias_f;
    if (bias.defined()) bias_f = bias.to(kFloat32);
    return conv2d_kernel(input.to(kFloat32), weight.to(kFloat32), bias_f, stride, padding, dilation,
                         groups)
        .to(dt);
  }
  Tensor out = empty_tensor(out_shape, dt, input.device());
  const Tensor x = input.contiguous(), w = weight.contiguous();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    conv2d_cpu<T>(x.data_ptr<T>(), w.data_ptr<T>(), b.defined() ? b.data_ptr<T>() : nullptr,
                  out.data_ptr<T>(), g);
  };
  if (dt == kFloat32)
    run(float{});
  else
    run(double{});
  return out;
}

// Note [conv2d backward]
// The adjoints of Note [conv2d as im2col + gemm], over the same batches of nb images. With
// grad_out for a batch laid out as [Cout, nb*Ho*Wo] (gathered from NCHW when nb > 1, the forward's
// scatter in reverse), per group:
//   grad_columns[Kg rows] = weight_g^T @ grad_out_g, then col2im adds them onto grad_input;
//   grad_weight_g += grad_out_g @ columns_g^T, columns from im2col of the input as in the forward;
// and grad_bias[c] = the sum of grad_out[:, c]. One scratch buffer serves as columns and then as
// grad_columns. The gemms run outside loom's pool (Note [Thread pool and BLAS], parallel.cpp).

// gout: contiguous [N, Cout, Ho, Wo]; in, w: contiguous input and weight; gin, gw, gb: contiguous
// outputs, or null when not wanted.
template <class T>
void conv2d_backward_cpu(const T* gout, const T* in, const T* w, T* gin, T* gw, T* gb,
                         const ConvGeometry& g) {
  const int64_t HW = g.Ho * g.Wo, Cg = g.C / g.groups, Og = g.Cout / g.groups;
  const int64_t Kg = Cg * g.kh * g.kw, K = g.C * g.kh * g.kw, image = g.C * g.H * g.W;
  if (gb) {
    parallel_for(0, g.Cout, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.N * HW)),
                 [&](int64_t c0, int64_t c1) {
                   for (int64_t c = c0; c < c1; ++c) {
                     double acc = 0;
                     for (int64_t n = 0; n < g.N; ++n) {
                       const T* src = gout + (n * g.Cout + c) * HW;
                       for (int64_t j = 0; j < HW; ++j) acc += static_cast<double>(src[j]);
                     }
                     gb[c] = static_cast<T>(acc);
                   }
                 });
  }
  if (gw) std::fill(gw, gw + g.Cout * Kg, T(0));
  if (gin && (g.Cout == 0 || Kg == 0)) std::fill(gin, gin + g.N * image, T(0));
  if ((!gin && !gw) || g.N == 0 || g.Cout == 0 || Kg == 0) return;
  const bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  const int64_t nb = std::clamp<int64_t>(kScratchBudget / (std::max(K, g.Cout) * HW), 1, g.N);
  std::unique_ptr<T[]> col(direct && nb == 1 ? nullptr : new T[static_cast<size_t>(K * nb * HW)]);
  std::unique_ptr<T[]> scratch(nb > 1 ? new T[static_cast<size_t>(g.Cout * nb * HW)] : nullptr);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), cols = cnt * HW;
    const T* go = gout + n0 * g.Cout * HW;
    if (nb > 1) {  // [cnt, Cout, HW] -> [Cout, cnt, HW]
      parallel_for(0, cnt * g.Cout, std::max<int64_t>(1, 32768 / HW), [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t b = p / g.Cout, c = p % g.Cout;
          std::memcpy(scratch.get() + (c * cnt + b) * HW, go + p * HW,
                      static_cast<size_t>(HW) * sizeof(T));
        }
      });
      go = scratch.get();
    }
    if (gw) {
      const T* columns = in + n0 * image;
      if (col) {
        im2col(in + n0 * image, cnt, g, col.get());
        columns = col.get();
      }
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        gemm<T>(false, true, Og, Kg, cols, go + gi * Og * cols, cols, columns + gi * Kg * cols,
                cols, T(1), gw + gi * Og * Kg, Kg);
      }
    }
    if (gin) {
      T* dst = col ? col.get() : gin + n0 * image;
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        gemm<T>(true, false, Kg, cols, Og, w + gi * Og * Kg, Kg, go + gi * Og * cols, cols, T(0),
                dst + gi * Kg * cols, cols);
      }
      if (col) col2im(col.get(), cnt, g, gin + n0 * image);
    }
  }
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward_kernel(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, int64_t groups, bool input_mask, bool weight_mask,
    bool bias_mask) {
  constexpr const char* op = "convolution_backward";
  const ConvGeometry g =
      check_conv2d(op, input, weight, Tensor(), stride, padding, dilation, groups);
  check_defined(grad_output, op, "grad_output");
  std::vector<int64_t> out_shape = {g.Cout, g.Ho, g.Wo};
  if (g.batched) out_shape.insert(out_shape.begin(), g.N);
  LOOM_CHECK(grad_output.sizes() == IntArrayRef(out_shape), "[", op,
             "] expected grad_output of shape ", IntArrayRef(out_shape),
             " (the conv2d output for input ", input.sizes(), " and weight ", weight.sizes(),
             ") but got ", grad_output.sizes());
  const DType dt = input.dtype();
  LOOM_CHECK_TYPE(grad_output.dtype() == dt, "[", op, "] expected grad_output of dtype ", dt,
                  " (like input) but got ", grad_output.dtype());
  LOOM_CHECK(grad_output.device() == input.device(), "[", op, "] expected grad_output on ",
             input.device(), " (like input) but it is on ", grad_output.device());
  const Device dev = input.device();
  Tensor gi = input_mask ? empty_tensor(input.sizes(), dt, dev) : Tensor();
  Tensor gw = weight_mask ? empty_tensor(weight.sizes(), dt, dev) : Tensor();
  Tensor gb = bias_mask ? empty_tensor(IntArrayRef(g.Cout), dt, dev) : Tensor();
  if (input.is_meta() || !(input_mask || weight_mask || bias_mask)) return {gi, gw, gb};
  if (is_reduced_float(dt)) {
    auto [a, b, c] = convolution_backward_kernel(grad_output.to(kFloat32), input.to(kFloat32),
                                                 weight.to(kFloat32), stride, padding, dilation,
                                                 groups, input_mask, weight_mask, bias_mask);
    return {a.defined() ? a.to(dt) : a, b.defined() ? b.to(dt) : b, c.defined() ? c.to(dt) : c};
  }
  const Tensor go = grad_output.contiguous(), x = input.contiguous(), w = weight.contiguous();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; };
    conv2d_backward_cpu<T>(go.data_ptr<T>(), x.data_ptr<T>(), w.data_ptr<T>(), ptr(gi), ptr(gw),
                           ptr(gb), g);
  };
  if (dt == kFloat32)
    run(float{});
  else
    run(double{});
  return {gi, gw, gb};
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor");
  m.def(
      "convolution_backward(Tensor grad_output, Tensor input, Tensor weight, int[] stride, "
      "int[] padding, int[] dilation, int groups, bool grad_input_mask, bool grad_weight_mask, "
      "bool grad_bias_mask) -> (Tensor, Tensor, Tensor)");
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {
    m.impl("conv2d", k, conv2d_kernel);
    m.impl("convolution_backward", k, convolution_backward_kernel);
  }
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  LOOM_CALL_OP("loom::conv2d",
               Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntArrayRef,
                      IntArrayRef, IntArrayRef, int64_t),
               input, weight, bias, stride, padding, dilation, groups);
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward(const Tensor& grad_output,
                                                        const Tensor& input, const Tensor& weight,
                                                        IntArrayRef stride, IntArrayRef padding,
                                                        IntArrayRef dilation, int64_t groups,
                                                        std::array<bool, 3> output_mask) {
  using Sig =
      std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, IntArrayRef,
                                         IntArrayRef, IntArrayRef, int64_t, bool, bool, bool);
  LOOM_CALL_OP("loom::convolution_backward", Sig, grad_output, input, weight, stride, padding,
               dilation, groups, output_mask[0], output_mask[1], output_mask[2]);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

Tensor accumulate_grad(const Tensor& sum_so_far, const Tensor& term) {
  return sum_so_far.defined() ? add(sum_so_far, term) : term;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  // convolution_backward computes only the gradients that are needed, and is itself
  // differentiable, so this also serves with create_graph.
  m.def("conv2d", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(3);
    if (!g.defined() || !(c.needs(0) || c.needs(1) || c.needs(2))) return r;
    auto [gi, gw, gb] = convolution_backward(g, c.input(0), c.input(1), c.int_list_arg(3),
                                             c.int_list_arg(4), c.int_list_arg(5), c.int_arg(6),
                                             {c.needs(0), c.needs(1), c.needs(2)});
    return {gi, gw, gb};
  });
  // Note [conv2d double backward]
  // convolution_backward's results are bilinear: grad_input in (grad_output, weight), grad_weight
  // in (input, grad_output), grad_bias linear in grad_output. With ggI, ggW, ggB the gradients of
  // those results, <ggI, grad_input> = <grad_output, conv2d(ggI, weight)> and <ggW, grad_weight> =
  // <grad_output, conv2d(input, ggW)>, which gives
  //   d/d grad_output = conv2d(ggI, weight) + conv2d(input, ggW, bias=ggB)
  //   d/d input       = grad_input of conv2d(input, ggW) for grad_output
  //   d/d weight      = grad_weight of conv2d(ggI, weight) for grad_output
  // all convolutions and convolution_backward calls again.
  m.def("convolution_backward", autograd::saves({0, 1, 2}), [](const BackwardContext& c) -> GradList {
    const Tensor &ggi = c.grad(0), &ggw = c.grad(1), &ggb = c.grad(2);
    const IntArrayRef stride = c.int_list_arg(3), padding = c.int_list_arg(4),
                      dilation = c.int_list_arg(5);
    const int64_t groups = c.int_arg(6);
    const Tensor g = c.input(0), x = c.input(1), w = c.input(2);
    GradList r(3);
    if (c.needs(0)) {
      if (ggi.defined()) r[0] = conv2d(ggi, w, std::nullopt, stride, padding, dilation, groups);
      if (ggw.defined()) {
        std::optional<Tensor> bias;
        if (ggb.defined()) bias = ggb;
        r[0] = accumulate_grad(r[0], conv2d(x, ggw, bias, stride, padding, dilation, groups));
      } else if (ggb.defined()) {
        // The bias's gradient broadcast over the output: [Cout] -> [Cout, 1, 1].
        r[0] = accumulate_grad(r[0], expand(ggb.view({ggb.numel(), 1, 1}), g.sizes()));
      }
    }
    if (c.needs(1) && ggw.defined()) {
      r[1] = std::get<0>(convolution_backward(g, x, ggw, stride, padding, dilation, groups,
                                              {true, false, false}));
    }
    if (c.needs(2) && ggi.defined()) {
      r[2] = std::get<1>(convolution_backward(g, ggi, w, stride, padding, dilation, groups,
                                              {false, true, false}));
    }
    return r;
  });
}

}  // namespace loom
