// The pure shape pieces that shape functions and TensorIterator share, and output building for
// structured kernels (Note [Shape functions and kernels] in structured.h).
#include "structured.h"

#include <algorithm>
#include <sstream>

#include "loom/ops.h"
#include "tensor_iterator.h"

namespace loom {

DimVector broadcast_shapes(const char* op, const TensorMetaRef* inputs, size_t n) {
  size_t nd = 0;
  for (size_t k = 0; k < n; ++k) nd = std::max(nd, inputs[k].sizes.size());
  DimVector shape(nd, 1);
  for (size_t k = 0; k < n; ++k) {
    IntArrayRef s = inputs[k].sizes;
    const size_t off = nd - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& r = shape[off + i];
      if (s[i] == r || s[i] == 1) continue;
      if (r == 1) {
        r = s[i];
        continue;
      }
      std::ostringstream os;
      os << "[" << op << "] shapes cannot be broadcast together:";
      for (size_t u = 0; u < n; ++u) os << " " << inputs[u].sizes;
      os << " (dimension " << (off + i) << ": " << r << " vs " << s[i] << ")";
      LOOM_THROW(ValueError, os.str());
    }
  }
  checked_numel(shape, op);  // Note [checked sizes]: a broadcast can overflow
  return shape;
}

DimVector broadcast_shapes(const char* op, std::initializer_list<TensorMetaRef> inputs) {
  return broadcast_shapes(op, inputs.begin(), inputs.size());
}

namespace {

// Note [Promotion categories]: as in PyTorch, dimensioned tensors decide the result type; 0-dim
// tensors only matter if they are of a higher category (bool < integer < float) than all
// dimensioned ones; wrapped numbers (C++ scalars) matter only if higher than both, and then give
// the category's default (int64 or the default float dtype) rather than their own width.
struct ResultTypeState {
  std::optional<DType> dim, zero, wrapped;
};

void update(ResultTypeState& s, const TensorMetaRef& t) {
  DType d = t.dtype;
  if (t.wrapped_number) {
    if (is_floating(d)) d = default_dtype();
    s.wrapped = s.wrapped ? promote_types(*s.wrapped, d) : d;
  } else if (t.sizes.empty()) {
    s.zero = s.zero ? promote_types(*s.zero, d) : d;
  } else {
    s.dim = s.dim ? promote_types(*s.dim, d) : d;
  }
}

std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

DType result_type(const TensorMetaRef* inputs, size_t n, const bool* skip) {
  ResultTypeState s;
  for (size_t i = 0; i < n; ++i) {
    if (skip == nullptr || !skip[i]) update(s, inputs[i]);
  }
  return combine(s.dim, combine(s.zero, s.wrapped)).value_or(default_dtype());
}

DType result_type(std::initializer_list<TensorMetaRef> inputs) {
  return result_type(inputs.begin(), inputs.size());
}

Device common_device(const char* op, const TensorMetaRef* inputs, size_t n) {
  bool have = false;
  Device device = kCPU;
  for (size_t i = 0; i < n; ++i) {
    const TensorMetaRef& t = inputs[i];
    if (t.sizes.empty() && t.device.is_cpu()) continue;
    if (!have) {
      device = t.device;
      have = true;
    } else {
      LOOM_CHECK(t.device == device, "[", op, "] expected all tensors on one device but got ",
                 device, " and ", t.device);
    }
  }
  if (!have && n > 0) device = inputs[0].device;
  return device;
}

Tensor meta_output(const TensorMeta& m) {
  if (!m.defined) return Tensor();
  Tensor t = empty_tensor(m.sizes, m.dtype, kMeta);
  if (!m.strides.empty()) t.impl()->set_sizes_and_strides(m.sizes, m.strides, 0);
  return t;
}

Tensor allocate_output(const TensorMeta& m, Device device) {
  if (!m.defined) return Tensor();
  Tensor t = empty_tensor(m.sizes, m.dtype, device);
  if (!m.strides.empty()) t.impl()->set_sizes_and_strides(m.sizes, m.strides, 0);
  return t;
}

Tensor prepare_out(const char* op, const Tensor& out, const TensorMeta& m, Device device) {
  LOOM_CHECK(out.device() == device, "[", op, "] the output is on ", out.device(),
             " but the kernel runs on ", device);
  LOOM_CHECK_TYPE(can_cast(m.dtype, out.dtype()), "[", op, "] result type ", m.dtype,
                  " can't be cast to the desired output type ", out.dtype());
  if (out.sizes() != m.sizes.ref()) {
    const size_t need = checked_nbytes(m.sizes, out.dtype(), op);
    const DimVector strides = contiguous_strides(m.sizes);
    if (need >
        out.storage()->nbytes() - static_cast<size_t>(out.storage_offset()) * out.element_size()) {
      out.impl()->set_storage(make_storage(need, out.device()));
      out.impl()->set_sizes_and_strides(m.sizes, strides, 0);
    } else {
      out.impl()->set_sizes_and_strides(m.sizes, strides, out.storage_offset());
    }
  }
  if (out.dtype() != m.dtype) return empty_tensor(m.sizes, m.dtype, device);
  return out;
}

Tensor meta_inplace(const char* op, const Tensor& self, const TensorMeta& m) {
  LOOM_CHECK_TYPE(can_cast(m.dtype, self.dtype()), "[", op, "] result type ", m.dtype,
                  " can't be cast to the desired output type ", self.dtype());
  LOOM_CHECK(self.sizes() == m.sizes.ref(), "[", op, "] output with shape ", self.sizes(),
             " doesn't match the broadcast shape ", m.sizes.ref());
  return self;
}

void finish_out(const Tensor& out, const Tensor& written) {
  if (written.impl() != out.impl()) {
    out.copy_(written);
  } else {
    out.storage()->bump_version();
  }
}

}  // namespace loom
