// Pointwise unary operators: math functions (exp, log, sqrt, tanh, erf, ...), neg/abs/sign/relu,
// activations (sigmoid, silu, gelu), logical_not, pow and clamp: schemas, shape functions and the
// Meta kernels built from them. The CPU functors and loops are in cpu/unary_kernels.cpp, the
// derivatives in unary_derivatives.cpp.
#include <string_view>

#include "op_call.h"
#include "shapes.h"

namespace loom {
namespace {

// ---- shape functions and the Meta kernels built from them ----

// A C++ number as promotion sees it: a wrapped 0-dim tensor of its kind's widest dtype.
TensorMetaRef wrapped_number_meta(const Scalar& s) {
  const DType dt = s.is_bool() ? kBool : (s.is_integral() ? kInt64 : kFloat64);
  return TensorMetaRef(IntArrayRef(), IntArrayRef(), dt, kCPU, /*wrapped=*/true);
}

// What each operator of the table below takes and gives; the CPU functors in
// cpu/unary_kernels.cpp carry the same UnaryDtypes (ShapeFn.UnaryMetaMatchesCpu checks they agree).
struct UnaryInfo {
  const char* name;
  UnaryDtypes dtypes;
};
#define LOOM_UNARY_INFO(op, kind) constexpr UnaryInfo k_##op{#op, UnaryDtypes::kind};
LOOM_UNARY_INFO(neg, Keep)
LOOM_UNARY_INFO(abs, Keep)
LOOM_UNARY_INFO(exp, IntToFloat)
LOOM_UNARY_INFO(log, IntToFloat)
LOOM_UNARY_INFO(log1p, IntToFloat)
LOOM_UNARY_INFO(sqrt, IntToFloat)
LOOM_UNARY_INFO(rsqrt, IntToFloat)
LOOM_UNARY_INFO(sin, IntToFloat)
LOOM_UNARY_INFO(cos, IntToFloat)
LOOM_UNARY_INFO(tanh, IntToFloat)
LOOM_UNARY_INFO(sigmoid, IntToFloat)
LOOM_UNARY_INFO(relu, Keep)
LOOM_UNARY_INFO(silu, FloatOnly)
LOOM_UNARY_INFO(erf, IntToFloat)
LOOM_UNARY_INFO(sign, KeepWithBool)
LOOM_UNARY_INFO(reciprocal, IntToFloat)
LOOM_UNARY_INFO(logical_not, BoolOut)
#undef LOOM_UNARY_INFO

template <const UnaryInfo& I>
Tensor meta_functional(const Tensor& self) {
  return meta_output(unary_shape(I.name, I.dtypes, self));
}
template <const UnaryInfo& I>
Tensor meta_inplace_op(const Tensor& self) {
  return meta_inplace(I.name, self, unary_shape(I.name, I.dtypes, self));
}
template <const UnaryInfo& I>
Tensor meta_out_op(const Tensor& self, const Tensor& out) {
  prepare_out(I.name, out, unary_shape(I.name, I.dtypes, self), out.device());
  return out;
}

}  // namespace

TensorMeta unary_shape(const char* op, UnaryDtypes kind, TensorMetaRef self) {
  const DType compute = unary_compute_dtype(op, kind, self.dtype);
  return TensorMeta(self.sizes, kind == UnaryDtypes::BoolOut ? kBool : compute);
}

TensorMeta gelu_shape(TensorMetaRef self, std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu] approximate argument must be either 'none' or 'tanh' but got '", approximate,
             "'");
  return unary_shape("gelu", UnaryDtypes::FloatOnly, self);
}
TensorMeta pow_scalar_shape(TensorMetaRef self, const Scalar& exponent) {
  const TensorMetaRef in[2] = {self, wrapped_number_meta(exponent)};
  const DType dt = result_type(in, 2);
  LOOM_CHECK_TYPE(dt != kBool, "[pow] is not implemented for bool (base ", self.dtype,
                  ", exponent ", exponent, ")");
  if (is_integral(dt, false)) {
    LOOM_CHECK(exponent.is_floating() || exponent.to_int() >= 0,
               "[pow] integers to negative integer powers are not allowed (exponent ", exponent,
               ")");
  }
  return TensorMeta(self.sizes, dt);
}
TensorMeta pow_tensor_shape(TensorMetaRef self, TensorMetaRef exponent) {
  const TensorMetaRef in[2] = {self, exponent};
  common_device("pow", in, 2);
  DimVector shape = broadcast_shapes("pow", in, 2);
  const DType dt = result_type(in, 2);
  LOOM_CHECK_TYPE(dt != kBool, "[pow] is not implemented for bool (base ", self.dtype,
                  ", exponent ", exponent.dtype, ")");
  return TensorMeta(shape, dt);
}
TensorMeta clamp_shape(TensorMetaRef self, const std::optional<Scalar>& min,
                       const std::optional<Scalar>& max) {
  LOOM_CHECK(min.has_value() || max.has_value(),
             "[clamp] at least one of 'min' or 'max' must not be None");
  TensorMetaRef in[3] = {self};
  size_t n = 1;
  if (min) in[n++] = wrapped_number_meta(*min);
  if (max) in[n++] = wrapped_number_meta(*max);
  const DType dt = result_type(in, n);
  LOOM_CHECK_TYPE(dt != kBool, "[clamp] is not implemented for bool");
  return TensorMeta(self.sizes, dt);
}

