// Pointwise binary operators: arithmetic, maximum/minimum, comparisons, logical ops, where.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "loops.h"
#include "op_call.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

// Each op: `apply(a, b, alpha)` on the compute type; flags say how dtypes work.
struct AddOp {
  static constexpr const char* name = "add";
  static constexpr bool int_to_float = false, bool_output = false;
  template <class T>
  static T apply(T a, T b, T alpha) {
    if constexpr (std::is_same_v<T, bool>) {
      return a || (b && alpha);
    } else {
      return a + alpha * b;
    }
  }
};
struct SubOp {
  static constexpr const char* name = "sub";
  static constexpr bool int_to_float = false, bool_output = false;
  template <class T>
  static T apply(T a, T b, T alpha) {
    return a - alpha * b;
  }
};
struct MulOp {
  static constexpr const char* name = "mul";
  static constexpr bool int_to_float = false, bool_output = false;
  template <class T>
  static T apply(T a, T b, T) {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else {
      return a * b;
    }
  }
};
struct DivOp {
  static constexpr const char* name = "div";
  static constexpr bool int_to_float = true, bool_output = false;
  template <class T>
  static T apply(T a, T b, T) {
    return a / b;
  }
};
struct MaximumOp {
  static constexpr const char* name = "maximum";
  static constexpr bool int_to_float = false, bool_output = false;
  template <class T>
  static T apply(T a, T b, T) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    }
    return a > b ? a : b;
  }
};
struct MinimumOp {
  static constexpr const char* name = "minimum";
  static constexpr bool int_to_float = false, bool_output = false;
  template <class T>
  static T apply(T a, T b, T) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    }
    return a < b ? a : b;
  }
};
#define LOOM_CMP_OP(Name, str, expr)                         \
  struct Name {                                              \
    static constexpr const char* name = str;                 \
    static constexpr bool int_to_float = false, bool_output = true; \
    template <class T>                                       \
    static bool apply(T a, T b, T) {                         \
      return expr;                                           \
    }                                                        \
  };
LOOM_CMP_OP(EqOp, "eq", a == b)
LOOM_CMP_OP(NeOp, "ne", a != b)
LOOM_CMP_OP(LtOp, "lt", a < b)
LOOM_CMP_OP(LeOp, "le", a <= b)
LOOM_CMP_OP(GtOp, "gt", a > b)
LOOM_CMP_OP(GeOp, "ge", a >= b)
LOOM_CMP_OP(LogicalAndOp, "logical_and", (a != T(0)) && (b != T(0)))
LOOM_CMP_OP(LogicalOrOp, "logical_or", (a != T(0)) || (b != T(0)))
LOOM_CMP_OP(LogicalXorOp, "logical_xor", (a != T(0)) != (b != T(0)))
#undef LOOM_CMP_OP


// Note [Streaming stores for large outputs]
// A large elementwise kernel is bound by memory traffic. A normal store first reads the output's
// cache line (read-for-ownership), so `out = a + b` moves 4 streams, not 3. For outputs much larger
// than the caches we compute a block into an L1-resident buffer with the vectorised loop and copy it
// out with non-temporal stores, which skip that read.
constexpr int64_t kStreamingMin = int64_t{1} << 20;  // elements (4 MiB of float32)

inline void stream_copy(float* dst, const float* src, int64_t n) {
#if defined(__AVX512F__)
  int64_t i = 0;
  while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0) {
    dst[i] = src[i];
    ++i;
  }
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
#endif
}

template <class Op>
void streaming_binary_f32(float* o, const float* x, const float* y, float a, int64_t n) {
  parallel_for(0, n, int64_t{1} << 16, [&](int64_t b, int64_t e) {
    alignas(64) float buf[2048];
    for (int64_t i = b; i < e; i += 2048) {
      const int64_t m = std::min<int64_t>(2048, e - i);
      const float* __restrict xi = x + i;
      const float* __restrict yi = y + i;
      for (int64_t j = 0; j < m; ++j) buf[j] = Op::template apply<float>(xi[j], yi[j], a);
      stream_copy(o + i, buf, m);
    }
#if defined(__AVX512F__)
    _mm_sfence();  // make this thread's streamed stores visible before the pool reports done
#endif
  });
}

