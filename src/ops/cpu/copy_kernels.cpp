// CPU kernels of copy_, fill_, _to_copy and clone: copies and casts through TensorIterator, with a
// memmove for same-dtype contiguous tensors.
#include <cstring>

#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/tensor_iterator.h"

namespace loom {
namespace {

Tensor copy_kernel(const Tensor& self, const Tensor& src) {
  if (self.is_same(src)) return self;
  // Fast path: same dtype, same shape, both contiguous.
  if (self.dtype() == src.dtype() && self.is_contiguous() && src.is_contiguous() &&
      self.sizes() == src.sizes() && self.is_cpu() && src.is_cpu()) {
    if (self.numel() > 0) std::memmove(self.data_ptr(), src.data_ptr(), self.nbytes());
    self.storage()->bump_version();
    return self;
  }
  copy_shape(self, src);
  TensorIteratorConfig cfg;
  cfg.op = "copy_";
  cfg.outputs = {self};
  cfg.inputs = {src.sizes() == self.sizes() ? src : src.expand(self.sizes())};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  cfg.output_dtype = self.dtype();
  cfg.is_inplace = true;
  TensorIterator it(std::move(cfg));
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "copy_", [&] {
    using out_t = scalar_t;
    LOOM_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
      using in_t = scalar_t;
      it.for_each([](char** d, const int64_t* s, int64_t n) {
        unary_loop<out_t, in_t>(d, s, n, [](in_t v) { return convert<out_t>(v); });
      });
    });
  });
  self.storage()->bump_version();
  return self;
}

Tensor fill_kernel(const Tensor& self, const Scalar& value) {
  if (self.numel() == 0) return self;
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "fill_", [&] {
    const scalar_t v = value.to<scalar_t>();
    if (self.is_contiguous()) {
      scalar_t* p = self.data_ptr<scalar_t>();
      const int64_t n = self.numel();
      if (value.to_double() == 0.0 && !value.is_bool()) {
        std::memset(static_cast<void*>(p), 0, static_cast<size_t>(n) * sizeof(scalar_t));
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] = v;
      }
    } else {
      TensorIteratorConfig cfg;
      cfg.op = "fill_";
      cfg.outputs = {self};
      cfg.inputs = {};
      cfg.is_inplace = true;
      cfg.compute_dtype = self.dtype();
      // With no inputs, the iterator's shape is empty: iterate self through a broadcast instead.
      cfg.inputs = {wrap_scalar(value).to(self.dtype()).expand(self.sizes())};
      cfg.promote_inputs = false;
      TensorIterator it(std::move(cfg));
      it.for_each([](char** d, const int64_t* s, int64_t n) {
        unary_loop<scalar_t, scalar_t>(d, s, n, [](scalar_t x) { return x; });
      });
    }
  });
  self.storage()->bump_version();
  return self;
}

// The destination device is an argument: the result is allocated there and copy_ fills it (its
// kernel for another device handles the transfer); a Meta destination receives the geometry alone.
Tensor to_copy_kernel(const Tensor& self, std::optional<DType> dtype,
                      std::optional<Device> device) {
  const TensorMeta m = to_copy_shape(self, dtype, device);
  const Device dev = device.value_or(self.device());
  if (dev.is_meta()) return meta_output(m);
  Tensor out = allocate_output(m, dev);
  copy_(out, self);
  return out;
}

void clone_loop(const Tensor& out, const Tensor& self) {
  copy_(out, self);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("copy_", copy_kernel);
  m.impl("fill_", fill_kernel);
  m.impl("_to_copy", to_copy_kernel);
  Structured<&clone_shape, &clone_loop>::register_cpu(m, "clone");
}

}  // namespace loom
