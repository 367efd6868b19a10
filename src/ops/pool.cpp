// 2-D pooling: schemas, geometry and shape functions of max_pool2d_with_indices and avg_pool2d and
// their backwards (the loops are in cpu/pool_kernels.cpp); max_pool2d is CompositeImplicit over
// max_pool2d_with_indices, so autograd needs one formula. Output sizes, padding limits and
// ceil_mode follow PyTorch exactly (a last window that would start in the right padding is
// dropped).
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "grad_utils.h"
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

}  // namespace

PoolGeometry pool2d_geometry(const char* op, TensorMetaRef self, IntArrayRef kernel_size,
                             IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                             bool ceil_mode) {
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
             self.sizes);
  LOOM_CHECK_TYPE(self.dtype != kBool, "[", op, "] is not implemented for bool tensors");
  g.batched = nd == 4;
  g.N = g.batched ? self.size(0) : 1;
  g.C = self.size(-3);
  g.H = self.size(-2);
  g.W = self.size(-1);
  g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw;
  g.Ho = pool_output_size(g.H, kh, ph, sh, dh, ceil_mode);
  g.Wo = pool_output_size(g.W, kw, pw, sw, dw, ceil_mode);
  LOOM_CHECK(g.Ho >= 1 && g.Wo >= 1, "[", op, "] given input of shape ", self.sizes,
             ", the calculated output size (", g.Ho, " x ", g.Wo, ") is too small (kernel_size ",
             kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ", dilation, ")");
  return g;
}

namespace {

std::vector<int64_t> output_shape(const PoolGeometry& g) {
  if (g.batched) return {g.N, g.C, g.Ho, g.Wo};
  return {g.C, g.Ho, g.Wo};
}

}  // namespace

std::array<TensorMeta, 2> max_pool2d_with_indices_shape(TensorMetaRef self, IntArrayRef kernel_size,
                                                        IntArrayRef stride, IntArrayRef padding,
                                                        IntArrayRef dilation, bool ceil_mode) {
  const PoolGeometry g =
      pool2d_geometry("max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode);
  const std::vector<int64_t> shape = output_shape(g);
  return {TensorMeta(shape, self.dtype), TensorMeta(shape, kInt64)};
}

namespace {

// Checks grad_output (and indices) against the forward's output shape for self and the geometry.
void check_pool_grad(const char* op, TensorMetaRef grad_output, TensorMetaRef self,
                     const PoolGeometry& g) {
  const std::vector<int64_t> shape = output_shape(g);
  LOOM_CHECK(grad_output.sizes == IntArrayRef(shape), "[", op, "] expected grad_output of shape ",
             IntArrayRef(shape), " (the pooling output for self of shape ", self.sizes,
             ") but got ", grad_output.sizes);
  LOOM_CHECK_TYPE(is_floating(self.dtype) && grad_output.dtype == self.dtype, "[", op,
                  "] expected grad_output and self of one floating dtype but got ",
                  grad_output.dtype, " and ", self.dtype);
  LOOM_CHECK(grad_output.device == self.device, "[", op, "] expected grad_output on ", self.device,
             " (like self) but it is on ", grad_output.device);
}

// Adds each output's gradient to the input element its index names (an index into the H*W plane).
}  // namespace

TensorMeta max_pool2d_with_indices_backward_shape(TensorMetaRef grad_output, TensorMetaRef self,
                                                  IntArrayRef kernel_size, IntArrayRef stride,
                                                  IntArrayRef padding, IntArrayRef dilation,
                                                  bool ceil_mode, TensorMetaRef indices) {
  constexpr const char* op = "max_pool2d_with_indices_backward";
  const PoolGeometry g =
      pool2d_geometry(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  check_pool_grad(op, grad_output, self, g);
  LOOM_CHECK(indices.sizes == grad_output.sizes, "[", op, "] expected indices of shape ",
             grad_output.sizes, " (like grad_output) but got ", indices.sizes);
  LOOM_CHECK_TYPE(indices.dtype == kInt64, "[", op, "] expected int64 indices but got ",
                  indices.dtype);
  return TensorMeta(self.sizes, self.dtype);
}

namespace {

Tensor max_pool2d_composite(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                            IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return std::get<0>(
      max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode));
}

}  // namespace

TensorMeta avg_pool2d_shape(TensorMetaRef self, IntArrayRef kernel_size, IntArrayRef stride,
                            IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                            std::optional<int64_t> divisor_override) {
  const int64_t one = 1;  // avg_pool2d has no dilation
  const PoolGeometry g =
      pool2d_geometry("avg_pool2d", self, kernel_size, stride, padding, one, ceil_mode);
  LOOM_CHECK(!divisor_override || *divisor_override != 0,
             "[avg_pool2d] divisor_override must be non-zero");
  return TensorMeta(output_shape(g), self.dtype);
}

TensorMeta avg_pool2d_backward_shape(TensorMetaRef grad_output, TensorMetaRef self,
                                     IntArrayRef kernel_size, IntArrayRef stride,
                                     IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                     std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool2d_backward";
  const int64_t one = 1;
  const PoolGeometry g = pool2d_geometry(op, self, kernel_size, stride, padding, one, ceil_mode);
  LOOM_CHECK(!divisor_override || *divisor_override != 0, "[", op,
             "] divisor_override must be non-zero");
  check_pool_grad(op, grad_output, self, g);
  return TensorMeta(self.sizes, self.dtype);
}

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
  MetaKernel<&max_pool2d_with_indices_shape>::register_meta(m, "max_pool2d_with_indices");
  MetaKernel<&max_pool2d_with_indices_backward_shape>::register_meta(
      m, "max_pool2d_with_indices_backward");
  MetaKernel<&avg_pool2d_shape>::register_meta(m, "avg_pool2d");
  MetaKernel<&avg_pool2d_backward_shape>::register_meta(m, "avg_pool2d_backward");
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
  m.def("max_pool2d_with_indices", autograd::saves({}, {1}),
        [](const BackwardContext& c) -> GradList {
          const Tensor& g = c.grad(0);
          if (!c.needs(0) || !g.defined()) return {Tensor()};
          const Tensor self =
              grad_utils::shape_only(c.input_sizes(0), c.input_dtype(0), g.device());
          return {max_pool2d_with_indices_backward(g, self, c.int_list_arg(1), c.int_list_arg(2),
                                                   c.int_list_arg(3), c.int_list_arg(4),
                                                   c.bool_arg(5), c.output(1))};
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