// True when [a, a + an) and [b, b + bn) overlap without being the same range.
inline bool partial_overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa != pb && pa < pb + bn && pb < pa + an;
}

template <class Op, class T, class Out>
void run_loop(TensorIterator& it, const Scalar& alpha) {
  using M = opmath_t<T>;
  const M a = alpha.to<M>();
  it.for_each([a](char** d, const int64_t* s, int64_t n) {
    binary_loop<Out, T, T>(d, s, n, [a](T x, T y) {
      if constexpr (std::is_same_v<Out, bool>) {
        return Op::template apply<M>(static_cast<M>(x), static_cast<M>(y), a);
      } else {
        return Out(Op::template apply<M>(static_cast<M>(x), static_cast<M>(y), a));
      }
    });
  });
}

void check_alpha(const char* op, DType dt, const Scalar& alpha) {
  LOOM_CHECK_TYPE(is_floating(dt) || !alpha.is_floating(), "[", op,
                  "] for integral input tensors, argument alpha must not be a floating point "
                  "number (got ", alpha, ")");
}

// out may be undefined (functional), self (in-place) or a caller's tensor (out=).
template <class Op>
Tensor binary_impl(const Tensor& out, const Tensor& self, const Tensor& other, const Scalar& alpha,
                   bool inplace) {
  // self and other are defined: the dispatcher rejects undefined arguments (Note [undefined tensors]).
  // Large float32 operands of one shape: streaming stores (Note [Streaming stores for large
  // outputs]), into a fresh output, self (in place) or a matching contiguous out=.
  if (!Op::bool_output && self.dtype() == kFloat32 && other.dtype() == kFloat32 && self.is_cpu() &&
      other.is_cpu() && self.is_contiguous() && other.is_contiguous() &&
      self.sizes() == other.sizes() && self.numel() >= kStreamingMin &&
      (!out.defined() || (out.dtype() == kFloat32 && out.is_cpu() && out.is_contiguous() &&
                          out.sizes() == self.sizes()))) {
    const size_t bytes = self.nbytes();
    if (!out.defined() || (!partial_overlap(out.data_ptr(), bytes, self.data_ptr(), bytes) &&
                           !partial_overlap(out.data_ptr(), bytes, other.data_ptr(), bytes))) {
      check_alpha(Op::name, kFloat32, alpha);
      Tensor result = out.defined() ? out : empty_tensor(self.sizes(), kFloat32, kCPU);
      streaming_binary_f32<Op>(static_cast<float*>(result.data_ptr()),
                               static_cast<const float*>(self.data_ptr()),
                               static_cast<const float*>(other.data_ptr()), alpha.to<float>(),
                               self.numel());
      if (out.defined()) result.storage()->bump_version();
      return result;
    }
  }
  // Fast path: same dtype, same shape, both contiguous, a fresh output. Not for two wrapped numbers:
  // their result takes the default dtype (TensorIterator's promotion), not their own.
  const bool both_wrapped = self.impl()->is_wrapped_number() && other.impl()->is_wrapped_number();
  if (!out.defined() && !both_wrapped && self.dtype() == other.dtype() && self.is_cpu() && other.is_cpu() &&
      self.is_contiguous() && other.is_contiguous() && self.sizes() == other.sizes() &&
      !(Op::int_to_float && !is_floating(self.dtype())) &&
      !(std::is_same_v<Op, SubOp> && self.dtype() == kBool)) {
    const DType dt = self.dtype();
    Tensor result = empty_tensor(self.sizes(), Op::bool_output ? kBool : dt, kCPU);
    const int64_t n = self.numel();
    if (dt == kFloat32 && !Op::bool_output) {
      check_alpha(Op::name, dt, alpha);
      const float a = alpha.to<float>();
      const float* __restrict x = static_cast<const float*>(self.data_ptr());
      const float* __restrict y = static_cast<const float*>(other.data_ptr());
      float* __restrict o = static_cast<float*>(result.data_ptr());
      if (n <= 4096) {
        for (int64_t i = 0; i < n; ++i) o[i] = Op::template apply<float>(x[i], y[i], a);
        return result;
      }
    }
    TensorIteratorConfig cfg;
    cfg.op = Op::name;
    cfg.outputs = {result};
    cfg.inputs = {self, other};
    if (Op::bool_output) cfg.output_dtype = kBool;
    TensorIterator it(std::move(cfg));
    LOOM_DISPATCH_ALL_TYPES(dt, Op::name, [&] {
      if constexpr (Op::bool_output) {
        run_loop<Op, scalar_t, bool>(it, alpha);
      } else {
        run_loop<Op, scalar_t, scalar_t>(it, alpha);
      }
    });
    return result;
  }
  TensorIteratorConfig cfg;
  cfg.op = Op::name;
  if (out.defined()) cfg.outputs = {out};
  else cfg.outputs = {Tensor()};
  cfg.inputs = {self, other};
  cfg.int_to_float = Op::int_to_float;
  cfg.is_inplace = inplace;
  if (Op::bool_output) cfg.output_dtype = kBool;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(!(std::is_same_v<Op, SubOp> && dt == kBool), "[sub] subtraction with two bool "
                  "tensors is not supported; use logical_xor instead");
  if (!Op::bool_output) check_alpha(Op::name, dt, alpha);
  if (!it.is_meta()) {
    LOOM_DISPATCH_ALL_TYPES(dt, Op::name, [&] {
      if constexpr (Op::bool_output) {
        run_loop<Op, scalar_t, bool>(it, alpha);
      } else {
        run_loop<Op, scalar_t, scalar_t>(it, alpha);
      }
    });
  }
  it.finish();
  return it.output(0);
}

