// CPU kernels of conv2d and its backward: im2col + gemm on OpenBLAS (Note [conv2d as im2col +
// gemm]), into outputs the shape functions sized; the geometry comes from conv2d_geometry.
#include <cblas.h>

#include <array>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "loom/parallel.h"
#include "ops/blas.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

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

void conv2d_loop(const Tensor& out, const Tensor& input, const Tensor& weight,
                 const std::optional<Tensor>& bias_opt, IntArrayRef stride, IntArrayRef padding,
                 IntArrayRef dilation, int64_t groups) {
  const Tensor bias = bias_opt.has_value() ? *bias_opt : Tensor();
  const ConvGeometry g =
      conv2d_geometry("conv2d", input, weight, bias_opt, stride, padding, dilation, groups);
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) {  // computed in float32, then rounded
    std::optional<Tensor> bias_f;
    if (bias.defined()) bias_f = bias.to(kFloat32);
    const Tensor out_f = empty_tensor(out.sizes(), kFloat32, kCPU);
    conv2d_loop(out_f, input.to(kFloat32), weight.to(kFloat32), bias_f, stride, padding, dilation,
                groups);
    out.copy_(out_f);
    return;
  }
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

void convolution_backward_loop(const std::array<Tensor, 3>& grads, const Tensor& grad_output,
                               const Tensor& input, const Tensor& weight, IntArrayRef stride,
                               IntArrayRef padding, IntArrayRef dilation, int64_t groups,
                               bool input_mask, bool weight_mask, bool bias_mask) {
  constexpr const char* op = "convolution_backward";
  if (!(input_mask || weight_mask || bias_mask)) return;
  const ConvGeometry g =
      conv2d_geometry(op, input, weight, std::nullopt, stride, padding, dilation, groups);
  const DType dt = input.dtype();
  const Tensor &gi = grads[0], &gw = grads[1], &gb = grads[2];
  if (is_reduced_float(dt)) {  // computed in float32, then rounded
    std::array<Tensor, 3> grads_f;
    for (size_t i = 0; i < 3; ++i) {
      if (grads[i].defined()) grads_f[i] = empty_tensor(grads[i].sizes(), kFloat32, kCPU);
    }
    convolution_backward_loop(grads_f, grad_output.to(kFloat32), input.to(kFloat32),
                              weight.to(kFloat32), stride, padding, dilation, groups, input_mask,
                              weight_mask, bias_mask);
    for (size_t i = 0; i < 3; ++i) {
      if (grads[i].defined()) grads[i].copy_(grads_f[i]);
    }
    return;
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
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&conv2d_shape, &conv2d_loop>::register_cpu(m, "conv2d");
  Structured<&convolution_backward_shape, &convolution_backward_loop>::register_cpu(
      m, "convolution_backward");
}

}  // namespace loom
