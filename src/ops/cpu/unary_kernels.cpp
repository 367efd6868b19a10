// CPU kernels of the unary family. Every op is a small functor applied to one element in its
// compute type (float for float16 and bfloat16). The loops below feed it contiguous arrays so the
// compiler vectorises the functor; the float32 functors of the expensive ops call the branch-free
// versions in unary_math.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <type_traits>

#include "loom/parallel.h"
#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/tensor_iterator.h"
#include "ops/unary_math.h"

namespace loom {
namespace {

using Dtypes = UnaryDtypes;

// Integer negation that wraps like PyTorch's (-INT_MIN == INT_MIN) instead of overflowing.
template <class T>
T wrapping_neg(T x) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(x)));
}

// ---- the functors: `M operator()(M x)` with M the compute type ----

// Floating math ops. F32 is the float32 body (x is a float), F64 the one for double.
#define LOOM_FLOAT_OP(Name, str, F32, F64)               \
  struct Name {                                          \
    static constexpr const char* name = str;             \
    static constexpr Dtypes dtypes = Dtypes::IntToFloat; \
    template <class T>                                   \
    LOOM_ALWAYS_INLINE T operator()(T x) const {         \
      if constexpr (std::is_same_v<T, float>) {          \
        return F32;                                      \
      } else {                                           \
        return F64;                                      \
      }                                                  \
    }                                                    \
  };
LOOM_FLOAT_OP(ExpOp, "exp", fastmath::exp_f32(x), std::exp(x))
LOOM_FLOAT_OP(LogOp, "log", fastmath::log_f32(x), std::log(x))
LOOM_FLOAT_OP(Log1pOp, "log1p", fastmath::log1p_f32(x), std::log1p(x))
// std::sqrt does not vectorise here: with -fmath-errno (GCC's default) it keeps a scalar call path.
LOOM_FLOAT_OP(SqrtOp, "sqrt", std::sqrt(x), std::sqrt(x))
LOOM_FLOAT_OP(RsqrtOp, "rsqrt", 1.0f / std::sqrt(x), T(1) / std::sqrt(x))
LOOM_FLOAT_OP(SinOp, "sin", std::sin(x), std::sin(x))
LOOM_FLOAT_OP(CosOp, "cos", std::cos(x), std::cos(x))
LOOM_FLOAT_OP(TanhOp, "tanh", fastmath::tanh_f32(x), std::tanh(x))
LOOM_FLOAT_OP(SigmoidOp, "sigmoid", fastmath::sigmoid_f32(x), T(1) / (T(1) + std::exp(-x)))
LOOM_FLOAT_OP(ErfOp, "erf", fastmath::erf_f32(x), std::erf(x))
LOOM_FLOAT_OP(ReciprocalOp, "reciprocal", 1.0f / x, T(1) / x)
#undef LOOM_FLOAT_OP

struct SiluOp {
  static constexpr const char* name = "silu";
  static constexpr Dtypes dtypes = Dtypes::FloatOnly;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) {
      return x * fastmath::sigmoid_f32(x);
    } else {
      return x / (T(1) + std::exp(-x));
    }
  }
};

// gelu(x) = x * Phi(x) with Phi the normal CDF ("none"), or its tanh approximation ("tanh").
struct GeluErfOp {
  static constexpr const char* name = "gelu";
  static constexpr Dtypes dtypes = Dtypes::FloatOnly;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    constexpr T kSqrtHalf = T(0.70710678118654752440);
    if constexpr (std::is_same_v<T, float>) {
      return 0.5f * x * (1.0f + fastmath::erf_f32(x * kSqrtHalf));
    } else {
      return T(0.5) * x * (T(1) + std::erf(x * kSqrtHalf));
    }
  }
};
struct GeluTanhOp {
  static constexpr const char* name = "gelu";
  static constexpr Dtypes dtypes = Dtypes::FloatOnly;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    constexpr T kBeta = T(0.79788456080286535588);  // sqrt(2 / pi)
    constexpr T kKappa = T(0.044715);
    const T inner = kBeta * (x + kKappa * x * x * x);
    if constexpr (std::is_same_v<T, float>) {
      return 0.5f * x * (1.0f + fastmath::tanh_f32(inner));
    } else {
      return T(0.5) * x * (T(1) + std::tanh(inner));
    }
  }
};

