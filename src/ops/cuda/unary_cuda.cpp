// CUDA kernels of the unary family (schemas and shape functions in unary.cpp, CPU loops in
// cpu/unary_kernels.cpp): the TensorIterator sizes, promotes and checks exactly as on the CPU
// (int_to_float, bool outputs, out= casts, in-place shapes), then its loop runs on the device
// (unary_kernels.cu). The dtype checks and error messages are the CPU kernels'.
#include <algorithm>
#include <limits>
#include <string_view>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/unary_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::UnaryOp;

struct UnaryInfo {
  const char* name;
  UnaryDtypes dtypes;
};

constexpr UnaryInfo info(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
      return {"neg", UnaryDtypes::Keep};
    case UnaryOp::Abs:
      return {"abs", UnaryDtypes::Keep};
    case UnaryOp::Relu:
      return {"relu", UnaryDtypes::Keep};
    case UnaryOp::Sign:
      return {"sign", UnaryDtypes::KeepWithBool};
    case UnaryOp::Exp:
      return {"exp", UnaryDtypes::IntToFloat};
    case UnaryOp::Log:
      return {"log", UnaryDtypes::IntToFloat};
    case UnaryOp::Log1p:
      return {"log1p", UnaryDtypes::IntToFloat};
    case UnaryOp::Sqrt:
      return {"sqrt", UnaryDtypes::IntToFloat};
    case UnaryOp::Rsqrt:
      return {"rsqrt", UnaryDtypes::IntToFloat};
    case UnaryOp::Sin:
      return {"sin", UnaryDtypes::IntToFloat};
    case UnaryOp::Cos:
      return {"cos", UnaryDtypes::IntToFloat};
    case UnaryOp::Tanh:
      return {"tanh", UnaryDtypes::IntToFloat};
    case UnaryOp::Sigmoid:
      return {"sigmoid", UnaryDtypes::IntToFloat};
    case UnaryOp::Erf:
      return {"erf", UnaryDtypes::IntToFloat};
    case UnaryOp::Reciprocal:
      return {"reciprocal", UnaryDtypes::IntToFloat};
    case UnaryOp::Silu:
      return {"silu", UnaryDtypes::FloatOnly};
    case UnaryOp::GeluErf:
    case UnaryOp::GeluTanh:
      return {"gelu", UnaryDtypes::FloatOnly};
    case UnaryOp::LogicalNot:
      return {"logical_not", UnaryDtypes::BoolOut};
  }
  return {"unary", UnaryDtypes::Keep};
}

// out: undefined (functional), self (in-place) or the caller's out= tensor.
Tensor unary_impl(UnaryOp op, const Tensor& out, const Tensor& self, bool inplace) {
  const UnaryInfo in = info(op);
  unary_compute_dtype(in.name, in.dtypes, self.dtype());  // rejects what the CPU rejects
  TensorIteratorConfig cfg;
  cfg.op = in.name;
  cfg.outputs = {out};
  cfg.inputs = {self};
  cfg.int_to_float = in.dtypes == UnaryDtypes::IntToFloat;
  cfg.is_inplace = inplace;
  if (in.dtypes == UnaryDtypes::BoolOut) cfg.output_dtype = kBool;
  TensorIterator it(std::move(cfg));
  cuda_ops::launch_iter(it, in.name, [op](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_unary(op, a, s);
  });
  it.finish();
  return it.output(0);
}

template <UnaryOp kOp>
Tensor functional(const Tensor& self) {
  return unary_impl(kOp, Tensor(), self, false);
}
template <UnaryOp kOp>
Tensor inplace(const Tensor& self) {
  return unary_impl(kOp, self, self, true);
}
template <UnaryOp kOp>
Tensor out_variant(const Tensor& self, const Tensor& out) {
  return unary_impl(kOp, out, self, false);
}

// ---- gelu ----

UnaryOp gelu_op(std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu] approximate argument must be either 'none' or 'tanh' but got '", approximate,
             "'");
  return approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf;
}
Tensor gelu_kernel(const Tensor& self, std::string_view approximate) {
  return unary_impl(gelu_op(approximate), Tensor(), self, false);
}
Tensor gelu_inplace_kernel(const Tensor& self, std::string_view approximate) {
  return unary_impl(gelu_op(approximate), self, self, true);
}
Tensor gelu_out_kernel(const Tensor& self, std::string_view approximate, const Tensor& out) {
  return unary_impl(gelu_op(approximate), out, self, false);
}

