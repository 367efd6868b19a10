// Factories: empty, zeros, ones, full, arange, linspace, eye and the random ones. They have no
// tensor arguments; the dispatcher picks the backend from the `device` argument. The CPU loops of
// arange, linspace, eye and the random ones are in cpu/factory_kernels.cpp.
#include <cmath>

#include "op_call.h"
#include "shapes.h"

namespace loom {
namespace {

DType dtype_or_default(std::optional<DType> d) {
  return d.value_or(default_dtype());
}
Device device_or_cpu(std::optional<Device> d) {
  return d.value_or(kCPU);
}

// Negative sizes, and element or byte counts that overflow (Note [checked sizes]), named by op.
void check_sizes(const char* op, IntArrayRef size, DType dtype) {
  (void)checked_nbytes(size, dtype, op);
}

Tensor empty_kernel(IntArrayRef size, std::optional<DType> dtype, std::optional<Device> device) {
  check_sizes("empty", size, dtype_or_default(dtype));
  return empty_tensor(size, dtype_or_default(dtype), device_or_cpu(device));
}

Tensor empty_strided_kernel(IntArrayRef size, IntArrayRef stride, std::optional<DType> dtype,
                            std::optional<Device> device) {
  DType dt = dtype_or_default(dtype);
  check_sizes("empty_strided", size, dt);
  LOOM_CHECK(size.size() == stride.size(), "[empty_strided] got ", size.size(), " sizes but ",
             stride.size(), " strides");
  int64_t extent = 1;  // 1 + the largest offset reachable
  bool any_zero = false, overflow = false;
  for (size_t i = 0; i < size.size(); ++i) {
    LOOM_CHECK(stride[i] >= 0, "[empty_strided] strides must be non-negative but got ", stride);
    if (size[i] == 0) any_zero = true;
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(size[i] - 1, stride[i], &reach);
    overflow |= __builtin_add_overflow(extent, reach, &extent);
  }
  int64_t bytes = 0;
  overflow |= __builtin_mul_overflow(extent, static_cast<int64_t>(element_size(dt)), &bytes);
  LOOM_CHECK(any_zero || !overflow, "[empty_strided] sizes ", size, " and strides ", stride, " of ",
             dt, " reach beyond the largest allocation (2^63 - 1 bytes)");
  Storage st = make_storage(any_zero ? 0 : static_cast<size_t>(bytes), device_or_cpu(device));
  return make_tensor(std::move(st), dt, size, stride, 0);
}

Tensor full_kernel(IntArrayRef size, const Scalar& value, std::optional<DType> dtype,
                   std::optional<Device> device) {
  // torch.full infers the dtype from the fill value (bool, int64 or the default float).
  check_sizes("full", size, dtype.value_or(value.dtype()));
  Tensor t = empty_tensor(size, dtype.value_or(value.dtype()), device_or_cpu(device));
  fill_(t, value);
  return t;
}

Tensor zeros_kernel(IntArrayRef size, std::optional<DType> dtype, std::optional<Device> device) {
  check_sizes("zeros", size, dtype_or_default(dtype));
  Tensor t = empty_tensor(size, dtype_or_default(dtype), device_or_cpu(device));
  fill_(t, 0);
  return t;
}

Tensor ones_kernel(IntArrayRef size, std::optional<DType> dtype, std::optional<Device> device) {
  check_sizes("ones", size, dtype_or_default(dtype));
  Tensor t = empty_tensor(size, dtype_or_default(dtype), device_or_cpu(device));
  fill_(t, 1);
  return t;
}

}  // namespace

TensorMeta arange_shape(const Scalar& start, const Scalar& end, const Scalar& step,
                        std::optional<DType> dtype, std::optional<Device> device) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  LOOM_CHECK(st != 0, "[arange] step must be nonzero");
  LOOM_CHECK(std::isfinite(s) && std::isfinite(e), "[arange] start and end must be finite but got ",
             start, " and ", end);
  LOOM_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
             "[arange] upper bound and step sign are "
             "inconsistent: start=",
             start, " end=", end, " step=", step);
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  DType dt = dtype.value_or(all_int ? kInt64 : default_dtype());
  // The count in double first: the integer formula below would overflow for such ranges.
  LOOM_CHECK(std::fabs((e - s) / st) < 0x1p62, "[arange] start=", start, " end=", end,
             " step=", step, " give more elements than int64 can count");
  int64_t n =
      all_int ? (end.to_int() - start.to_int() + step.to_int() + (st > 0 ? -1 : 1)) / step.to_int()
              : static_cast<int64_t>(std::ceil((e - s) / st));
  if (n < 0) n = 0;
  check_sizes("arange", {n}, dt);
  return TensorMeta({n}, dt);
}

