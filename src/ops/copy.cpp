// copy_, fill_, casts and clones: schemas, shape functions and Meta kernels, derivatives (the CPU
// kernels are in cpu/copy_kernels.cpp).
#include <cstring>

#include "loom/derivatives.h"
#include "loops.h"
#include "op_call.h"
#include "shapes.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

// src broadcasts to self's shape (never the other way).
void check_copy(TensorMetaRef self, TensorMetaRef src) {
  bool ok = src.dim() <= self.dim();
  for (int64_t i = 1; ok && i <= src.dim(); ++i) {
    int64_t s = src.sizes[static_cast<size_t>(src.dim() - i)];
    ok = s == 1 || s == self.sizes[static_cast<size_t>(self.dim() - i)];
  }
  LOOM_CHECK(ok, "[copy_] cannot copy a tensor of shape ", src.sizes, " into shape ", self.sizes,
             " (src must broadcast to self)");
}

}  // namespace

// copy_ writes self in place: its result is self's geometry.
TensorMeta copy_shape(TensorMetaRef self, TensorMetaRef src) {
  check_copy(self, src);
  return TensorMeta(self.sizes, self.strides, self.dtype);
}

namespace {

Tensor copy_meta(const Tensor& self, const Tensor& src) {
  copy_shape(self, src);
  return self;
}

// fill_ on Meta: nothing to check, nothing to write.
Tensor fill_meta(const Tensor& self, const Scalar&) {
  return self;
}

Tensor zero_kernel(const Tensor& self) {
  fill_(self, 0);
  return self;
}

}  // namespace

// _to_copy crosses devices: a Meta source can only go to Meta (it has no data), any tensor can go
// to Meta (only its geometry travels), and between CPU and CUDA the data travels (a build without
// CUDA says so when it allocates the destination).
TensorMeta to_copy_shape(TensorMetaRef self, std::optional<DType> dtype,
                         std::optional<Device> device) {
  const Device dev = device.value_or(self.device);
  LOOM_CHECK(!self.device.is_meta() || dev.is_meta(), "[_to_copy] a meta tensor (shape ",
             self.sizes, ") has no data to copy to ", dev);
  return TensorMeta(self.sizes, dtype.value_or(self.dtype));
}

TensorMeta clone_shape(TensorMetaRef self) {
  return TensorMeta(self.sizes, self.dtype);
}

namespace {

Tensor to_copy_meta(const Tensor& self, std::optional<DType> dtype, std::optional<Device> device) {
  return meta_output(to_copy_shape(self, dtype, device));
}

Tensor contiguous_kernel(const Tensor& self) {
  check_defined(self, "contiguous", "self");
  if (self.is_contiguous()) return self;
  return clone(self);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)");
  m.def("fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)");
  m.def("zero_(Tensor(a!) self) -> Tensor(a!)");
  m.def("_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("clone(Tensor self) -> Tensor");
  m.def("contiguous(Tensor(a) self) -> Tensor(a)");
  m.impl("copy_", DispatchKey::Meta, copy_meta);
  m.impl("fill_", DispatchKey::Meta, fill_meta);
  m.impl("zero_", DispatchKey::CompositeImplicit, zero_kernel);
  m.impl("_to_copy", DispatchKey::Meta, to_copy_meta);
  MetaKernel<&clone_shape>::register_meta(m, "clone");
  m.impl("contiguous", DispatchKey::CompositeImplicit, contiguous_kernel);
}

const Tensor& copy_(const Tensor& self, const Tensor& src) {
  LOOM_CALL_INPLACE("loom::copy_", Tensor(const Tensor&, const Tensor&), self, src);
}
const Tensor& fill_(const Tensor& self, const Scalar& value) {
  LOOM_CALL_INPLACE("loom::fill_", Tensor(const Tensor&, const Scalar&), self, value);
}
const Tensor& zero_(const Tensor& self) {
  LOOM_CALL_INPLACE("loom::zero_", Tensor(const Tensor&), self);
}
Tensor clone(const Tensor& self) {
  LOOM_CALL_OP("loom::clone", Tensor(const Tensor&), self);
}
Tensor contiguous(const Tensor& self) {
  LOOM_CALL_OP("loom::contiguous", Tensor(const Tensor&), self);
}

Tensor to(const Tensor& self, TensorOptions options, bool copy) {
  // Reads self before the dispatcher (which would otherwise name the argument of _to_copy).
  if (LOOM_UNLIKELY(!self.defined())) detail::throw_undefined_tensor("loom::to");
  DType dt = options.dtype.value_or(self.dtype());
  Device dev = options.device.value_or(self.device());
  if (!copy && dt == self.dtype() && dev == self.device()) return self;
  static const auto op =
      Dispatcher::singleton()
          .find_typed<Tensor(const Tensor&, std::optional<DType>, std::optional<Device>)>(
              "loom::_to_copy");
  return op.call(self, dt, dev);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;
}  // namespace

LOOM_DERIVATIVES(m) {
  // self's old value is overwritten: it gets a zero gradient. src gets the gradient, which the
  // engine sums to src's shape (src broadcasts) and casts to src's dtype.
  m.def("copy_", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (c.needs(0)) r[0] = zeros_like(g);
    if (c.needs(1)) r[1] = g;
    return r;
  });
  m.def("fill_", {}, [](const BackwardContext& c) -> GradList {
    return {c.needs(0) ? zeros_like(c.grad(0)) : Tensor()};
  });
  m.def("_to_copy", {}, [](const BackwardContext& c) -> GradList {
    return {c.needs(0) ? c.grad(0).to(c.input_dtype(0)) : Tensor()};
  });
  m.def("clone", {}, [](const BackwardContext& c) -> GradList { return {c.grad(0)}; });
  // zero_ and contiguous are decompositions (into fill_ and clone).
}

}  // namespace loom
