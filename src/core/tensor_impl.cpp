#include <ostream>
#include <sstream>

#include "loom/error.h"
#include "loom/tensor.h"

namespace loom {

std::ostream& operator<<(std::ostream& os, IntArrayRef a) {
  os << "[";
  for (size_t i = 0; i < a.size(); ++i) os << (i ? ", " : "") << a[i];
  return os << "]";
}

void DimVector::grow(size_t n) {
  size_t cap = capacity_ * 2 > n ? capacity_ * 2 : n;
  auto* p = new int64_t[cap];
  std::memcpy(p, data(), size_ * sizeof(int64_t));
  delete[] heap_;
  heap_ = p;
  capacity_ = cap;
}

void DimVector::insert(size_t pos, int64_t v) {
  resize(size_ + 1);
  int64_t* d = data();
  for (size_t i = size_ - 1; i > pos; --i) d[i] = d[i - 1];
  d[pos] = v;
}

void DimVector::erase(size_t pos) {
  int64_t* d = data();
  for (size_t i = pos; i + 1 < size_; ++i) d[i] = d[i + 1];
  --size_;
}

Storage make_storage(size_t nbytes, Device device) {
  Allocator* a = get_allocator(device);
  DataPtr p = a->allocate(nbytes);
  return make_intrusive<StorageImpl>(std::move(p), nbytes, a);
}

TensorImpl::TensorImpl(Storage storage, DType dtype, IntArrayRef sizes, IntArrayRef strides,
                       int64_t storage_offset)
    : storage_(std::move(storage)),
      storage_offset_(storage_offset),
      sizes_(sizes),
      strides_(strides),
      dtype_(dtype),
      device_(storage_->device()),
      key_set_(backend_key(storage_->device().type())) {
  refresh();
}

TensorImpl::~TensorImpl() = default;

void TensorImpl::set_sizes_and_strides(IntArrayRef sizes, IntArrayRef strides,
                                       int64_t storage_offset) {
  sizes_.assign(sizes);
  strides_.assign(strides);
  storage_offset_ = storage_offset;
  refresh();
}

void TensorImpl::set_autograd_meta(std::unique_ptr<AutogradMetaInterface> m) {
  autograd_meta_ = std::move(m);
}

void TensorImpl::refresh() {
  LOOM_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "sizes ", sizes_.ref(), " strides ",
                       strides_.ref());
  int64_t n = 1;
  bool contiguous = true, bad = false;
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
    int64_t s = sizes_[d];
    bad |= s < 0;
    bad |= __builtin_mul_overflow(n, s, &n);
    if (s != 1) {
      if (strides_[d] != expected) contiguous = false;
      (void)__builtin_mul_overflow(expected, s, &expected);  // wraps only beside a zero size
    }
  }
  // The backstop of Note [checked sizes]: operators check their sizes (naming themselves) first.
  if (LOOM_UNLIKELY(bad)) n = detail::checked_numel_slow(sizes_.ref(), "tensor");
  numel_ = n;
  is_contiguous_ = contiguous || n == 0;
}

DimVector contiguous_strides(IntArrayRef sizes) {
  DimVector strides(sizes.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    // Wraps only when another size is 0 (an empty tensor, whose strides are never used to read).
    (void)__builtin_mul_overflow(s, sizes[d] > 1 ? sizes[d] : 1, &s);
  }
  return strides;
}

Tensor make_tensor(Storage storage, DType dtype, IntArrayRef sizes, IntArrayRef strides,
                   int64_t storage_offset) {
  return Tensor(
      make_intrusive<TensorImpl>(std::move(storage), dtype, sizes, strides, storage_offset));
}

namespace detail {
int64_t checked_numel_slow(IntArrayRef sizes, const char* op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, "[", op, "] sizes must be non-negative but got ", sizes);
    overflow |= __builtin_mul_overflow(n, s, &n);
  }
  // A zero anywhere makes the tensor empty, however large the other sizes are.
  for (int64_t s : sizes) overflow &= s != 0;
  LOOM_CHECK(!overflow, "[", op, "] sizes ", sizes,
             " have more elements than int64 can count (the product of the sizes overflows)");
  return n;
}

void throw_too_many_bytes(IntArrayRef sizes, DType dtype, const char* op) {
  LOOM_THROW(ValueError, "[", op, "] sizes ", sizes, " of ", dtype, " need ",
             checked_numel(sizes, op), " x ", element_size(dtype),
             " bytes, more than the largest allocation (2^63 - 1 bytes)");
}
}  // namespace detail

Tensor empty_tensor(IntArrayRef sizes, DType dtype, Device device) {
  Storage st = make_storage(checked_nbytes(sizes, dtype, "empty"), device);
  return Tensor(
      make_intrusive<TensorImpl>(std::move(st), dtype, sizes, contiguous_strides(sizes), 0));
}

Tensor wrap_scalar(const Scalar& s, Device device) {
  DType dt = s.is_bool() ? kBool : (s.is_integral() ? kInt64 : kFloat64);
  Tensor t = empty_tensor({}, dt, device);
  if (device.is_cpu()) {
    LOOM_DISPATCH_ALL_TYPES(dt, "wrap_scalar", [&] { *t.data_ptr<scalar_t>() = s.to<scalar_t>(); });
  }
  t.impl()->set_wrapped_number(true);
  return t;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = rank <= 0 ? 1 : rank;  // a 0-dim tensor accepts dim 0 and -1
  LOOM_CHECK_INDEX(dim >= -r && dim < r, "[", op, "] dimension ", dim,
                   " is out of range for a tensor of rank ", rank, " (expected in [", -r, ", ",
                   r - 1, "])");
  return dim < 0 ? dim + r : dim;
}

namespace detail {
void throw_undefined_tensor(const char* where) {
  LOOM_THROW(ValueError, "[", where,
             "] called on an undefined tensor (a default-constructed Tensor holds no data)");
}
}  // namespace detail

int64_t Tensor::size(int64_t d) const {
  const TensorImpl& i = checked("Tensor::size");
  return i.sizes()[wrap_dim(d, i.dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  const TensorImpl& i = checked("Tensor::stride");
  return i.strides()[wrap_dim(d, i.dim(), "stride")];
}

void Tensor::check_dtype_for_access(DType expected) const {
  const DType have = checked("Tensor::data_ptr").dtype();
  LOOM_CHECK_TYPE(have == expected, "[data_ptr] the tensor has dtype ", have,
                  " but the element type asked for is ", expected);
}

std::string Tensor::shape_str() const {
  std::ostringstream os;
  os << checked("Tensor::shape_str").sizes();
  return os.str();
}

namespace detail {
void check_from_vector(int64_t got, int64_t want) {
  LOOM_CHECK(got == want, "[from_vector] got ", got, " values for a tensor of ", want, " elements");
}
}  // namespace detail

}  // namespace loom