struct NegOp {
  static constexpr const char* name = "neg";
  static constexpr Dtypes dtypes = Dtypes::Keep;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return wrapping_neg(x);
    } else {
      return -x;
    }
  }
};
struct AbsOp {
  static constexpr const char* name = "abs";
  static constexpr Dtypes dtypes = Dtypes::Keep;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else if constexpr (std::is_integral_v<T>) {
      return x < 0 ? wrapping_neg(x) : x;  // abs(INT_MIN) stays INT_MIN, as in PyTorch
    } else {
      return std::fabs(x);
    }
  }
};
// relu keeps NaN (a failed comparison selects x) and -0.0, as PyTorch's clamp_min(x, 0) does.
struct ReluOp {
  static constexpr const char* name = "relu";
  static constexpr Dtypes dtypes = Dtypes::Keep;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) {
      return x;
    } else {
      return x < T(0) ? T(0) : x;
    }
  }
};
// sign(NaN) is 0, as in PyTorch (both comparisons fail).
struct SignOp {
  static constexpr const char* name = "sign";
  static constexpr Dtypes dtypes = Dtypes::KeepWithBool;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool> || std::is_unsigned_v<T>) {
      return static_cast<T>(x != T(0));
    } else {
      return static_cast<T>((T(0) < x) - (x < T(0)));
    }
  }
};
struct LogicalNotOp {
  static constexpr const char* name = "logical_not";
  static constexpr Dtypes dtypes = Dtypes::BoolOut;
  template <class T>
  LOOM_ALWAYS_INLINE bool operator()(T x) const {
    return x == T(0);
  }
};

// ---- loops ----

// The C++ type an op computes in for elements of type T.
template <class T>
using compute_t = opmath_t<T>;

// y[i] = op(x[i]) over contiguous arrays (x may equal y: each element is read before it is
// written). 16-bit floats are widened to float in blocks so the float loop in the middle still
// vectorises.
template <class T, class Out, class Op>
LOOM_WIDE_VECTOR_LOOP void map_contiguous(const Op& op, const T* x, Out* y, int64_t n) {
  if constexpr (is_reduced_float_v<T>) {
    using R = decltype(op(0.0f));
    constexpr int64_t kBlock = 256;
    float in[kBlock];
    R res[kBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t m = std::min(kBlock, n - i0);
      for (int64_t j = 0; j < m; ++j) in[j] = static_cast<float>(x[i0 + j]);
      for (int64_t j = 0; j < m; ++j) res[j] = op(in[j]);
      for (int64_t j = 0; j < m; ++j) y[i0 + j] = convert<Out>(res[j]);
    }
  } else {
    const T* __restrict xr = x;
    Out* __restrict yr = y;
    for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<Out>(op(xr[i]));
  }
}

// The Loop1d body: contiguous runs go straight to map_contiguous; strided or broadcast ones are
// gathered into small buffers first so the math still runs vectorised.
template <class T, class Out, class Op>
void map_strided(const Op& op, char** data, const int64_t* s, int64_t n) {
  if (s[0] == static_cast<int64_t>(sizeof(Out)) && s[1] == static_cast<int64_t>(sizeof(T))) {
    map_contiguous<T, Out>(op, reinterpret_cast<const T*>(data[1]), reinterpret_cast<Out*>(data[0]),
                           n);
    return;
  }
  constexpr int64_t kBlock = 256;
  T in[kBlock];
  Out res[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    for (int64_t j = 0; j < m; ++j) in[j] = *reinterpret_cast<const T*>(data[1] + (i0 + j) * s[1]);
    map_contiguous<T, Out>(op, in, res, m);
    for (int64_t j = 0; j < m; ++j) *reinterpret_cast<Out*>(data[0] + (i0 + j) * s[0]) = res[j];
  }
}

