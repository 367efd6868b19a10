// CUDA kernels of the binary family: add, sub, mul, div, maximum, minimum, the comparisons and
// logical ops (functional, in place, out=), where and masked_fill. The TensorIterator promotes,
// broadcasts and checks as the CPU kernels' general path does (cpu/binary_kernels.cpp); CPU 0-dim
// operands (C++ numbers, host scalars) reach the loop as kernel parameters (make_iter_args).
#include <cstring>

#include "ops/cuda/binary_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::BinaryOp;
using cuda_ops::CompareOp;

const char* name_of(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "add";
    case BinaryOp::Sub:
      return "sub";
    case BinaryOp::Mul:
      return "mul";
    case BinaryOp::Div:
      return "div";
    case BinaryOp::Maximum:
      return "maximum";
    case BinaryOp::Minimum:
      return "minimum";
  }
  return "binary";
}

const char* name_of(CompareOp op) {
  switch (op) {
    case CompareOp::Eq:
      return "eq";
    case CompareOp::Ne:
      return "ne";
    case CompareOp::Lt:
      return "lt";
    case CompareOp::Le:
      return "le";
    case CompareOp::Gt:
      return "gt";
    case CompareOp::Ge:
      return "ge";
    case CompareOp::LogicalAnd:
      return "logical_and";
    case CompareOp::LogicalOr:
      return "logical_or";
    case CompareOp::LogicalXor:
      return "logical_xor";
  }
  return "compare";
}

// The bits of s converted to T (a storage or compute type), for a kernel parameter.
template <class T>
uint64_t bits_of(const Scalar& s) {
  const T v = s.to<T>();
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

void check_alpha(const char* op, DType dt, const Scalar& alpha) {
  LOOM_CHECK_TYPE(is_floating(dt) || !alpha.is_floating(), "[", op,
                  "] for integral input tensors, argument alpha must not be a floating point "
                  "number (got ",
                  alpha, ")");
}

// out may be undefined (functional), self (in-place) or a caller's tensor (out=).
Tensor binary_impl(BinaryOp op, const Tensor& out, const Tensor& self, const Tensor& other,
                   const Scalar& alpha, bool inplace) {
  const char* name = name_of(op);
  TensorIteratorConfig cfg;
  cfg.op = name;
  cfg.outputs = {out};
  cfg.inputs = {self, other};
  cfg.int_to_float = op == BinaryOp::Div;
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  const DType dt = it.common_dtype();
  LOOM_CHECK_TYPE(!(op == BinaryOp::Sub && dt == kBool),
                  "[sub] subtraction with two bool "
                  "tensors is not supported; use logical_xor instead");
  check_alpha(name, dt, alpha);
  uint64_t alpha_bits = 0;
  LOOM_DISPATCH_ALL_TYPES(dt, name, [&] { alpha_bits = bits_of<opmath_t<scalar_t>>(alpha); });
  cuda_ops::launch_iter(it, name, [&](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_binary(op, a, alpha_bits, s);
  });
  it.finish();
  return it.output(0);
}

Tensor compare_impl(CompareOp op, const Tensor& out, const Tensor& self, const Tensor& other,
                    bool inplace) {
  const char* name = name_of(op);
  TensorIteratorConfig cfg;
  cfg.op = name;
  cfg.outputs = {out};
  cfg.inputs = {self, other};
  cfg.is_inplace = inplace;
  cfg.output_dtype = kBool;
  TensorIterator it(std::move(cfg));
  cuda_ops::launch_iter(it, name, [op](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_compare(op, a, s);
  });
  it.finish();
  return it.output(0);
}

template <BinaryOp kOp>
Tensor functional(const Tensor& self, const Tensor& other) {
  return binary_impl(kOp, Tensor(), self, other, 1, false);
}
template <BinaryOp kOp>
Tensor inplace(const Tensor& self, const Tensor& other) {
  return binary_impl(kOp, self, self, other, 1, true);
}
template <BinaryOp kOp>
Tensor out_variant(const Tensor& self, const Tensor& other, const Tensor& out) {
  return binary_impl(kOp, out, self, other, 1, false);
}
template <BinaryOp kOp>
Tensor functional_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return binary_impl(kOp, Tensor(), self, other, alpha, false);
}
template <BinaryOp kOp>
Tensor inplace_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return binary_impl(kOp, self, self, other, alpha, true);
}
template <BinaryOp kOp>
Tensor out_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha, const Tensor& out) {
  return binary_impl(kOp, out, self, other, alpha, false);
}

