// The math of generated kernels: the targets' preludes and, per operator, the pointwise
// expression and the derivative the fusion pass writes (see compiler/kernel_math.h).
#include "compiler/kernel_math.h"

#include <cstdio>

#include "loom/ivalue.h"

namespace loom::compiler {

const char* ctype(DType d) {
  return d == kFloat64 ? "double" : "float";
}

// Note [Kernel math]: the lm_* functions of each target compute as that target's eager kernels do
// (CPU: cpu/unary_kernels.cpp over unary_math.h; CUDA: cuda/unary_kernels.cu over device_math.cuh),
// for float and for double, so that a fused kernel computes what the eager operators did.
const char kCpuMath[] = R"LM(
#include <cmath>
#include <cstdint>
#define LM_INF __builtin_inf()
#define LM_NAN __builtin_nan("")
#define LM_F(name, f32, f64)                                         \
  static LOOM_ALWAYS_INLINE float lm_##name(float x) { return f32; } \
  static LOOM_ALWAYS_INLINE double lm_##name(double x) { return f64; }
LM_F(abs, std::fabs(x), std::fabs(x))
LM_F(sqrt, std::sqrt(x), std::sqrt(x))
LM_F(sin, std::sin(x), std::sin(x))
LM_F(cos, std::cos(x), std::cos(x))
LM_F(exp, loom::fastmath::exp_f32(x), std::exp(x))
LM_F(log, loom::fastmath::log_f32(x), std::log(x))
LM_F(log1p, loom::fastmath::log1p_f32(x), std::log1p(x))
LM_F(tanh, loom::fastmath::tanh_f32(x), std::tanh(x))
LM_F(erf, loom::fastmath::erf_f32(x), std::erf(x))
LM_F(sigmoid, loom::fastmath::sigmoid_f32(x), 1.0 / (1.0 + std::exp(-x)))
LM_F(silu, x * loom::fastmath::sigmoid_f32(x), x / (1.0 + std::exp(-x)))
LM_F(gelu, 0.5f * x * (1.0f + loom::fastmath::erf_f32(x * 0.70710678118654752440f)),
     0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)))
LM_F(gelu_tanh,
     0.5f * x * (1.0f + loom::fastmath::tanh_f32(0.79788456080286535588f * (x + 0.044715f * x * x * x))),
     0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))))
template <class T>
static LOOM_ALWAYS_INLINE T lm_maximum(T a, T b) {
  return (a != a || b != b) ? T(LM_NAN) : (a > b ? a : b);
}
template <class T>
static LOOM_ALWAYS_INLINE T lm_minimum(T a, T b) {
  return (a != a || b != b) ? T(LM_NAN) : (a < b ? a : b);
}
)LM";

const char kCudaMath[] = R"LM(
#define LM_INF __longlong_as_double(0x7ff0000000000000LL)
#define LM_NAN __longlong_as_double(0x7ff8000000000000LL)
#define LM_D static __device__ __forceinline__
#define LM_F(name, f32, f64)                \
  LM_D float lm_##name(float x) { return f32; } \
  LM_D double lm_##name(double x) { return f64; }
LM_F(abs, fabsf(x), fabs(x))
LM_F(sqrt, sqrtf(x), sqrt(x))
LM_F(sin, sinf(x), sin(x))
LM_F(cos, cosf(x), cos(x))
LM_F(exp, expf(x), exp(x))
LM_F(log, logf(x), log(x))
LM_F(log1p, log1pf(x), log1p(x))
LM_F(tanh, tanhf(x), tanh(x))
LM_F(erf, erff(x), erf(x))
LM_D float lm_sigmoid(float x) {
  const float e = expf(-fabsf(x));
  const float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}