// Calls body(T{}) for the element type T of dt, instantiating only the types the op can take.
template <class Op, class F>
void dispatch_op_dtype(DType dt, const F& body) {
  if constexpr (Op::dtypes == Dtypes::IntToFloat || Op::dtypes == Dtypes::FloatOnly) {
    LOOM_DISPATCH_FLOAT_TYPES(dt, Op::name, [&] { body(scalar_t{}); });
  } else {
    LOOM_DISPATCH_ALL_TYPES(dt, Op::name, [&] {
      if constexpr (!(Op::dtypes == Dtypes::Keep && std::is_same_v<scalar_t, bool>)) {
        body(scalar_t{});
      }
    });
  }
}

template <class T, class Op>
using result_t = std::conditional_t<Op::dtypes == Dtypes::BoolOut, bool, T>;

// Runs op over a built iterator whose output 0 and input 0 (operand 1) are what the op maps; any
// further inputs (pow's exponent, clamp's bounds) only took part in type promotion.
template <class Op>
void run_map(TensorIterator& it, const Op& op) {
  dispatch_op_dtype<Op>(it.common_dtype(), [&](auto tag) {
    using T = decltype(tag);
    it.for_each([&op](char** d, const int64_t* s, int64_t n) {
      map_strided<T, result_t<T, Op>>(op, d, s, n);
    });
  });
}

// out: undefined (functional), self (in-place) or the caller's out= tensor.
template <class Op>
Tensor unary_impl(const Tensor& out, const Tensor& self, bool inplace, const Op& op = Op{}) {
  // self is defined: the dispatcher rejects undefined arguments (Note [undefined tensors]).
  const DType compute = unary_compute_dtype(Op::name, Op::dtypes, self.dtype());
  const DType result = Op::dtypes == Dtypes::BoolOut ? kBool : compute;
  // Fast path: a contiguous CPU input that needs no cast, into a fresh tensor or itself. It skips
  // the iterator's setup, which dominates for small tensors.
  if (self.is_cpu() && self.is_contiguous() && compute == self.dtype() &&
      (!out.defined() || (inplace && result == self.dtype()))) {
    Tensor y = inplace ? self : empty_tensor(self.sizes(), result, kCPU);
    const char* xp = static_cast<const char*>(self.data_ptr());
    char* yp = static_cast<char*>(y.data_ptr());
    dispatch_op_dtype<Op>(compute, [&](auto tag) {
      using T = decltype(tag);
      parallel_for(0, self.numel(), 32768, [&](int64_t b, int64_t e) {
        map_contiguous<T, result_t<T, Op>>(op, reinterpret_cast<const T*>(xp) + b,
                                           reinterpret_cast<result_t<T, Op>*>(yp) + b, e - b);
      });
    });
    if (inplace) y.storage()->bump_version();
    return y;
  }
  TensorIteratorConfig cfg;
  cfg.op = Op::name;
  cfg.outputs = {out};
  cfg.inputs = {self};
  cfg.int_to_float = Op::dtypes == Dtypes::IntToFloat;
  cfg.is_inplace = inplace;
  if (Op::dtypes == Dtypes::BoolOut) cfg.output_dtype = kBool;
  TensorIterator it(std::move(cfg));
  run_map(it, op);
  it.finish();
  return it.output(0);
}

template <class Op>
Tensor functional(const Tensor& self) {
  return unary_impl<Op>(Tensor(), self, false);
}
template <class Op>
Tensor inplace(const Tensor& self) {
  return unary_impl<Op>(self, self, true);
}
template <class Op>
Tensor out_variant(const Tensor& self, const Tensor& out) {
  return unary_impl<Op>(out, self, false);
}

// ---- gelu ----