template <class Op>
Tensor functional(const Tensor& self, const Tensor& other) {
  return binary_impl<Op>(Tensor(), self, other, 1, false);
}
template <class Op>
Tensor inplace(const Tensor& self, const Tensor& other) {
  return binary_impl<Op>(self, self, other, 1, true);
}
template <class Op>
Tensor out_variant(const Tensor& self, const Tensor& other, const Tensor& out) {
  return binary_impl<Op>(out, self, other, 1, false);
}
template <class Op>
Tensor functional_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return binary_impl<Op>(Tensor(), self, other, alpha, false);
}
template <class Op>
Tensor inplace_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return binary_impl<Op>(self, self, other, alpha, true);
}
template <class Op>
Tensor out_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha, const Tensor& out) {
  return binary_impl<Op>(out, self, other, alpha, false);
}

Tensor where_kernel(const Tensor& cond, const Tensor& self, const Tensor& other) {
  check_defined(cond, "where", "condition");
  LOOM_CHECK_TYPE(cond.dtype() == kBool || cond.dtype() == kUInt8,
                  "[where] expected condition to be a bool tensor but got ", cond.dtype());
  TensorIteratorConfig cfg;
  cfg.op = "where";
  cfg.outputs = {Tensor()};
  cfg.inputs = {cond, self, other};
  cfg.input_skips_promotion = {true, false, false};
  TensorIterator it(std::move(cfg));
  if (!it.is_meta()) {
    const DType cdt = it.operand(1).dtype();
    LOOM_DISPATCH_ALL_TYPES(it.common_dtype(), "where", [&] {
      auto run = [&](auto cond_tag) {
        using C = decltype(cond_tag);
        it.for_each([](char** d, const int64_t* s, int64_t n) {
          ternary_loop<scalar_t, C, scalar_t, scalar_t>(
              d, s, n, [](C c, scalar_t a, scalar_t b) { return c ? a : b; });
        });
      };
      if (cdt == kBool) run(bool{});
      else run(uint8_t{});
    });
  }
  return it.output(0);
}

}  // namespace