LM_D double lm_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
LM_D float lm_silu(float x) { return x * lm_sigmoid(x); }
LM_D double lm_silu(double x) { return x / (1.0 + exp(-x)); }
template <class T>
LM_D T lm_gelu(T x) { return T(0.5) * x * (T(1) + lm_erf(x * T(0.70710678118654752440))); }
template <class T>
LM_D T lm_gelu_tanh(T x) {
  const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + lm_tanh(inner));
}
template <class T>
LM_D T lm_maximum(T a, T b) { return (a != a || b != b) ? T(LM_NAN) : (a > b ? a : b); }
template <class T>
LM_D T lm_minimum(T a, T b) { return (a != a || b != b) ? T(LM_NAN) : (a < b ? a : b); }
)LM";

// A host constant as a literal of type T, exact (hexadecimal floating point). The preludes define
// LM_INF and LM_NAN for both targets.
std::string literal(double v, DType d) {
  const std::string T = ctype(d);
  if (v != v) return T + "(LM_NAN)";
  if (v == __builtin_inf()) return T + "(LM_INF)";
  if (v == -__builtin_inf()) return "(-" + T + "(LM_INF))";
  char buf[64];
  if (d == kFloat64) {
    std::snprintf(buf, sizeof(buf), "(%a)", v);
  } else {
    std::snprintf(buf, sizeof(buf), "(%af)", static_cast<double>(static_cast<float>(v)));
  }
  return buf;
}

// The expression of a pointwise node over its tensor operands' expressions, or "" when this file
// cannot write it. `t` is the operands in argument order. Math goes through the lm_* functions,
// which each target's prelude defines for float and double as its eager kernels compute them.
std::string pointwise_expr(const Node& n, const std::vector<std::string>& t, DType d) {
  const std::string op = n.op.schema().full_name();
  const std::string T = ctype(d);
  auto scalar_arg = [&](size_t i, double* out) {
    if (i >= n.args.size() || n.args[i].kind != Arg::Kind::Constant) return false;
    const IValue& v = n.args[i].constant;
    if (v.is_none()) return false;
    *out = v.to_scalar().to<double>();
    return true;
  };
  const size_t nt = t.size();
  if (nt == 2 && (op == "loom::add" || op == "loom::sub")) {
    double alpha = 1;
    if (n.args.size() > 2 && !scalar_arg(2, &alpha)) return "";
    return "(" + t[0] + (op == "loom::add" ? " + " : " - ") + literal(alpha, d) + " * " + t[1] +
           ")";
  }
  if (nt == 2 && op == "loom::mul") return "(" + t[0] + " * " + t[1] + ")";
  // relu's backward (ThresholdBackwardOp): a NaN input passes the gradient through.
  if (nt == 2 && op == "loom::threshold_backward") {
    double threshold = 0;
    if (!scalar_arg(2, &threshold)) return "";
    return "(" + t[1] + " <= " + literal(threshold, d) + " ? " + T + "(0) : " + t[0] + ")";
  }
  if (nt == 2 && op == "loom::div") return "(" + t[0] + " / " + t[1] + ")";
  if (nt == 2 && (op == "loom::maximum" || op == "loom::minimum")) {
    return (op == "loom::maximum" ? "lm_maximum(" : "lm_minimum(") + t[0] + ", " + t[1] + ")";
  }
  if (nt != 1) return "";
  const std::string& x = t[0];
  if (op == "loom::neg") return "(-" + x + ")";
  if (op == "loom::relu") return "(" + x + " < " + T + "(0) ? " + T + "(0) : " + x + ")";
  if (op == "loom::reciprocal") return "(" + T + "(1) / " + x + ")";
  if (op == "loom::rsqrt") return "(" + T + "(1) / lm_sqrt(" + x + "))";
  for (const char* f :
       {"abs", "sqrt", "sin", "cos", "exp", "log", "log1p", "tanh", "erf", "sigmoid", "silu"}) {
    if (op == std::string("loom::") + f) return std::string("lm_") + f + "(" + x + ")";
  }
  if (op == "loom::gelu") {
    if (n.args.size() < 2 || n.args[1].kind != Arg::Kind::Constant ||
        !n.args[1].constant.is_string())
      return "";
    const std::string& approx = n.args[1].constant.to_string();
    if (approx == "none") return "lm_gelu(" + x + ")";
    if (approx == "tanh") return "lm_gelu_tanh(" + x + ")";
    return "";
  }
  if (op == "loom::pow.Tensor_Scalar") {
    double e = 0;
    if (!scalar_arg(1, &e) || e != 2) return "";
    return "(" + x + " * " + x + ")";
  }
  if (op == "loom::clamp") {
    double lo = -__builtin_inf(), hi = __builtin_inf();
    const bool has_lo = scalar_arg(1, &lo), has_hi = scalar_arg(2, &hi);
    if (!has_lo && !has_hi) return "";
    // As the eager ClampOp: min(max(x, lo), hi), NaN kept.
    const std::string y1 =
        "(" + x + " < " + literal(lo, d) + " ? " + literal(lo, d) + " : " + x + ")";
    const std::string y2 =
        "(" + y1 + " > " + literal(hi, d) + " ? " + literal(hi, d) + " : " + y1 + ")";
    return "(" + x + " != " + x + " ? " + x + " : " + y2 + ")";
  }
  return "";
}