namespace {

Tensor gelu_meta(const Tensor& self, std::string_view approximate) {
  return meta_output(gelu_shape(self, approximate));
}
Tensor gelu_inplace_meta(const Tensor& self, std::string_view approximate) {
  return meta_inplace("gelu", self, gelu_shape(self, approximate));
}
Tensor gelu_out_meta(const Tensor& self, std::string_view approximate, const Tensor& out) {
  prepare_out("gelu", out, gelu_shape(self, approximate), out.device());
  return out;
}

Tensor pow_ts_meta(const Tensor& self, const Scalar& e) {
  return meta_output(pow_scalar_shape(self, e));
}
Tensor pow_ts_inplace_meta(const Tensor& self, const Scalar& e) {
  return meta_inplace("pow", self, pow_scalar_shape(self, e));
}
Tensor pow_ts_out_meta(const Tensor& self, const Scalar& e, const Tensor& out) {
  prepare_out("pow", out, pow_scalar_shape(self, e), out.device());
  return out;
}
Tensor pow_tt_meta(const Tensor& self, const Tensor& e) {
  return meta_output(pow_tensor_shape(self, e));
}
Tensor pow_tt_inplace_meta(const Tensor& self, const Tensor& e) {
  return meta_inplace("pow", self, pow_tensor_shape(self, e));
}
Tensor pow_tt_out_meta(const Tensor& self, const Tensor& e, const Tensor& out) {
  prepare_out("pow", out, pow_tensor_shape(self, e), out.device());
  return out;
}
Tensor clamp_meta(const Tensor& self, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max) {
  return meta_output(clamp_shape(self, min, max));
}
Tensor clamp_inplace_meta(const Tensor& self, const std::optional<Scalar>& min,
                          const std::optional<Scalar>& max) {
  return meta_inplace("clamp", self, clamp_shape(self, min, max));
}
Tensor clamp_out_meta(const Tensor& self, const std::optional<Scalar>& min,
                      const std::optional<Scalar>& max, const Tensor& out) {
  prepare_out("clamp", out, clamp_shape(self, min, max), out.device());
  return out;
}

}  // namespace

