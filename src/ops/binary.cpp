// Pointwise binary operators: arithmetic, maximum/minimum, comparisons, logical ops, where. This
// file holds their schemas, their shape functions (broadcast + type promotion: what Meta runs) and
// their derivatives; the loops are in cpu/binary_kernels.cpp.
#include "loom/derivatives.h"
#include "op_call.h"
#include "shapes.h"
#include "structured.h"

namespace loom {

// ---- shape functions ----

TensorMeta binary_shape(const BinaryTraits& op, TensorMetaRef self, TensorMetaRef other,
                        const Scalar& alpha) {
  const TensorMetaRef in[2] = {self, other};
  common_device(op.name, in, 2);
  DimVector shape = broadcast_shapes(op.name, in, 2);
  DType dt = result_type(in, 2);
  if (op.int_to_float && !is_floating(dt)) dt = default_dtype();
  LOOM_CHECK_TYPE(!(op.is_sub && dt == kBool),
                  "[sub] subtraction with two bool "
                  "tensors is not supported; use logical_xor instead");
  if (!op.bool_output) {
    LOOM_CHECK_TYPE(is_floating(dt) || !alpha.is_floating(), "[", op.name,
                    "] for integral input tensors, argument alpha must not be a floating point "
                    "number (got ",
                    alpha, ")");
  }
  return TensorMeta(shape, op.bool_output ? kBool : dt);
}

TensorMeta where_shape(TensorMetaRef condition, TensorMetaRef self, TensorMetaRef other) {
  LOOM_CHECK_TYPE(condition.dtype == kBool || condition.dtype == kUInt8,
                  "[where] expected condition to be a bool tensor but got ", condition.dtype);
  const TensorMetaRef in[3] = {condition, self, other};
  common_device("where", in, 3);
  DimVector shape = broadcast_shapes("where", in, 3);
  const bool skip[3] = {true, false, false};
  return TensorMeta(shape, result_type(in, 3, skip));
}

namespace {

constexpr BinaryTraits kAdd{"add"}, kSub{"sub", false, false, true}, kMul{"mul"}, kDiv{"div", true},
    kMaximum{"maximum"}, kMinimum{"minimum"}, kEq{"eq", false, true}, kNe{"ne", false, true},
    kLt{"lt", false, true}, kLe{"le", false, true}, kGt{"gt", false, true}, kGe{"ge", false, true},
    kLogicalAnd{"logical_and", false, true}, kLogicalOr{"logical_or", false, true},
    kLogicalXor{"logical_xor", false, true};

// Meta kernels: the shape function, then an empty meta result, self checked, or out resized.
template <const BinaryTraits& Op>
Tensor meta_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return meta_output(binary_shape(Op, self, other, alpha));
}
template <const BinaryTraits& Op>
Tensor meta_inplace_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  return meta_inplace(Op.name, self, binary_shape(Op, self, other, alpha));
}
template <const BinaryTraits& Op>
Tensor meta_out_alpha(const Tensor& self, const Tensor& other, const Scalar& alpha,
                      const Tensor& out) {
  prepare_out(Op.name, out, binary_shape(Op, self, other, alpha), out.device());
  return out;
}
template <const BinaryTraits& Op>
Tensor meta_fn(const Tensor& self, const Tensor& other) {
  return meta_alpha<Op>(self, other, 1);
}
template <const BinaryTraits& Op>
Tensor meta_inplace_fn(const Tensor& self, const Tensor& other) {
  return meta_inplace_alpha<Op>(self, other, 1);
}
template <const BinaryTraits& Op>
Tensor meta_out_fn(const Tensor& self, const Tensor& other, const Tensor& out) {
  return meta_out_alpha<Op>(self, other, 1, out);
}

}  // namespace

#define LOOM_BINARY_DEFS(name)                                   \
  m.def(#name "(Tensor self, Tensor other) -> Tensor");          \
  m.def(#name "_(Tensor(a!) self, Tensor other) -> Tensor(a!)"); \
  m.def(#name ".out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)");
#define LOOM_BINARY_IMPLS(name, Op)                          \
  m.impl(#name, DispatchKey::Meta, meta_fn<Op>);             \
  m.impl(#name "_", DispatchKey::Meta, meta_inplace_fn<Op>); \
  m.impl(#name ".out", DispatchKey::Meta, meta_out_fn<Op>);

LOOM_LIBRARY_FRAGMENT(loom, m) {
  for (const char* name : {"add", "sub"}) {
    std::string n = name;
    m.def(n + "(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
    m.def(n + "_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
    m.def(n + ".out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)");
  }
  m.impl("add", DispatchKey::Meta, meta_alpha<kAdd>);
  m.impl("add_", DispatchKey::Meta, meta_inplace_alpha<kAdd>);
  m.impl("add.out", DispatchKey::Meta, meta_out_alpha<kAdd>);
  m.impl("sub", DispatchKey::Meta, meta_alpha<kSub>);
  m.impl("sub_", DispatchKey::Meta, meta_inplace_alpha<kSub>);
  m.impl("sub.out", DispatchKey::Meta, meta_out_alpha<kSub>);
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
  LOOM_BINARY_IMPLS(mul, kMul)
  LOOM_BINARY_IMPLS(div, kDiv)
  LOOM_BINARY_IMPLS(maximum, kMaximum)
  LOOM_BINARY_IMPLS(minimum, kMinimum)
  LOOM_BINARY_IMPLS(eq, kEq)
  LOOM_BINARY_IMPLS(ne, kNe)
  LOOM_BINARY_IMPLS(lt, kLt)
  LOOM_BINARY_IMPLS(le, kLe)
  LOOM_BINARY_IMPLS(gt, kGt)
  LOOM_BINARY_IMPLS(ge, kGe)
  LOOM_BINARY_IMPLS(logical_and, kLogicalAnd)
  LOOM_BINARY_IMPLS(logical_or, kLogicalOr)
  LOOM_BINARY_IMPLS(logical_xor, kLogicalXor)
  m.def("where(Tensor condition, Tensor self, Tensor other) -> Tensor");
  m.impl("where", DispatchKey::Meta, MetaKernel<&where_shape>::run);
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
#define LOOM_BINARY_WRAPPERS(name)                                                       \
  Tensor name(const Tensor& self, const Tensor& other) {                                 \
    LOOM_CALL_OP("loom::" #name, BinSig, self, other);                                   \
  }                                                                                      \
  Tensor name(const Tensor& self, const Scalar& other) {                                 \
    return name(self, wrap_scalar(other));                                               \
  }                                                                                      \
  const Tensor& name##_(const Tensor& self, const Tensor& other) {                       \
    LOOM_CALL_INPLACE("loom::" #name "_", BinSig, self, other);                          \
  }                                                                                      \
  const Tensor& name##_(const Tensor& self, const Scalar& other) {                       \
    return name##_(self, wrap_scalar(other));                                            \
  }                                                                                      \
  const Tensor& name##_out(const Tensor& out, const Tensor& self, const Tensor& other) { \
    LOOM_CALL_OUT("loom::" #name ".out", BinOutSig, out, self, other);                   \
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
  for (const char* op :
       {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"}) {
    m.nondifferentiable(op);
  }
}

}  // namespace loom