#define LOOM_BINARY_DEFS(name)                                                                 \
  m.def(#name "(Tensor self, Tensor other) -> Tensor");                                        \
  m.def(#name "_(Tensor(a!) self, Tensor other) -> Tensor(a!)");                               \
  m.def(#name ".out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
#define LOOM_BINARY_IMPLS(name, Op)                                                            \
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {                                \
    m.impl(#name, k, functional<Op>);                                                          \
    m.impl(#name "_", k, inplace<Op>);                                                         \
    m.impl(#name ".out", k, out_variant<Op>);                                                  \
  }

LOOM_LIBRARY_FRAGMENT(loom, m) {
  for (const char* name : {"add", "sub"}) {
    std::string n = name;
    m.def(n + "(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
    m.def(n + "_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
    m.def(n + ".out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  }
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {
    m.impl("add", k, functional_alpha<AddOp>);
    m.impl("add_", k, inplace_alpha<AddOp>);
    m.impl("add.out", k, out_alpha<AddOp>);
    m.impl("sub", k, functional_alpha<SubOp>);
    m.impl("sub_", k, inplace_alpha<SubOp>);
    m.impl("sub.out", k, out_alpha<SubOp>);
  }
  LOOM_BINARY_DEFS(mul)
  LOOM_BINARY_DEFS(div)
  LOOM_BINARY_DEFS(maximum)
  LOOM_BINARY_DEFS(minimum)
  LOOM_BINARY_DEFS(eq)
  LOOM_BINARY_DEFS(ne)
  LOOM_BINARY_DEFS(lt)
  LOOM_BINARY_DEFS(le)
  LOOM_BINARY_DEFS(gt)
  LOOM_BINARY_DEFS(ge)
  LOOM_BINARY_DEFS(logical_and)
  LOOM_BINARY_DEFS(logical_or)
  LOOM_BINARY_DEFS(logical_xor)
  LOOM_BINARY_IMPLS(mul, MulOp)
  LOOM_BINARY_IMPLS(div, DivOp)
  LOOM_BINARY_IMPLS(maximum, MaximumOp)
  LOOM_BINARY_IMPLS(minimum, MinimumOp)
  LOOM_BINARY_IMPLS(eq, EqOp)
  LOOM_BINARY_IMPLS(ne, NeOp)
  LOOM_BINARY_IMPLS(lt, LtOp)
  LOOM_BINARY_IMPLS(le, LeOp)
  LOOM_BINARY_IMPLS(gt, GtOp)
  LOOM_BINARY_IMPLS(ge, GeOp)
  LOOM_BINARY_IMPLS(logical_and, LogicalAndOp)
  LOOM_BINARY_IMPLS(logical_or, LogicalOrOp)
  LOOM_BINARY_IMPLS(logical_xor, LogicalXorOp)
  m.def("where(Tensor condition, Tensor self, Tensor other) -> Tensor");
  m.impl("where", DispatchKey::CPU, where_kernel);
  m.impl("where", DispatchKey::Meta, where_kernel);
}

using AlphaSig = Tensor(const Tensor&, const Tensor&, const Scalar&);
using AlphaOutSig = Tensor(const Tensor&, const Tensor&, const Scalar&, const Tensor&);

Tensor add(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  LOOM_CALL_OP("loom::add", AlphaSig, self, other, alpha);
}
Tensor add(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  return add(self, wrap_scalar(other), alpha);
}
const Tensor& add_(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  LOOM_CALL_INPLACE("loom::add_", AlphaSig, self, other, alpha);
}
const Tensor& add_(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  return add_(self, wrap_scalar(other), alpha);
}
const Tensor& add_out(const Tensor& out, const Tensor& self, const Tensor& other,
                      const Scalar& alpha) {
  LOOM_CALL_OUT("loom::add.out", AlphaOutSig, out, self, other, alpha);
}
Tensor sub(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  LOOM_CALL_OP("loom::sub", AlphaSig, self, other, alpha);
}
Tensor sub(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  return sub(self, wrap_scalar(other), alpha);
}
const Tensor& sub_(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  LOOM_CALL_INPLACE("loom::sub_", AlphaSig, self, other, alpha);
}
const Tensor& sub_(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  return sub_(self, wrap_scalar(other), alpha);
}
const Tensor& sub_out(const Tensor& out, const Tensor& self, const Tensor& other,
                      const Scalar& alpha) {
  LOOM_CALL_OUT("loom::sub.out", AlphaOutSig, out, self, other, alpha);
}

using BinSig = Tensor(const Tensor&, const Tensor&);
using BinOutSig = Tensor(const Tensor&, const Tensor&, const Tensor&);
#define LOOM_BINARY_WRAPPERS(name)                                                          \
  Tensor name(const Tensor& self, const Tensor& other) {                                    \
    LOOM_CALL_OP("loom::" #name, BinSig, self, other);                                      \
  }                                                                                         \
  Tensor name(const Tensor& self, const Scalar& other) {                                    \
    return name(self, wrap_scalar(other));                                                  \
  }                                                                                         \
  const Tensor& name##_(const Tensor& self, const Tensor& other) {                          \
    LOOM_CALL_INPLACE("loom::" #name "_", BinSig, self, other);                             \
  }                                                                                         \
  const Tensor& name##_(const Tensor& self, const Scalar& other) {                          \
    return name##_(self, wrap_scalar(other));                                               \
  }                                                                                         \
  const Tensor& name##_out(const Tensor& out, const Tensor& self, const Tensor& other) {    \
    LOOM_CALL_OUT("loom::" #name ".out", BinOutSig, out, self, other);                      \
  }
LOOM_BINARY_WRAPPERS(mul)
LOOM_BINARY_WRAPPERS(div)
LOOM_BINARY_WRAPPERS(maximum)
LOOM_BINARY_WRAPPERS(minimum)
LOOM_BINARY_WRAPPERS(eq)
LOOM_BINARY_WRAPPERS(ne)
LOOM_BINARY_WRAPPERS(lt)
LOOM_BINARY_WRAPPERS(le)
LOOM_BINARY_WRAPPERS(gt)
LOOM_BINARY_WRAPPERS(ge)
LOOM_BINARY_WRAPPERS(logical_and)
LOOM_BINARY_WRAPPERS(logical_or)
LOOM_BINARY_WRAPPERS(logical_xor)
#undef LOOM_BINARY_WRAPPERS

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other) {
  LOOM_CALL_OP("loom::where", Tensor(const Tensor&, const Tensor&, const Tensor&), condition, self,
               other);
}
Tensor where(const Tensor& condition, const Scalar& self, const Tensor& other) {
  return where(condition, wrap_scalar(self), other);
}
Tensor where(const Tensor& condition, const Tensor& self, const Scalar& other) {
  return where(condition, self, wrap_scalar(other));
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

// Gradient of a binary op's input that may be a wrapped number or an integer tensor: none.
bool wants(const BackwardContext& c, size_t slot) {
  return c.needs(slot) && is_floating(c.input_dtype(slot));
}

// d/dx max(x, y): the gradient goes to the larger input; ties split it in half (as PyTorch does).
GradList max_min_backward(const BackwardContext& c, bool is_max) {
  const Tensor& g = c.grad(0);
  Tensor a = c.input(0), b = c.input(1);
  Tensor win_a = is_max ? gt(a, b) : lt(a, b);
  Tensor tie = eq(a, b);
  Tensor wa = add(win_a.to(g.dtype()), mul(tie.to(g.dtype()), 0.5));
  GradList r(2);
  if (wants(c, 0)) r[0] = mul(g, wa);
  if (wants(c, 1)) r[1] = mul(g, sub(ones_like(wa), wa));
  return r;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  m.def("add", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    const Scalar alpha = c.scalar_arg(2);
    GradList r(2);
    if (wants(c, 0)) r[0] = g;
    if (wants(c, 1)) r[1] = alpha.to<double>() == 1.0 ? g : mul(g, alpha);
    return r;
  });
  m.def("sub", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (wants(c, 0)) r[0] = g;
    if (wants(c, 1)) r[1] = mul(g, -c.scalar_arg(2).to<double>());
    return r;
  });
  m.def("mul", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (wants(c, 0)) r[0] = mul(g, c.input(1));
    if (wants(c, 1)) r[1] = mul(g, c.input(0));
    return r;
  });
  m.def("div", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    Tensor b = c.input(1);
    GradList r(2);
    if (wants(c, 0)) r[0] = div(g, b);
    if (wants(c, 1)) r[1] = neg(div(mul(g, c.input(0)), mul(b, b)));
    return r;
  });
  m.def("maximum", autograd::saves({0, 1}),
        [](const BackwardContext& c) { return max_min_backward(c, true); });
  m.def("minimum", autograd::saves({0, 1}),
        [](const BackwardContext& c) { return max_min_backward(c, false); });
  m.def("where", autograd::saves({0}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    Tensor cond = c.input(0);
    GradList r(3);
    if (wants(c, 1)) r[1] = where(cond, g, zeros_like(g));
    if (wants(c, 2)) r[2] = where(cond, zeros_like(g), g);
    return r;
  });
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}) {
    m.nondifferentiable(op);
  }
}

}  // namespace loom