// ---- pow ----

Tensor pow_scalar_impl(const Tensor& out, const Tensor& self, const Scalar& exponent,
                       bool inplace) {
  check_defined(self, "pow", "self");
  TensorIteratorConfig cfg;
  cfg.op = "pow";
  cfg.outputs = {out};
  // The wrapped exponent takes part in promotion only; the loop reads the Scalar.
  cfg.inputs = {self, wrap_scalar(exponent)};
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[pow] is not implemented for bool (base ", self.dtype(),
                  ", exponent ", exponent, ")");
  if (is_integral(dt, false)) {
    LOOM_CHECK(exponent.is_floating() || exponent.to_int() >= 0,
               "[pow] integers to negative integer powers are not allowed (exponent ", exponent,
               ")");
  }
  const double e = exponent.to_double();
  using cuda_ops::PowKind;
  PowKind kind = PowKind::General;
  if (!is_integral(dt, false)) {
    if (e == 0) {
      kind = PowKind::Zero;
    } else if (e == 1) {
      kind = PowKind::One;
    } else if (e == 2) {
      kind = PowKind::Two;
    } else if (e == 3) {
      kind = PowKind::Three;
    } else if (e == 0.5) {
      kind = PowKind::Half;
    } else if (e == -0.5) {
      kind = PowKind::MinusHalf;
    } else if (e == -1) {
      kind = PowKind::MinusOne;
    } else if (e == -2) {
      kind = PowKind::MinusTwo;
    }
  }
  // The CPU's General body computes pow(x, T(e)) in the compute type: float for 16-bit floats.
  const double e_compute = dt == kFloat64 ? e : static_cast<double>(static_cast<float>(e));
  const int64_t ie = exponent.to_int();
  cuda_ops::launch_iter(it, "pow", [&](cuda_ops::IterArgs& a, cudaStream_t s) {
    a.keep_operands(2);
    return cuda_ops::launch_pow_scalar(a, kind, e_compute, ie, s);
  });
  it.finish();
  return it.output(0);
}

Tensor pow_tensor_impl(const Tensor& out, const Tensor& self, const Tensor& exponent,
                       bool inplace) {
  check_defined(self, "pow", "self");
  check_defined(exponent, "pow", "exponent");
  TensorIteratorConfig cfg;
  cfg.op = "pow";
  cfg.outputs = {out};
  cfg.inputs = {self, exponent};
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[pow] is not implemented for bool (base ", self.dtype(),
                  ", exponent ", exponent.dtype(), ")");
  cuda_ops::launch_iter(it, "pow", [](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_pow_tensor(a, s);
  });
  it.finish();
  return it.output(0);
}

Tensor pow_ts_kernel(const Tensor& self, const Scalar& e) {
  return pow_scalar_impl({}, self, e, false);
}
Tensor pow_ts_inplace_kernel(const Tensor& self, const Scalar& e) {
  return pow_scalar_impl(self, self, e, true);
}
Tensor pow_ts_out_kernel(const Tensor& self, const Scalar& e, const Tensor& out) {
  return pow_scalar_impl(out, self, e, false);
}
Tensor pow_tt_kernel(const Tensor& self, const Tensor& e) {
  return pow_tensor_impl({}, self, e, false);
}
Tensor pow_tt_inplace_kernel(const Tensor& self, const Tensor& e) {
  return pow_tensor_impl(self, self, e, true);
}
Tensor pow_tt_out_kernel(const Tensor& self, const Tensor& e, const Tensor& out) {
  return pow_tensor_impl(out, self, e, false);
}

// ---- clamp ----

// The bounds as the CPU kernel computes them in its compute type M (float for 16-bit floats;
// infinities when absent); integer bounds saturate to the dtype's range (clamp(int8, max=1000)
// changes nothing).
struct ClampBounds {
  double flo = -std::numeric_limits<double>::infinity();
  double fhi = std::numeric_limits<double>::infinity();
  int64_t ilo = 0, ihi = 0;
};
template <class M>
ClampBounds clamp_bounds(const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  ClampBounds b;
  using L = std::numeric_limits<M>;
  if constexpr (std::is_integral_v<M>) {
    const auto lo = static_cast<int64_t>(L::lowest()), hi = static_cast<int64_t>(L::max());
    b.ilo = min ? std::clamp<int64_t>(min->to_int(), lo, hi) : lo;
    b.ihi = max ? std::clamp<int64_t>(max->to_int(), lo, hi) : hi;
  } else {
    if (min) b.flo = static_cast<double>(min->to<M>());
    if (max) b.fhi = static_cast<double>(max->to<M>());
  }
  return b;
}

