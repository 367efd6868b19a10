// Host reads: item(), to_vector() and printing read a tensor's values on the CPU, through the
// dispatcher.
//
// Note [Host reads]
//   Every place where a tensor's value leaves its device for the host is a dispatched operator:
//   item() calls _local_scalar_dense (PyTorch's name), to_vector() and printing copy a tensor of
//   another device with to(kCPU) (_to_copy) and read the copy. So a device backend supplies the
//   kernels that synchronise its stream and copy (a CUDA tensor prints, and item() waits for its
//   value), a Meta tensor's read is a NotImplementedError naming the operator, and a capture layer
//   sees each point where a captured graph must break. A CPU tensor's elements are already on the
//   host: to_vector() and printing read them in place (no operator); item() still dispatches.
#include <cstring>
#include <type_traits>

#include "loom/derivatives.h"
#include "op_call.h"

namespace loom {
namespace {

Scalar local_scalar_dense_cpu(const Tensor& self) {
  LOOM_CHECK(self.numel() == 1, "[_local_scalar_dense] a tensor with ", self.numel(),
             " elements (shape ", self.sizes(), ") cannot be converted to a scalar");
  Scalar out;
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), "item", [&] {
    scalar_t v = *static_cast<const scalar_t*>(self.data_ptr());
    if constexpr (std::is_same_v<scalar_t, bool>) {
      out = Scalar(v);
    } else if constexpr (std::is_integral_v<scalar_t>) {
      out = Scalar(static_cast<int64_t>(v));
    } else if constexpr (std::is_same_v<scalar_t, double>) {
      out = Scalar(v);
    } else {
      out = Scalar(static_cast<double>(static_cast<float>(v)));
    }
  });
  return out;
}

Scalar local_scalar_dense_meta(const Tensor& self) {
  LOOM_THROW(NotImplementedError, "[_local_scalar_dense] a meta tensor (shape ", self.sizes(),
             ") has no value to read (item() needs a tensor with data)");
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("_local_scalar_dense(Tensor self) -> Scalar");
  m.impl("_local_scalar_dense", DispatchKey::CPU, local_scalar_dense_cpu);
  m.impl("_local_scalar_dense", DispatchKey::Meta, local_scalar_dense_meta);
}

LOOM_DERIVATIVES(m) {
  m.nondifferentiable("_local_scalar_dense");
}

Scalar Tensor::item() const {
  if (!defined()) detail::throw_undefined_tensor("Tensor::item");
  LOOM_CHECK(numel() == 1, "[item] a tensor with ", numel(), " elements (shape ", sizes(),
             ") cannot be converted to a scalar");
  LOOM_CALL_OP("loom::_local_scalar_dense", Scalar(const Tensor&), *this);
}

namespace detail {
// The tensor whose elements a host read walks: `t` itself on the CPU, else its copy there.
Tensor host_readable(const Tensor& t) {
  return t.is_cpu() ? t : loom::to(t, TensorOptions(kCPU));
}
}  // namespace detail

template <class T>
std::vector<T> to_vector(const Tensor& tensor) {
  if (!tensor.defined()) detail::throw_undefined_tensor("to_vector");
  const Tensor t = detail::host_readable(tensor);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(t.numel()));
  const int64_t nd = t.dim();
  DimVector idx(static_cast<size_t>(nd), 0);
  IntArrayRef sizes = t.sizes(), strides = t.strides();
  LOOM_DISPATCH_ALL_TYPES(t.dtype(), "to_vector", [&] {
    const scalar_t* base = static_cast<const scalar_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off += idx[d] * strides[d];
      scalar_t v = base[off];
      if constexpr (std::is_same_v<T, bool>) {
        out.push_back(static_cast<float>(v) != 0.0f);
      } else if constexpr (std::is_same_v<scalar_t, Half> || std::is_same_v<scalar_t, BFloat16>) {
        out.push_back(static_cast<T>(static_cast<float>(v)));
      } else {
        out.push_back(static_cast<T>(v));  // exact for every integer type (no detour through float)
      }
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++idx[d] < sizes[d]) break;
        idx[d] = 0;
      }
    }
  });
  return out;
}

template LOOM_API std::vector<bool> to_vector<bool>(const Tensor&);
template LOOM_API std::vector<uint8_t> to_vector<uint8_t>(const Tensor&);
template LOOM_API std::vector<int32_t> to_vector<int32_t>(const Tensor&);
template LOOM_API std::vector<int64_t> to_vector<int64_t>(const Tensor&);
template LOOM_API std::vector<float> to_vector<float>(const Tensor&);
template LOOM_API std::vector<double> to_vector<double>(const Tensor&);

}  // namespace loom
