// conv2d and its backward: schemas, the geometry and shape functions, the derivative. The CPU
// kernels (im2col + gemm) are in cpu/conv_kernels.cpp. float16/bfloat16 are computed in float32;
// integer dtypes are rejected, as in PyTorch.
#include <array>
#include <vector>

#include "loom/derivatives.h"
#include "op_call.h"
#include "shapes.h"
#include "structured.h"

namespace loom {
namespace {

std::array<int64_t, 2> pair_arg(const char* op, const char* name, IntArrayRef v) {
  LOOM_CHECK(v.size() == 1 || v.size() == 2, "[", op, "] expected ", name,
             " to have 1 or 2 values but got ", v);
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

}  // namespace

ConvGeometry conv2d_geometry(const char* op, TensorMetaRef input, TensorMetaRef weight,
                             const OptionalTensorMetaRef& bias, IntArrayRef stride,
                             IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  LOOM_CHECK(weight.dim() == 4, "[", op, "] expected weight to have 4 dimensions, got ",
             weight.dim(), " (shape ", weight.sizes,
             "; expected [out_channels, in_channels/groups, kH, kW])");
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "[", op,
             "] expected a 3-D (unbatched) or 4-D "
             "(batched) input, but got input of shape ",
             input.sizes);
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
  LOOM_CHECK(g.Cout % groups == 0, "[", op, "] weight of shape ", weight.sizes,
             " has out_channels = ", g.Cout, ", which is not divisible by groups = ", groups);
  LOOM_CHECK(g.C == weight.size(1) * groups, "[", op, "] given groups=", groups,
             " and weight of shape ", weight.sizes, " (in_channels/groups = ", weight.size(1),
             "), expected input of shape ", input.sizes, " to have ", weight.size(1) * groups,
             " channels, but got ", g.C, " channels");
  LOOM_CHECK_TYPE(input.dtype == weight.dtype, "[", op,
                  "] expected input and weight to have the "
                  "same dtype, but got input ",
                  input.dtype, " and weight ", weight.dtype);
  LOOM_CHECK(input.device == weight.device, "[", op,
             "] expected input and weight on the same "
             "device, but got input on ",
             input.device, " and weight on ", weight.device);
  if (bias.has_value()) {
    LOOM_CHECK(bias->dim() == 1 && bias->size(0) == g.Cout, "[", op,
               "] expected bias to be 1-D with ", g.Cout, " elements (out_channels of weight ",
               weight.sizes, "), but got shape ", bias->sizes);
    LOOM_CHECK_TYPE(bias->dtype == input.dtype, "[", op,
                    "] expected bias to have the dtype of "
                    "input (",
                    input.dtype, ") but got ", bias->dtype);
    LOOM_CHECK(bias->device == input.device, "[", op, "] expected bias on ", input.device,
               " but it is on ", bias->device);
  }
  LOOM_CHECK_TYPE(is_floating(input.dtype), "[", op, "] expected a floating dtype but got ",
                  input.dtype);
  const int64_t eff_kh = dh * (g.kh - 1) + 1, eff_kw = dw * (g.kw - 1) + 1;
  LOOM_CHECK(g.H + 2 * ph >= eff_kh && g.W + 2 * pw >= eff_kw, "[", op,
             "] calculated padded input size per channel: (", g.H + 2 * ph, " x ", g.W + 2 * pw,
             ") for input of shape ", input.sizes, ". Kernel size: (", eff_kh, " x ", eff_kw,
             ") for weight of shape ", weight.sizes, " and dilation ", dilation,
             ". Kernel size can't be greater than actual input size");
  g.Ho = (g.H + 2 * ph - eff_kh) / sh + 1;
  g.Wo = (g.W + 2 * pw - eff_kw) / sw + 1;
  return g;
}

TensorMeta conv2d_shape(TensorMetaRef input, TensorMetaRef weight,
                        const OptionalTensorMetaRef& bias, IntArrayRef stride, IntArrayRef padding,
                        IntArrayRef dilation, int64_t groups) {
  const ConvGeometry g =
      conv2d_geometry("conv2d", input, weight, bias, stride, padding, dilation, groups);
  std::vector<int64_t> out_shape = {g.Cout, g.Ho, g.Wo};
  if (g.batched) out_shape.insert(out_shape.begin(), g.N);
  return TensorMeta(out_shape, input.dtype);
}

std::array<TensorMeta, 3> convolution_backward_shape(TensorMetaRef grad_output, TensorMetaRef input,
                                                     TensorMetaRef weight, IntArrayRef stride,
                                                     IntArrayRef padding, IntArrayRef dilation,
                                                     int64_t groups, bool input_mask,
                                                     bool weight_mask, bool bias_mask) {
  constexpr const char* op = "convolution_backward";
  const ConvGeometry g =
      conv2d_geometry(op, input, weight, std::nullopt, stride, padding, dilation, groups);
  std::vector<int64_t> out_shape = {g.Cout, g.Ho, g.Wo};
  if (g.batched) out_shape.insert(out_shape.begin(), g.N);
  LOOM_CHECK(grad_output.sizes == IntArrayRef(out_shape), "[", op,
             "] expected grad_output of shape ", IntArrayRef(out_shape),
             " (the conv2d output for input ", input.sizes, " and weight ", weight.sizes,
             ") but got ", grad_output.sizes);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(grad_output.dtype == dt, "[", op, "] expected grad_output of dtype ", dt,
                  " (like input) but got ", grad_output.dtype);
  LOOM_CHECK(grad_output.device == input.device, "[", op, "] expected grad_output on ",
             input.device, " (like input) but it is on ", grad_output.device);
  const int64_t cout = g.Cout;
  return {input_mask ? TensorMeta(input.sizes, dt) : undefined_meta(),
          weight_mask ? TensorMeta(weight.sizes, dt) : undefined_meta(),
          bias_mask ? TensorMeta(IntArrayRef(cout), dt) : undefined_meta()};
}

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
      "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor");
  m.def(
      "convolution_backward(Tensor grad_output, Tensor input, Tensor weight, int[] stride, "
      "int[] padding, int[] dilation, int groups, bool grad_input_mask, bool grad_weight_mask, "
      "bool grad_bias_mask) -> (Tensor, Tensor, Tensor)");
  MetaKernel<&conv2d_shape>::register_meta(m, "conv2d");
  MetaKernel<&convolution_backward_shape>::register_meta(m, "convolution_backward");
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
    auto [gi, gw, gb] =
        convolution_backward(g, c.input(0), c.input(1), c.int_list_arg(3), c.int_list_arg(4),
                             c.int_list_arg(5), c.int_arg(6), {c.needs(0), c.needs(1), c.needs(2)});
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
  m.def("convolution_backward", autograd::saves({0, 1, 2}),
        [](const BackwardContext& c) -> GradList {
          const Tensor &ggi = c.grad(0), &ggw = c.grad(1), &ggb = c.grad(2);
          const IntArrayRef stride = c.int_list_arg(3), padding = c.int_list_arg(4),
                            dilation = c.int_list_arg(5);
          const int64_t groups = c.int_arg(6);
          const Tensor g = c.input(0), x = c.input(1), w = c.input(2);
          GradList r(3);
          if (c.needs(0)) {
            if (ggi.defined())
              r[0] = conv2d(ggi, w, std::nullopt, stride, padding, dilation, groups);
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