TensorMeta linspace_shape(const Scalar& start, const Scalar& end, int64_t steps,
                          std::optional<DType> dtype, std::optional<Device> device) {
  LOOM_CHECK(steps >= 0, "[linspace] number of steps must be non-negative but got ", steps);
  DType dt = dtype_or_default(dtype);
  check_sizes("linspace", {steps}, dt);
  return TensorMeta({steps}, dt);
}

TensorMeta eye_shape(int64_t n, std::optional<int64_t> m, std::optional<DType> dtype,
                     std::optional<Device> device) {
  int64_t cols = m.value_or(n);
  LOOM_CHECK(n >= 0 && cols >= 0, "[eye] sizes must be non-negative but got n=", n, " m=", cols);
  check_sizes("eye", {n, cols}, dtype_or_default(dtype));
  return TensorMeta({n, cols}, dtype_or_default(dtype));
}

// The random factories' shape functions neither read nor advance the generator (the loops do).
TensorMeta rand_shape(IntArrayRef size, const std::optional<Generator>& gen,
                      std::optional<DType> dtype, std::optional<Device> device) {
  DType dt = dtype_or_default(dtype);
  check_sizes("rand", size, dt);
  LOOM_CHECK_TYPE(is_floating(dt), "[rand] expected a floating dtype but got ", dt);
  return TensorMeta(size, dt);
}

TensorMeta randn_shape(IntArrayRef size, const std::optional<Generator>& gen,
                       std::optional<DType> dtype, std::optional<Device> device) {
  DType dt = dtype_or_default(dtype);
  check_sizes("randn", size, dt);
  LOOM_CHECK_TYPE(is_floating(dt), "[randn] expected a floating dtype but got ", dt);
  return TensorMeta(size, dt);
}

TensorMeta randint_shape(int64_t low, int64_t high, IntArrayRef size,
                         const std::optional<Generator>& gen, std::optional<DType> dtype,
                         std::optional<Device> device) {
  LOOM_CHECK(high > low, "[randint] expected low < high but got low=", low, " high=", high);
  DType dt = dtype.value_or(kInt64);
  check_sizes("randint", size, dt);
  return TensorMeta(size, dt);
}