Tensor clamp_impl(const Tensor& out, const Tensor& self, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max, bool inplace) {
  check_defined(self, "clamp", "self");
  LOOM_CHECK(min.has_value() || max.has_value(),
             "[clamp] at least one of 'min' or 'max' must not be None");
  TensorIteratorConfig cfg;
  cfg.op = "clamp";
  cfg.outputs = {out};
  // The wrapped bounds take part in promotion only (clamp(int, 0.5) is float).
  cfg.inputs = {self};
  if (min) cfg.inputs.push_back(wrap_scalar(*min));
  if (max) cfg.inputs.push_back(wrap_scalar(*max));
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[clamp] is not implemented for bool");
  ClampBounds b;
  LOOM_DISPATCH_ALL_TYPES(dt, "clamp", [&] {
    if constexpr (!std::is_same_v<scalar_t, bool>) b = clamp_bounds<opmath_t<scalar_t>>(min, max);
  });
  const double flo = b.flo, fhi = b.fhi;
  const int64_t ilo = b.ilo, ihi = b.ihi;
  cuda_ops::launch_iter(it, "clamp", [&](cuda_ops::IterArgs& a, cudaStream_t s) {
    a.keep_operands(2);
    return cuda_ops::launch_clamp(a, flo, fhi, ilo, ihi, s);
  });
  it.finish();
  return it.output(0);
}

Tensor clamp_kernel(const Tensor& self, const std::optional<Scalar>& min,
                    const std::optional<Scalar>& max) {
  return clamp_impl({}, self, min, max, false);
}
Tensor clamp_inplace_kernel(const Tensor& self, const std::optional<Scalar>& min,
                            const std::optional<Scalar>& max) {
  return clamp_impl(self, self, min, max, true);
}
Tensor clamp_out_kernel(const Tensor& self, const std::optional<Scalar>& min,
                        const std::optional<Scalar>& max, const Tensor& out) {
  return clamp_impl(out, self, min, max, false);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
#define LOOM_UNARY_CUDA(name, op)          \
  m.impl(#name, functional<UnaryOp::op>);  \
  m.impl(#name "_", inplace<UnaryOp::op>); \
  m.impl(#name ".out", out_variant<UnaryOp::op>);
  LOOM_UNARY_CUDA(neg, Neg)
  LOOM_UNARY_CUDA(abs, Abs)
  LOOM_UNARY_CUDA(exp, Exp)
  LOOM_UNARY_CUDA(log, Log)
  LOOM_UNARY_CUDA(log1p, Log1p)
  LOOM_UNARY_CUDA(sqrt, Sqrt)
  LOOM_UNARY_CUDA(rsqrt, Rsqrt)
  LOOM_UNARY_CUDA(sin, Sin)
  LOOM_UNARY_CUDA(cos, Cos)
  LOOM_UNARY_CUDA(tanh, Tanh)
  LOOM_UNARY_CUDA(sigmoid, Sigmoid)
  LOOM_UNARY_CUDA(relu, Relu)
  LOOM_UNARY_CUDA(silu, Silu)
  LOOM_UNARY_CUDA(erf, Erf)
  LOOM_UNARY_CUDA(sign, Sign)
  LOOM_UNARY_CUDA(reciprocal, Reciprocal)
  LOOM_UNARY_CUDA(logical_not, LogicalNot)
#undef LOOM_UNARY_CUDA
  m.impl("gelu", gelu_kernel);
  m.impl("gelu_", gelu_inplace_kernel);
  m.impl("gelu.out", gelu_out_kernel);
  m.impl("pow.Tensor_Scalar", pow_ts_kernel);
  m.impl("pow.Tensor_Tensor", pow_tt_kernel);
  m.impl("pow_.Scalar", pow_ts_inplace_kernel);
  m.impl("pow_.Tensor", pow_tt_inplace_kernel);
  m.impl("pow.Tensor_Scalar_out", pow_ts_out_kernel);
  m.impl("pow.Tensor_Tensor_out", pow_tt_out_kernel);
  m.impl("clamp", clamp_kernel);
  m.impl("clamp_", clamp_inplace_kernel);
  m.impl("clamp.out", clamp_out_kernel);
}

}  // namespace loom