template <CompareOp kOp>
Tensor compare_functional(const Tensor& self, const Tensor& other) {
  return compare_impl(kOp, Tensor(), self, other, false);
}
template <CompareOp kOp>
Tensor compare_inplace(const Tensor& self, const Tensor& other) {
  return compare_impl(kOp, self, self, other, true);
}
template <CompareOp kOp>
Tensor compare_out(const Tensor& self, const Tensor& other, const Tensor& out) {
  return compare_impl(kOp, out, self, other, false);
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
  cuda_ops::launch_iter(it, "where", [](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_where(a, s);
  });
  return it.output(0);
}

// out undefined: a new tensor of the broadcast shape of self and mask; else out is self (in place,
// and the mask must broadcast to self's shape).
Tensor masked_fill_impl(const char* op, const Tensor& self, const Tensor& mask, const Scalar& value,
                        bool inplace) {
  LOOM_CHECK_TYPE(mask.dtype() == kBool, "[", op, "] expected mask to have dtype bool but got ",
                  mask.dtype());
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.outputs = {inplace ? self : Tensor()};
  cfg.inputs = {self, mask};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  cfg.output_dtype = self.dtype();
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  uint64_t value_bits = 0;
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] { value_bits = bits_of<scalar_t>(value); });
  cuda_ops::launch_iter(it, op, [&](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_masked_fill(a, value_bits, s);
  });
  it.finish();
  return it.output(0);
}

Tensor masked_fill_kernel(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return masked_fill_impl("masked_fill", self, mask, value, false);
}
Tensor masked_fill_inplace_kernel(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return masked_fill_impl("masked_fill_", self, mask, value, true);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("add", functional_alpha<BinaryOp::Add>);
  m.impl("add_", inplace_alpha<BinaryOp::Add>);
  m.impl("add.out", out_alpha<BinaryOp::Add>);
  m.impl("sub", functional_alpha<BinaryOp::Sub>);
  m.impl("sub_", inplace_alpha<BinaryOp::Sub>);
  m.impl("sub.out", out_alpha<BinaryOp::Sub>);
#define LOOM_BINARY_CUDA(name, op)          \
  m.impl(#name, functional<BinaryOp::op>);  \
  m.impl(#name "_", inplace<BinaryOp::op>); \
  m.impl(#name ".out", out_variant<BinaryOp::op>);
  LOOM_BINARY_CUDA(mul, Mul)
  LOOM_BINARY_CUDA(div, Div)
  LOOM_BINARY_CUDA(maximum, Maximum)
  LOOM_BINARY_CUDA(minimum, Minimum)
#undef LOOM_BINARY_CUDA
#define LOOM_COMPARE_CUDA(name, op)                  \
  m.impl(#name, compare_functional<CompareOp::op>);  \
  m.impl(#name "_", compare_inplace<CompareOp::op>); \
  m.impl(#name ".out", compare_out<CompareOp::op>);
  LOOM_COMPARE_CUDA(eq, Eq)
  LOOM_COMPARE_CUDA(ne, Ne)
  LOOM_COMPARE_CUDA(lt, Lt)
  LOOM_COMPARE_CUDA(le, Le)
  LOOM_COMPARE_CUDA(gt, Gt)
  LOOM_COMPARE_CUDA(ge, Ge)
  LOOM_COMPARE_CUDA(logical_and, LogicalAnd)
  LOOM_COMPARE_CUDA(logical_or, LogicalOr)
  LOOM_COMPARE_CUDA(logical_xor, LogicalXor)
#undef LOOM_COMPARE_CUDA
  m.impl("where", where_kernel);
  m.impl("masked_fill.Scalar", masked_fill_kernel);
  m.impl("masked_fill_.Scalar", masked_fill_inplace_kernel);
}

}  // namespace loom
