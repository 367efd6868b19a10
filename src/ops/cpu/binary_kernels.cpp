// CPU kernels of the binary family (src/ops/binary.cpp holds the schemas, the shape function and
// the derivatives): loops through TensorIterator, with fast paths for contiguous operands of one
// shape and streaming stores for large float32 outputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "loom/parallel.h"
#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/tensor_iterator.h"

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
#define LOOM_CMP_OP(Name, str, expr)                                \
  struct Name {                                                     \
    static constexpr const char* name = str;                        \
    static constexpr bool int_to_float = false, bool_output = true; \
    template <class T>                                              \
    static bool apply(T a, T b, T) {                                \
      return expr;                                                  \
    }                                                               \
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
// than the caches we compute a block into an L1-resident buffer with the vectorised loop and copy
// it out with non-temporal stores, which skip that read.
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
                  "number (got ",
                  alpha, ")");
}

// out may be undefined (functional), self (in-place) or a caller's tensor (out=).
template <class Op>
Tensor binary_impl(const Tensor& out, const Tensor& self, const Tensor& other, const Scalar& alpha,
                   bool inplace) {
  // self and other are defined: the dispatcher rejects undefined arguments (Note [undefined
  // tensors]). Large float32 operands of one shape: streaming stores (Note [Streaming stores for
  // large outputs]), into a fresh output, self (in place) or a matching contiguous out=.
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
      streaming_binary_f32<Op>(
          static_cast<float*>(result.data_ptr()), static_cast<const float*>(self.data_ptr()),
          static_cast<const float*>(other.data_ptr()), alpha.to<float>(), self.numel());
      if (out.defined()) result.storage()->bump_version();
      return result;
    }
  }
  // Fast path: same dtype, same shape, both contiguous, a fresh output. Not for two wrapped
  // numbers: their result takes the default dtype (TensorIterator's promotion), not their own.
  const bool both_wrapped = self.impl()->is_wrapped_number() && other.impl()->is_wrapped_number();
  if (!out.defined() && !both_wrapped && self.dtype() == other.dtype() && self.is_cpu() &&
      other.is_cpu() && self.is_contiguous() && other.is_contiguous() &&
      self.sizes() == other.sizes() && !(Op::int_to_float && !is_floating(self.dtype())) &&
      !(std::is_same_v<Op, SubOp> && self.dtype() == kBool)) {
    const DType dt = self.dtype();
    Tensor result = empty_tensor(self.sizes(), Op::bool_output ? kBool : dt, kCPU);
    const int64_t n = self.numel();
    // As the general path: integral inputs refuse a floating alpha.
    if (!Op::bool_output) check_alpha(Op::name, dt, alpha);
    if (dt == kFloat32 && !Op::bool_output) {
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
  if (out.defined())
    cfg.outputs = {out};
  else
    cfg.outputs = {Tensor()};
  cfg.inputs = {self, other};
  cfg.int_to_float = Op::int_to_float;
  cfg.is_inplace = inplace;
  if (Op::bool_output) cfg.output_dtype = kBool;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(!(std::is_same_v<Op, SubOp> && dt == kBool),
                  "[sub] subtraction with two bool "
                  "tensors is not supported; use logical_xor instead");
  if (!Op::bool_output) check_alpha(Op::name, dt, alpha);
  LOOM_DISPATCH_ALL_TYPES(dt, Op::name, [&] {
    if constexpr (Op::bool_output) {
      run_loop<Op, scalar_t, bool>(it, alpha);
    } else {
      run_loop<Op, scalar_t, scalar_t>(it, alpha);
    }
  });
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
  const DType cdt = it.operand(1).dtype();
  LOOM_DISPATCH_ALL_TYPES(it.common_dtype(), "where", [&] {
    auto run = [&](auto cond_tag) {
      using C = decltype(cond_tag);
      it.for_each([](char** d, const int64_t* s, int64_t n) {
        ternary_loop<scalar_t, C, scalar_t, scalar_t>(
            d, s, n, [](C c, scalar_t a, scalar_t b) { return c ? a : b; });
      });
    };
    if (cdt == kBool)
      run(bool{});
    else
      run(uint8_t{});
  });
  return it.output(0);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("add", functional_alpha<AddOp>);
  m.impl("add_", inplace_alpha<AddOp>);
  m.impl("add.out", out_alpha<AddOp>);
  m.impl("sub", functional_alpha<SubOp>);
  m.impl("sub_", inplace_alpha<SubOp>);
  m.impl("sub.out", out_alpha<SubOp>);
#define LOOM_BINARY_CPU(name, Op) \
  m.impl(#name, functional<Op>);  \
  m.impl(#name "_", inplace<Op>); \
  m.impl(#name ".out", out_variant<Op>);
  LOOM_BINARY_CPU(mul, MulOp)
  LOOM_BINARY_CPU(div, DivOp)
  LOOM_BINARY_CPU(maximum, MaximumOp)
  LOOM_BINARY_CPU(minimum, MinimumOp)
  LOOM_BINARY_CPU(eq, EqOp)
  LOOM_BINARY_CPU(ne, NeOp)
  LOOM_BINARY_CPU(lt, LtOp)
  LOOM_BINARY_CPU(le, LeOp)
  LOOM_BINARY_CPU(gt, GtOp)
  LOOM_BINARY_CPU(ge, GeOp)
  LOOM_BINARY_CPU(logical_and, LogicalAndOp)
  LOOM_BINARY_CPU(logical_or, LogicalOrOp)
  LOOM_BINARY_CPU(logical_xor, LogicalXorOp)
#undef LOOM_BINARY_CPU
  m.impl("where", where_kernel);
}

}  // namespace loom
