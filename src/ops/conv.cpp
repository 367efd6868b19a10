// conv2d: im2col + OpenBLAS gemm on the CPU, shapes and dtypes only on Meta. float16/bfloat16 are
// computed in float32; integer dtypes are rejected, as in PyTorch.
#include <cblas.h>

#include <array>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "loom/parallel.h"
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

std::array<int64_t, 2> pair_arg(const char* name, IntArrayRef v) {
  LOOM_CHECK(v.size() == 1 || v.size() == 2, "[conv2d] expected ", name,
             " to have 1 or 2 values but got ", v);
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

ConvGeometry check_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                          IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                          int64_t groups) {
  check_defined(input, "conv2d", "input");
  check_defined(weight, "conv2d", "weight");
  LOOM_CHECK(weight.dim() == 4, "[conv2d] expected weight to have 4 dimensions, got ", weight.dim(),
             " (shape ", weight.sizes(), "; expected [out_channels, in_channels/groups, kH, kW])");
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4,
             "[conv2d] expected a 3-D (unbatched) or 4-D "
             "(batched) input, but got input of shape ",
             input.sizes());
  const auto [sh, sw] = pair_arg("stride", stride);
  const auto [ph, pw] = pair_arg("padding", padding);
  const auto [dh, dw] = pair_arg("dilation", dilation);
  LOOM_CHECK(sh > 0 && sw > 0, "[conv2d] stride must be positive, but got ", stride);
  LOOM_CHECK(ph >= 0 && pw >= 0, "[conv2d] padding must be non-negative, but got ", padding);
  LOOM_CHECK(dh > 0 && dw > 0, "[conv2d] dilation must be positive, but got ", dilation);
  LOOM_CHECK(groups > 0, "[conv2d] groups must be positive, but got ", groups);
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
  LOOM_CHECK(g.Cout % groups == 0, "[conv2d] weight of shape ", weight.sizes(),
             " has out_channels = ", g.Cout, ", which is not divisible by groups = ", groups);
  LOOM_CHECK(g.C == weight.size(1) * groups, "[conv2d] given groups=", groups,
             " and weight of shape ", weight.sizes(), " (in_channels/groups = ", weight.size(1),
             "), expected input of shape ", input.sizes(), " to have ", weight.size(1) * groups,
             " channels, but got ", g.C, " channels");
  LOOM_CHECK_TYPE(input.dtype() == weight.dtype(),
                  "[conv2d] expected input and weight to have the "
                  "same dtype, but got input ",
                  input.dtype(), " and weight ", weight.dtype());
  LOOM_CHECK(input.device() == weight.device(),
             "[conv2d] expected input and weight on the same "
             "device, but got input on ",
             input.device(), " and weight on ", weight.device());
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == g.Cout, "[conv2d] expected bias to be 1-D with ",
               g.Cout, " elements (out_channels of weight ", weight.sizes(), "), but got shape ",
               bias.sizes());
    LOOM_CHECK_TYPE(bias.dtype() == input.dtype(),
                    "[conv2d] expected bias to have the dtype of "
                    "input (",
                    input.dtype(), ") but got ", bias.dtype());
    LOOM_CHECK(bias.device() == input.device(), "[conv2d] expected bias on ", input.device(),
               " but it is on ", bias.device());
  }
  LOOM_CHECK_TYPE(is_floating(input.dtype()), "[conv2d] expected a floating dtype but got ",
                  input.dtype());
  const int64_t eff_kh = dh * (g.kh - 1) + 1, eff_kw = dw * (g.kw - 1) + 1;
  LOOM_CHECK(g.H + 2 * ph >= eff_kh && g.W + 2 * pw >= eff_kw,
             "[conv2d] calculated padded input size per channel: (", g.H + 2 * ph, " x ",
             g.W + 2 * pw, ") for input of shape ", input.sizes(), ". Kernel size: (", eff_kh,
             " x ", eff_kw, ") for weight of shape ", weight.sizes(), " and dilation ", dilation,
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

template <class T>
void gemm_nn(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
             T* c, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    LOOM_CHECK(v <= INT_MAX, "[conv2d] gemm dimension ", v, " exceeds what 32-bit BLAS accepts");
  }
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
                c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0,
                c, static_cast<int>(ldc));
  }
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
      gemm_nn<T>(Og, cols, Kg, w + gi * Og * Kg, Kg, columns + gi * Kg * cols, cols,
                 dst + gi * Og * cols, cols);
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
  const ConvGeometry g = check_conv2d(input, weight, bias, stride, padding, dilation, groups);
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

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor");
  m.impl("conv2d", DispatchKey::CPU, conv2d_kernel);
  m.impl("conv2d", DispatchKey::Meta, conv2d_kernel);
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  LOOM_CALL_OP("loom::conv2d",
               Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntArrayRef,
                      IntArrayRef, IntArrayRef, int64_t),
               input, weight, bias, stride, padding, dilation, groups);
}

}  // namespace loom