#define LOOM_UNARY_REGISTER(name)                                    \
  m.def(#name "(Tensor self) -> Tensor");                            \
  m.def(#name "_(Tensor(a!) self) -> Tensor(a!)");                   \
  m.def(#name ".out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"); \
  m.impl(#name, DispatchKey::Meta, meta_functional<k_##name>);       \
  m.impl(#name "_", DispatchKey::Meta, meta_inplace_op<k_##name>);   \
  m.impl(#name ".out", DispatchKey::Meta, meta_out_op<k_##name>);

LOOM_LIBRARY_FRAGMENT(loom, m) {
  LOOM_UNARY_REGISTER(neg)
  LOOM_UNARY_REGISTER(abs)
  LOOM_UNARY_REGISTER(exp)
  LOOM_UNARY_REGISTER(log)
  LOOM_UNARY_REGISTER(log1p)
  LOOM_UNARY_REGISTER(sqrt)
  LOOM_UNARY_REGISTER(rsqrt)
  LOOM_UNARY_REGISTER(sin)
  LOOM_UNARY_REGISTER(cos)
  LOOM_UNARY_REGISTER(tanh)
  LOOM_UNARY_REGISTER(sigmoid)
  LOOM_UNARY_REGISTER(relu)
  LOOM_UNARY_REGISTER(silu)
  LOOM_UNARY_REGISTER(erf)
  LOOM_UNARY_REGISTER(sign)
  LOOM_UNARY_REGISTER(reciprocal)
  LOOM_UNARY_REGISTER(logical_not)
  m.def("gelu(Tensor self, *, str approximate='none') -> Tensor");
  m.def("gelu_(Tensor(a!) self, *, str approximate='none') -> Tensor(a!)");
  m.def("gelu.out(Tensor self, *, str approximate='none', Tensor(a!) out) -> Tensor(a!)");
  m.def("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor");
  m.def("pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor");
  m.def("pow_.Scalar(Tensor(a!) self, Scalar exponent) -> Tensor(a!)");
  m.def("pow_.Tensor(Tensor(a!) self, Tensor exponent) -> Tensor(a!)");
  m.def("pow.Tensor_Scalar_out(Tensor self, Scalar exponent, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("pow.Tensor_Tensor_out(Tensor self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor");
  m.def("clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)");
  m.def(
      "clamp.out(Tensor self, Scalar? min=None, Scalar? max=None, *, Tensor(a!) out) -> "
      "Tensor(a!)");
  m.impl("gelu", DispatchKey::Meta, gelu_meta);
  m.impl("gelu_", DispatchKey::Meta, gelu_inplace_meta);
  m.impl("gelu.out", DispatchKey::Meta, gelu_out_meta);
  m.impl("pow.Tensor_Scalar", DispatchKey::Meta, pow_ts_meta);
  m.impl("pow.Tensor_Tensor", DispatchKey::Meta, pow_tt_meta);
  m.impl("pow_.Scalar", DispatchKey::Meta, pow_ts_inplace_meta);
  m.impl("pow_.Tensor", DispatchKey::Meta, pow_tt_inplace_meta);
  m.impl("pow.Tensor_Scalar_out", DispatchKey::Meta, pow_ts_out_meta);
  m.impl("pow.Tensor_Tensor_out", DispatchKey::Meta, pow_tt_out_meta);
  m.impl("clamp", DispatchKey::Meta, clamp_meta);
  m.impl("clamp_", DispatchKey::Meta, clamp_inplace_meta);
  m.impl("clamp.out", DispatchKey::Meta, clamp_out_meta);
}
#undef LOOM_UNARY_REGISTER

using UnarySig = Tensor(const Tensor&);
using UnaryOutSig = Tensor(const Tensor&, const Tensor&);
#define LOOM_UNARY_WRAPPERS(name)                                   \
  Tensor name(const Tensor& self) {                                 \
    LOOM_CALL_OP("loom::" #name, UnarySig, self);                   \
  }                                                                 \
  const Tensor& name##_(const Tensor& self) {                       \
    LOOM_CALL_INPLACE("loom::" #name "_", UnarySig, self);          \
  }                                                                 \
  const Tensor& name##_out(const Tensor& out, const Tensor& self) { \
    LOOM_CALL_OUT("loom::" #name ".out", UnaryOutSig, out, self);   \
  }
LOOM_UNARY_WRAPPERS(neg)
LOOM_UNARY_WRAPPERS(abs)
LOOM_UNARY_WRAPPERS(exp)
LOOM_UNARY_WRAPPERS(log)
LOOM_UNARY_WRAPPERS(log1p)
LOOM_UNARY_WRAPPERS(sqrt)
LOOM_UNARY_WRAPPERS(rsqrt)
LOOM_UNARY_WRAPPERS(sin)
LOOM_UNARY_WRAPPERS(cos)
LOOM_UNARY_WRAPPERS(tanh)
LOOM_UNARY_WRAPPERS(sigmoid)
LOOM_UNARY_WRAPPERS(relu)
LOOM_UNARY_WRAPPERS(silu)
LOOM_UNARY_WRAPPERS(erf)
LOOM_UNARY_WRAPPERS(sign)
LOOM_UNARY_WRAPPERS(reciprocal)
LOOM_UNARY_WRAPPERS(logical_not)
#undef LOOM_UNARY_WRAPPERS

using GeluSig = Tensor(const Tensor&, std::string_view);
Tensor gelu(const Tensor& self, std::string_view approximate) {
  LOOM_CALL_OP("loom::gelu", GeluSig, self, approximate);
}
const Tensor& gelu_(const Tensor& self, std::string_view approximate) {
  LOOM_CALL_INPLACE("loom::gelu_", GeluSig, self, approximate);
}

using PowScalarSig = Tensor(const Tensor&, const Scalar&);
using PowTensorSig = Tensor(const Tensor&, const Tensor&);
Tensor pow(const Tensor& self, const Scalar& exponent) {
  LOOM_CALL_OP("loom::pow.Tensor_Scalar", PowScalarSig, self, exponent);
}
Tensor pow(const Tensor& self, const Tensor& exponent) {
  LOOM_CALL_OP("loom::pow.Tensor_Tensor", PowTensorSig, self, exponent);
}
// The base becomes a wrapped number, so it promotes like a Python number: 2 ** int_tensor is int64,
// 2.5 ** int_tensor the default float dtype.
Tensor pow(const Scalar& self, const Tensor& exponent) {
  return pow(wrap_scalar(self), exponent);
}
const Tensor& pow_(const Tensor& self, const Scalar& exponent) {
  LOOM_CALL_INPLACE("loom::pow_.Scalar", PowScalarSig, self, exponent);
}

using ClampSig = Tensor(const Tensor&, const std::optional<Scalar>&, const std::optional<Scalar>&);
Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
             const std::optional<Scalar>& max) {
  LOOM_CALL_OP("loom::clamp", ClampSig, self, min, max);
}
const Tensor& clamp_(const Tensor& self, const std::optional<Scalar>& min,
                     const std::optional<Scalar>& max) {
  LOOM_CALL_INPLACE("loom::clamp_", ClampSig, self, min, max);
}

}  // namespace loom