// Note [Fused backward]: the statements that add a node's contribution to its operands'
// gradients, in a reverse sweep over the group: `g` is the gradient of the node's result `y`, `t`
// its operands' expressions and `gt` their gradient accumulators ("" where none is needed). The
// formulas are the eager derivatives' (src/ops/*derivatives*.cpp, binary.cpp), over values the
// backward kernel recomputes from the group's inputs. False when the operator has none here.
bool derivative_code(const Node& n, const std::vector<std::string>& t,
                     const std::vector<std::string>& gt, const std::string& y, const std::string& g,
                     DType d, std::string* code) {
  const std::string op = n.op.schema().full_name();
  const std::string T = ctype(d);
  const std::string one = T + "(1)", zero = T + "(0)";
  auto lit = [&](double v) { return literal(v, d); };
  auto scalar_arg = [&](size_t i, double* out) {
    if (i >= n.args.size() || n.args[i].kind != Arg::Kind::Constant) return false;
    const IValue& v = n.args[i].constant;
    if (v.is_none()) return false;
    *out = v.to_scalar().to<double>();
    return true;
  };
  std::string c;
  auto acc = [&](size_t i, const std::string& e) {
    if (i < gt.size() && !gt[i].empty()) c += "      " + gt[i] + " += " + e + ";\n";
  };
  const size_t nt = t.size();
  if (nt == 2 && (op == "loom::add" || op == "loom::sub")) {
    double alpha = 1;
    if (n.args.size() > 2) scalar_arg(2, &alpha);
    acc(0, g);
    // Appended piece by piece: GCC 12 reports a false -Wrestrict on "(" + std::string.
    std::string e = "(";
    ((e += lit(op == "loom::add" ? alpha : -alpha)) += " * ") += g;
    acc(1, e + ")");
  } else if (nt == 2 && op == "loom::mul") {
    acc(0, "(" + g + " * " + t[1] + ")");
    acc(1, "(" + g + " * " + t[0] + ")");
  } else if (nt == 2 && op == "loom::div") {
    acc(0, "(" + g + " / " + t[1] + ")");
    acc(1, "(-((" + g + " * " + t[0] + ") / (" + t[1] + " * " + t[1] + ")))");
  } else if (nt == 2 && (op == "loom::maximum" || op == "loom::minimum")) {
    // The winner takes the gradient, a tie splits it (and a NaN sends it to the second).
    const std::string wa = "((" + t[0] + (op == "loom::maximum" ? " > " : " < ") + t[1] + " ? " +
                           one + " : " + zero + ") + (" + t[0] + " == " + t[1] + " ? " + T +
                           "(0.5) : " + zero + "))";
    acc(0, "(" + g + " * " + wa + ")");
    acc(1, "(" + g + " * (" + one + " - " + wa + "))");
  } else if (nt != 1) {
    return false;
  } else {
    const std::string& x = t[0];
    if (op == "loom::neg") {
      acc(0, "(-" + g + ")");
    } else if (op == "loom::relu") {
      acc(0, "(" + y + " > " + zero + " ? " + g + " : " + zero + ")");
    } else if (op == "loom::reciprocal") {
      acc(0, "(-(" + g + " * (" + y + " * " + y + ")))");
    } else if (op == "loom::rsqrt") {
      acc(0, "(" + g + " * ((" + y + " * (" + y + " * " + y + ")) * " + lit(-0.5) + "))");
    } else if (op == "loom::abs") {
      acc(0, "(" + g + " * (" + x + " > " + zero + " ? " + one + " : (" + x + " < " + zero +
                 " ? -" + one + " : " + x + " * " + zero + ")))");
    } else if (op == "loom::sqrt") {
      acc(0, "(" + g + " / (" + y + " * " + lit(2) + "))");
    } else if (op == "loom::sin") {
      acc(0, "(" + g + " * lm_cos(" + x + "))");
    } else if (op == "loom::cos") {
      acc(0, "(-(" + g + " * lm_sin(" + x + ")))");
    } else if (op == "loom::exp") {
      acc(0, "(" + g + " * " + y + ")");
    } else if (op == "loom::log") {
      acc(0, "(" + g + " / " + x + ")");
    } else if (op == "loom::log1p") {
      acc(0, "(" + g + " / (" + x + " + " + one + "))");
    } else if (op == "loom::tanh") {
      acc(0, "(" + g + " * (" + one + " - " + y + " * " + y + "))");
    } else if (op == "loom::sigmoid") {
      acc(0, "(" + g + " * ((" + one + " - " + y + ") * " + y + "))");
    } else if (op == "loom::silu") {
      c += "      { const " + T + " sg = lm_sigmoid(" + x + ");\n";
      acc(0, "(" + g + " * (sg * (" + one + " + " + x + " * (" + one + " - sg))))");
      c += "      }\n";
    } else if (op == "loom::erf") {
      acc(0,
          "(" + g + " * (lm_exp(-(" + x + " * " + x + ")) * " + lit(1.12837916709551257390) + "))");
    } else if (op == "loom::gelu") {
      if (n.args.size() < 2 || !n.args[1].constant.is_string()) return false;
      const std::string& approx = n.args[1].constant.to_string();
      if (approx == "none") {
        const std::string cdf = "(" + lit(0.5) + " * (" + one + " + lm_erf(" + x + " * " +
                                lit(0.70710678118654752440) + ")))";
        const std::string pdf = "(lm_exp(" + lit(-0.5) + " * " + x + " * " + x + ") * " +
                                lit(0.39894228040143267794) + ")";
        acc(0, "(" + g + " * (" + cdf + " + " + x + " * " + pdf + "))");
      } else if (approx == "tanh") {
        c += "      { const " + T + " x2 = " + x + " * " + x + ";\n        const " + T +
             " th = lm_tanh((" + x + " + x2 * " + x + " * " + lit(0.044715) + ") * " +
             lit(0.79788456080286535588) + ");\n        const " + T + " du = (x2 * " +
             lit(3 * 0.044715) + " + " + one + ") * " + lit(0.79788456080286535588) + ";\n";
        acc(0, "(" + g + " * ((th + " + one + ") * " + lit(0.5) + " + " + x + " * (" + one +
                   " - th * th) * du * " + lit(0.5) + "))");
        c += "      }\n";
      } else {
        return false;
      }
    } else if (op == "loom::pow.Tensor_Scalar") {
      acc(0, "(" + g + " * (" + x + " * " + lit(2) + "))");  // fused only for the exponent 2
    } else if (op == "loom::clamp") {
      double lo = 0, hi = 0;
      const bool has_lo = scalar_arg(1, &lo), has_hi = scalar_arg(2, &hi);
      std::string keep = "(true";
      if (has_lo) keep += " && " + x + " >= " + lit(lo);
      if (has_hi) keep += " && " + x + " <= " + lit(hi);
      acc(0, "(" + keep + ") ? " + g + " : " + zero + ")");
    } else {
      return false;
    }
  }
  *code = c;
  return true;
}

}  // namespace loom::compiler
