// Tensor's member functions: each forwards to the free function in ops.h.
#include "loom/ops.h"

namespace loom {

Tensor Tensor::view(IntArrayRef size) const {
  return loom::view(*this, size);
}
Tensor Tensor::reshape(IntArrayRef size) const {
  return loom::reshape(*this, size);
}
Tensor Tensor::permute(IntArrayRef dims) const {
  return loom::permute(*this, dims);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return loom::transpose(*this, d0, d1);
}
Tensor Tensor::t() const {
  return loom::t(*this);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return loom::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return loom::select(*this, dim, index);
}
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  return loom::slice(*this, dim, start, end, step);
}
Tensor Tensor::expand(IntArrayRef size) const {
  return loom::expand(*this, size);
}
Tensor Tensor::expand_as(const Tensor& other) const {
  if (!defined() || !other.defined()) detail::throw_undefined_tensor("Tensor::expand_as");
  return loom::expand(*this, other.sizes());
}
Tensor Tensor::squeeze(std::optional<int64_t> dim) const {
  return loom::squeeze(*this, dim);
}
Tensor Tensor::unsqueeze(int64_t dim) const {
  return loom::unsqueeze(*this, dim);
}
Tensor Tensor::flatten(int64_t s, int64_t e) const {
  return loom::flatten(*this, s, e);
}
Tensor Tensor::contiguous() const {
  return loom::contiguous(*this);
}
Tensor Tensor::clone() const {
  return loom::clone(*this);
}
Tensor Tensor::to(DType dtype) const {
  return loom::to(*this, TensorOptions(dtype));
}
Tensor Tensor::to(Device device) const {
  return loom::to(*this, TensorOptions(device));
}
Tensor Tensor::to(TensorOptions options) const {
  return loom::to(*this, options);
}
const Tensor& Tensor::copy_(const Tensor& src) const {
  return loom::copy_(*this, src);
}
const Tensor& Tensor::fill_(const Scalar& value) const {
  return loom::fill_(*this, value);
}
const Tensor& Tensor::zero_() const {
  return loom::zero_(*this);
}
Tensor Tensor::add(const Tensor& other, const Scalar& alpha) const {
  return loom::add(*this, other, alpha);
}
Tensor Tensor::sub(const Tensor& other, const Scalar& alpha) const {
  return loom::sub(*this, other, alpha);
}
Tensor Tensor::mul(const Tensor& other) const {
  return loom::mul(*this, other);
}
Tensor Tensor::div(const Tensor& other) const {
  return loom::div(*this, other);
}
const Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) const {
  return loom::add_(*this, other, alpha);
}
const Tensor& Tensor::sub_(const Tensor& other, const Scalar& alpha) const {
  return loom::sub_(*this, other, alpha);
}
const Tensor& Tensor::mul_(const Tensor& other) const {
  return loom::mul_(*this, other);
}
const Tensor& Tensor::div_(const Tensor& other) const {
  return loom::div_(*this, other);
}
const Tensor& Tensor::mul_(const Scalar& other) const {
  return loom::mul_(*this, other);
}
Tensor Tensor::neg() const {
  return loom::neg(*this);
}
Tensor Tensor::exp() const {
  return loom::exp(*this);
}
Tensor Tensor::log() const {
  return loom::log(*this);
}
Tensor Tensor::sqrt() const {
  return loom::sqrt(*this);
}
Tensor Tensor::abs() const {
  return loom::abs(*this);
}
Tensor Tensor::relu() const {
  return loom::relu(*this);
}
Tensor Tensor::sum() const {
  return loom::sum(*this);
}
Tensor Tensor::sum(IntArrayRef dim, bool keepdim) const {
  return loom::sum(*this, dim, keepdim);
}
Tensor Tensor::mean() const {
  return loom::mean(*this);
}
Tensor Tensor::mean(IntArrayRef dim, bool keepdim) const {
  return loom::mean(*this, dim, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return loom::argmax(*this, dim, keepdim);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return loom::matmul(*this, other);
}

}  // namespace loom