namespace {

Tensor scalar_tensor_kernel(const Scalar& value, std::optional<DType> dtype,
                            std::optional<Device> device) {
  return full_kernel({}, value, dtype, device);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("empty(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "empty_strided(int[] size, int[] stride, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def("zeros(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def("ones(int[] size, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "full(int[] size, Scalar fill_value, *, ScalarType? dtype=None, Device? device=None) -> "
      "Tensor");
  m.def(
      "arange(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Device? "
      "device=None) -> Tensor");
  m.def(
      "linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Device? "
      "device=None) -> Tensor");
  m.def("eye(int n, int? m=None, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  m.def(
      "rand(int[] size, *, Generator? generator=None, ScalarType? dtype=None, Device? device=None) "
      "-> Tensor");
  m.def(
      "randn(int[] size, *, Generator? generator=None, ScalarType? dtype=None, Device? "
      "device=None) -> Tensor");
  m.def(
      "randint(int low, int high, int[] size, *, Generator? generator=None, ScalarType? "
      "dtype=None, Device? device=None) -> Tensor");
  m.def("scalar_tensor(Scalar s, *, ScalarType? dtype=None, Device? device=None) -> Tensor");
  // One kernel serves every backend: it only allocates through the device's allocator and fills
  // through dispatched ops (Meta tensors have no data to fill).
  m.impl("empty", DispatchKey::CompositeExplicit, empty_kernel);
  m.impl("empty_strided", DispatchKey::CompositeExplicit, empty_strided_kernel);
  m.impl("zeros", DispatchKey::CompositeExplicit, zeros_kernel);
  m.impl("ones", DispatchKey::CompositeExplicit, ones_kernel);
  m.impl("full", DispatchKey::CompositeExplicit, full_kernel);
  m.impl("scalar_tensor", DispatchKey::CompositeExplicit, scalar_tensor_kernel);
  MetaKernel<&arange_shape>::register_meta(m, "arange");
  MetaKernel<&linspace_shape>::register_meta(m, "linspace");
  MetaKernel<&eye_shape>::register_meta(m, "eye");
  MetaKernel<&rand_shape>::register_meta(m, "rand");
  MetaKernel<&randn_shape>::register_meta(m, "randn");
  MetaKernel<&randint_shape>::register_meta(m, "randint");
}

using FactorySig = Tensor(IntArrayRef, std::optional<DType>, std::optional<Device>);

Tensor empty(IntArrayRef size, TensorOptions o) {
  LOOM_CALL_OP("loom::empty", FactorySig, size, o.dtype, o.device);
}
Tensor empty_strided(IntArrayRef size, IntArrayRef stride, TensorOptions o) {
  LOOM_CALL_OP("loom::empty_strided",
               Tensor(IntArrayRef, IntArrayRef, std::optional<DType>, std::optional<Device>), size,
               stride, o.dtype, o.device);
}
Tensor zeros(IntArrayRef size, TensorOptions o) {
  LOOM_CALL_OP("loom::zeros", FactorySig, size, o.dtype, o.device);
}
Tensor ones(IntArrayRef size, TensorOptions o) {
  LOOM_CALL_OP("loom::ones", FactorySig, size, o.dtype, o.device);
}
Tensor full(IntArrayRef size, const Scalar& value, TensorOptions o) {
  LOOM_CALL_OP("loom::full",
               Tensor(IntArrayRef, const Scalar&, std::optional<DType>, std::optional<Device>),
               size, value, o.dtype, o.device);
}
Tensor arange(const Scalar& end, TensorOptions o) {
  return arange(0, end, 1, o);
}
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions o) {
  LOOM_CALL_OP("loom::arange",
               Tensor(const Scalar&, const Scalar&, const Scalar&, std::optional<DType>,
                      std::optional<Device>),
               start, end, step, o.dtype, o.device);
}
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions o) {
  LOOM_CALL_OP(
      "loom::linspace",
      Tensor(const Scalar&, const Scalar&, int64_t, std::optional<DType>, std::optional<Device>),
      start, end, steps, o.dtype, o.device);
}
Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  LOOM_CALL_OP("loom::eye",
               Tensor(int64_t, std::optional<int64_t>, std::optional<DType>, std::optional<Device>),
               n, m, o.dtype, o.device);
}
using RandSig = Tensor(IntArrayRef, const std::optional<Generator>&, std::optional<DType>,
                       std::optional<Device>);
Tensor rand(IntArrayRef size, TensorOptions o, const std::optional<Generator>& gen) {
  LOOM_CALL_OP("loom::rand", RandSig, size, gen, o.dtype, o.device);
}
Tensor randn(IntArrayRef size, TensorOptions o, const std::optional<Generator>& gen) {
  LOOM_CALL_OP("loom::randn", RandSig, size, gen, o.dtype, o.device);
}
Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions o,
               const std::optional<Generator>& gen) {
  LOOM_CALL_OP("loom::randint",
               Tensor(int64_t, int64_t, IntArrayRef, const std::optional<Generator>&,
                      std::optional<DType>, std::optional<Device>),
               low, high, size, gen, o.dtype, o.device);
}
Tensor scalar_tensor(const Scalar& value, TensorOptions o) {
  LOOM_CALL_OP("loom::scalar_tensor",
               Tensor(const Scalar&, std::optional<DType>, std::optional<Device>), value, o.dtype,
               o.device);
}

namespace {
TensorOptions like(const Tensor& t, TensorOptions o) {
  return TensorOptions(o.dtype.value_or(t.dtype())).with_device(o.device.value_or(t.device()));
}
}  // namespace

Tensor empty_like(const Tensor& t, TensorOptions o) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::empty_like");
  return empty(t.sizes(), like(t, o));
}
Tensor zeros_like(const Tensor& t, TensorOptions o) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::zeros_like");
  return zeros(t.sizes(), like(t, o));
}
Tensor ones_like(const Tensor& t, TensorOptions o) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::ones_like");
  return ones(t.sizes(), like(t, o));
}
Tensor full_like(const Tensor& t, const Scalar& v, TensorOptions o) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::full_like");
  return full(t.sizes(), v, like(t, o));
}
Tensor rand_like(const Tensor& t, const std::optional<Generator>& gen) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::rand_like");
  return rand(t.sizes(), t.options(), gen);
}
Tensor randn_like(const Tensor& t, const std::optional<Generator>& gen) {
  if (!t.defined()) detail::throw_undefined_tensor("loom::randn_like");
  return randn(t.sizes(), t.options(), gen);
}

}  // namespace loom