bool gelu_is_tanh(std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh",
             "[gelu] approximate argument must be either 'none' or 'tanh' but got '", approximate,
             "'");
  return approximate == "tanh";
}
Tensor gelu_impl(const Tensor& out, const Tensor& self, std::string_view approximate,
                 bool inplace) {
  if (gelu_is_tanh(approximate)) return unary_impl<GeluTanhOp>(out, self, inplace);
  return unary_impl<GeluErfOp>(out, self, inplace);
}
Tensor gelu_kernel(const Tensor& self, std::string_view approximate) {
  return gelu_impl(Tensor(), self, approximate, false);
}
Tensor gelu_inplace_kernel(const Tensor& self, std::string_view approximate) {
  return gelu_impl(self, self, approximate, true);
}
Tensor gelu_out_kernel(const Tensor& self, std::string_view approximate, const Tensor& out) {
  return gelu_impl(out, self, approximate, false);
}

// ---- pow ----

// base^e for integers with wrap-around on overflow, as PyTorch; e < 0 gives 0 unless |base| == 1.
template <class T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>) {
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    }
    return T(0);
  }
  // uint64_t arithmetic wraps without undefined behaviour and agrees modulo 2^bits with T's.
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  while (e != 0) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<T>(result);
}

// Tensor ^ Scalar. The exponent's common values get exact bodies that vectorise (as in PyTorch);
// the others use std::pow. K is a template parameter so each kind is its own branch-free loop.
enum class PowKind { Zero, One, Two, Three, Half, MinusHalf, MinusOne, MinusTwo, General };
template <PowKind K>
struct PowScalarOp {
  static constexpr const char* name = "pow";
  static constexpr Dtypes dtypes = Dtypes::Keep;
  double e = 1.0;
  int64_t ie = 1;
  template <class T>
  LOOM_ALWAYS_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return int_pow(x, ie);
    } else if constexpr (K == PowKind::Zero) {
      return T(1);
    } else if constexpr (K == PowKind::One) {
      return x;
    } else if constexpr (K == PowKind::Two) {
      return x * x;
    } else if constexpr (K == PowKind::Three) {
      return x * x * x;
    } else if constexpr (K == PowKind::Half) {
      return std::sqrt(x);
    } else if constexpr (K == PowKind::MinusHalf) {
      return T(1) / std::sqrt(x);
    } else if constexpr (K == PowKind::MinusOne) {
      return T(1) / x;
    } else if constexpr (K == PowKind::MinusTwo) {
      return T(1) / (x * x);
    } else {
      return std::pow(x, static_cast<T>(e));
    }
  }
};

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
  auto run = [&](auto op) {
    op.e = e;
    op.ie = exponent.to_int();
    run_map(it, op);
  };
  if (is_integral(dt, false)) {
    run(PowScalarOp<PowKind::General>{});
  } else if (e == 0) {
    run(PowScalarOp<PowKind::Zero>{});
  } else if (e == 1) {
    run(PowScalarOp<PowKind::One>{});
  } else if (e == 2) {
    run(PowScalarOp<PowKind::Two>{});
  } else if (e == 3) {
    run(PowScalarOp<PowKind::Three>{});
  } else if (e == 0.5) {
    run(PowScalarOp<PowKind::Half>{});
  } else if (e == -0.5) {
    run(PowScalarOp<PowKind::MinusHalf>{});
  } else if (e == -1) {
    run(PowScalarOp<PowKind::MinusOne>{});
  } else if (e == -2) {
    run(PowScalarOp<PowKind::MinusTwo>{});
  } else {
    run(PowScalarOp<PowKind::General>{});
  }
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
  LOOM_DISPATCH_ALL_TYPES(dt, "pow", [&] {
    using T = scalar_t;
    if constexpr (!std::is_same_v<T, bool>) {
      using M = compute_t<T>;
      it.for_each([](char** d, const int64_t* s, int64_t n) {
        binary_loop<T, T, T>(d, s, n, [](T a, T b) {
          if constexpr (std::is_integral_v<T>) {
            return int_pow(a, static_cast<int64_t>(b));
          } else {
            return T(std::pow(static_cast<M>(a), static_cast<M>(b)));
          }
        });
      });
    }
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

// min(max(x, lo), hi), so lo > hi gives hi everywhere (as PyTorch); NaN inputs stay NaN. A missing
// bound is the type's extreme value (infinity for floats).
template <class M>
struct ClampOp {
  static constexpr const char* name = "clamp";
  static constexpr Dtypes dtypes = Dtypes::Keep;
  M lo, hi;
  LOOM_ALWAYS_INLINE M operator()(M x) const {
    M y = x < lo ? lo : x;
    y = y > hi ? hi : y;
    if constexpr (std::is_floating_point_v<M>) y = x != x ? x : y;
    return y;
  }
};

Tensor clamp_impl(const Tensor& out, const Tensor& self, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max, bool inplace) {
  check_defined(self, "clamp", "self");
  LOOM_CHECK(min.has_value() || max.has_value(),
             "[clamp] at least one of 'min' or 'max' must not be None");
  TensorIteratorConfig cfg;
  cfg.op = "clamp";
  cfg.outputs = {out};
  // The wrapped bounds take part in promotion only (clamp(int, 0.5) is float); the loop reads them
  // from the Scalars.
  cfg.inputs = {self};
  if (min) cfg.inputs.push_back(wrap_scalar(*min));
  if (max) cfg.inputs.push_back(wrap_scalar(*max));
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[clamp] is not implemented for bool");
  LOOM_DISPATCH_ALL_TYPES(dt, "clamp", [&] {
    using T = scalar_t;
    if constexpr (!std::is_same_v<T, bool>) {
      using M = compute_t<T>;
      using L = std::numeric_limits<M>;
      const M lowest = L::has_infinity ? -L::infinity() : L::lowest();
      const M highest = L::has_infinity ? L::infinity() : L::max();
      // Integer bounds saturate to the dtype's range: clamp(int8, max=1000) changes nothing.
      auto bound = [](const Scalar& b) -> M {
        if constexpr (std::is_integral_v<M>) {
          return static_cast<M>(std::clamp<int64_t>(b.to_int(), L::lowest(), L::max()));
        } else {
          return b.to<M>();
        }
      };
      ClampOp<M> op;
      op.lo = min ? bound(*min) : lowest;
      op.hi = max ? bound(*max) : highest;
      it.for_each([&op](char** d, const int64_t* s, int64_t n) { map_strided<T, T>(op, d, s, n); });
    }
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

LOOM_LIBRARY_IMPL(loom, CPU, m) {
#define LOOM_UNARY_CPU(name, Op)  \
  m.impl(#name, functional<Op>);  \
  m.impl(#name "_", inplace<Op>); \
  m.impl(#name ".out", out_variant<Op>);
  LOOM_UNARY_CPU(neg, NegOp)
  LOOM_UNARY_CPU(abs, AbsOp)
  LOOM_UNARY_CPU(exp, ExpOp)
  LOOM_UNARY_CPU(log, LogOp)
  LOOM_UNARY_CPU(log1p, Log1pOp)
  LOOM_UNARY_CPU(sqrt, SqrtOp)
  LOOM_UNARY_CPU(rsqrt, RsqrtOp)
  LOOM_UNARY_CPU(sin, SinOp)
  LOOM_UNARY_CPU(cos, CosOp)
  LOOM_UNARY_CPU(tanh, TanhOp)
  LOOM_UNARY_CPU(sigmoid, SigmoidOp)
  LOOM_UNARY_CPU(relu, ReluOp)
  LOOM_UNARY_CPU(silu, SiluOp)
  LOOM_UNARY_CPU(erf, ErfOp)
  LOOM_UNARY_CPU(sign, SignOp)
  LOOM_UNARY_CPU(reciprocal, ReciprocalOp)
  LOOM_UNARY_CPU(logical_not, LogicalNotOp)
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
#undef LOOM_UNARY_CPU
}

}  // namespace loom
