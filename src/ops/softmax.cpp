// softmax and log_softmax along one dim and their backwards: schemas, shape functions and
// derivatives (the loops are in cpu/softmax_kernels.cpp).
#include "loom/derivatives.h"
#include "op_call.h"
#include "shapes.h"
#include "structured.h"

namespace loom {

// Shape function of softmax and log_softmax: the input's shape, in dtype= (else the input's),
// which must be floating.
template <bool kLog>
TensorMeta softmax_shape(TensorMetaRef self, int64_t dim, std::optional<DType> dtype) {
  const char* op = kLog ? "log_softmax" : "softmax";
  wrap_dim(dim, self.dim(), op);
  const DType dt = dtype.value_or(self.dtype);
  LOOM_CHECK_TYPE(is_floating(dt), "[", op, "] expected a floating point input but got ", dt,
                  " (pass dtype= to compute in a floating type)");
  return TensorMeta(self.sizes, dt);
}
template TensorMeta softmax_shape<false>(TensorMetaRef, int64_t, std::optional<DType>);
template TensorMeta softmax_shape<true>(TensorMetaRef, int64_t, std::optional<DType>);

// Shape function of the softmax backwards: grad_output and output share a shape, a floating
// dtype and a device; the result has the forward input's dtype.
template <bool kLog>
TensorMeta softmax_backward_shape(TensorMetaRef grad_output, TensorMetaRef output, int64_t dim,
                                  DType input_dtype) {
  const char* op = kLog ? "_log_softmax_backward_data" : "_softmax_backward_data";
  wrap_dim(dim, output.dim(), op);
  LOOM_CHECK(grad_output.sizes == output.sizes, "[", op, "] expected grad_output of shape ",
             output.sizes, " (the shape of output) but got ", grad_output.sizes);
  const DType dt = output.dtype;
  LOOM_CHECK_TYPE(is_floating(dt) && grad_output.dtype == dt, "[", op,
                  "] expected grad_output and output of one floating dtype but got ",
                  grad_output.dtype, " and ", dt);
  LOOM_CHECK_TYPE(is_floating(input_dtype), "[", op, "] expected a floating input_dtype but got ",
                  input_dtype);
  LOOM_CHECK(grad_output.device == output.device, "[", op, "] expected grad_output on ",
             output.device, " (like output) but it is on ", grad_output.device);
  return TensorMeta(output.sizes, input_dtype);
}
template TensorMeta softmax_backward_shape<false>(TensorMetaRef, TensorMetaRef, int64_t, DType);
template TensorMeta softmax_backward_shape<true>(TensorMetaRef, TensorMetaRef, int64_t, DType);

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def("log_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor");
  m.def(
      "_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) "
      "-> Tensor");
  m.def(
      "_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, "
      "ScalarType input_dtype) -> Tensor");
  MetaKernel<&softmax_shape<false>>::register_meta(m, "softmax");
  MetaKernel<&softmax_shape<true>>::register_meta(m, "log_softmax");
  MetaKernel<&softmax_backward_shape<false>>::register_meta(m, "_softmax_backward_data");
  MetaKernel<&softmax_backward_shape<true>>::register_meta(m, "_log_softmax_backward_data");
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

Tensor sum_along(const Tensor& t, int64_t dim) {
  return sum(t, IntArrayRef{dim}, /*keepdim=*/true);
}
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
  m.def("_softmax_backward_data", autograd::saves({0, 1}),
        [](const BackwardContext& c) -> GradList {
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
