// Tensors (core layer): Storage, TensorImpl and the Tensor handle.
//
// A Storage owns one allocation (a DataPtr) and the version counter shared by every view of it. A
// TensorImpl describes how to read a storage: sizes, strides, offset, dtype, device and dispatch
// keys; views are TensorImpls sharing one Storage. Tensor is a cheap value handle with an intrusive
// reference count: copying a Tensor never copies data. Reference counting is thread-safe; mutating
// one tensor from several threads at once is not (as in PyTorch).
#pragma once

#include <atomic>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/array_ref.h"
#include "loom/device.h"
#include "loom/dispatch_key.h"
#include "loom/dtype.h"
#include "loom/export.h"
#include "loom/memory.h"
#include "loom/scalar.h"

namespace loom {

// Base for intrusively reference-counted objects. The count starts at 0; IntrusivePtr takes it
// to 1.
class LOOM_API RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;
  int use_count() const { return refcount_.load(std::memory_order_relaxed); }

 private:
  template <class T>
  friend class IntrusivePtr;
  mutable std::atomic<int> refcount_{0};
};

template <class T>
class IntrusivePtr {
 public:
  IntrusivePtr() = default;
  explicit IntrusivePtr(T* p) : p_(p) { retain(); }
  IntrusivePtr(const IntrusivePtr& o) : p_(o.p_) { retain(); }
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  template <class U>
  IntrusivePtr(IntrusivePtr<U>&& o) noexcept : p_(o.release()) {}  // NOLINT
  IntrusivePtr& operator=(const IntrusivePtr& o) {
    IntrusivePtr(o).swap(*this);
    return *this;
  }
  IntrusivePtr& operator=(IntrusivePtr&& o) noexcept {
    IntrusivePtr(std::move(o)).swap(*this);
    return *this;
  }
  ~IntrusivePtr() { reset(); }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  void swap(IntrusivePtr& o) noexcept { std::swap(p_, o.p_); }
  void reset() {
    if (p_ && p_->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    p_ = nullptr;
  }
  // Gives up ownership without decrementing.
  T* release() {
    T* p = p_;
    p_ = nullptr;
    return p;
  }
  bool operator==(const IntrusivePtr& o) const { return p_ == o.p_; }

 private:
  void retain() {
    if (p_) p_->refcount_.fetch_add(1, std::memory_order_relaxed);
  }
  T* p_ = nullptr;
};

template <class T, class... Args>
IntrusivePtr<T> make_intrusive(Args&&... args) {
  return IntrusivePtr<T>(new T(std::forward<Args>(args)...));
}

class LOOM_API StorageImpl : public RefCounted {
 public:
  StorageImpl(DataPtr data, size_t nbytes, Allocator* allocator)
      : data_(std::move(data)), nbytes_(nbytes), allocator_(allocator) {}

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return data_.device(); }
  Allocator* allocator() const { return allocator_; }
  const DataPtr& data_ptr() const { return data_; }
  // Replaces the allocation (used by resize_ and by IPC). The old memory is freed.
  void set_data_ptr(DataPtr data, size_t nbytes) {
    data_ = std::move(data);
    nbytes_ = nbytes;
  }
  // Exchanges the allocations of two storages (a CUDA graph's output handed to the caller keeps
  // its contents when the graph's memory is taken back: Note [CUDA graphs] in
  // compiler/cuda_graph.cpp). Version counters stay.
  void swap_data(StorageImpl& other) {
    std::swap(data_, other.data_);
    std::swap(nbytes_, other.nbytes_);
    std::swap(allocator_, other.allocator_);
  }

  // Incremented by every in-place write through any view of this storage; autograd compares it with
  // the value it saved to detect "a saved tensor was modified".
  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr data_;
  size_t nbytes_;
  Allocator* allocator_;
  std::atomic<uint32_t> version_{0};
};

using Storage = IntrusivePtr<StorageImpl>;

// Creates a storage of nbytes on the device's allocator.
LOOM_API Storage make_storage(size_t nbytes, Device device);

// Autograd keeps its per-tensor state behind this interface (defined by the autograd layer). A null
// pointer means "does not require grad and has no grad_fn", the common and fast case.
class LOOM_API AutogradMetaInterface {
 public:
  virtual ~AutogradMetaInterface() = default;
  virtual bool requires_grad() const = 0;
};

class LOOM_API TensorImpl : public RefCounted {
 public:
  TensorImpl(Storage storage, DType dtype, IntArrayRef sizes, IntArrayRef strides,
             int64_t storage_offset);
  ~TensorImpl() override;

  IntArrayRef sizes() const { return sizes_.ref(); }
  IntArrayRef strides() const { return strides_.ref(); }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t storage_offset() const { return storage_offset_; }
  bool is_contiguous() const { return is_contiguous_; }
  const Storage& storage() const { return storage_; }
  DispatchKeySet key_set() const { return key_set_; }

  // Address of element 0 (storage data + offset). Null for Meta tensors.
  void* data() const {
    return static_cast<char*>(storage_->data()) +
           storage_offset_ * static_cast<int64_t>(element_size(dtype_));
  }

  // Changes the view (sizes, strides, offset) in place; storage bounds are the caller's business.
  void set_sizes_and_strides(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
  void set_storage(Storage s) { storage_ = std::move(s); }

  void add_key(DispatchKey k) { key_set_ = key_set_.add(k); }
  void remove_key(DispatchKey k) { key_set_ = key_set_.remove(k); }

  // True for a 0-dim tensor made from a C++ number (`t + 2.0`): it takes part in type promotion
  // with the lowest priority, like a Python number does in PyTorch.
  bool is_wrapped_number() const { return wrapped_number_; }
  void set_wrapped_number(bool v) { wrapped_number_ = v; }

  AutogradMetaInterface* autograd_meta() const { return autograd_meta_.get(); }
  void set_autograd_meta(std::unique_ptr<AutogradMetaInterface> m);

 private:
  void refresh();  // recomputes numel_ and is_contiguous_

  Storage storage_;
  int64_t storage_offset_ = 0;
  DimVector sizes_;
  DimVector strides_;
  int64_t numel_ = 0;
  DType dtype_;
  Device device_;
  bool is_contiguous_ = true;
  bool wrapped_number_ = false;
  DispatchKeySet key_set_;
  std::unique_ptr<AutogradMetaInterface> autograd_meta_;
};

class Tensor;
using TensorList = ArrayRef<Tensor>;

// dtype and device of a new tensor, as in PyTorch's TensorOptions: zeros({2, 3}, kFloat64).
struct TensorOptions {
  std::optional<DType> dtype;
  std::optional<Device> device;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}                // NOLINT
  TensorOptions(Device d) : device(d) {}              // NOLINT
  TensorOptions(DeviceType d) : device(Device(d)) {}  // NOLINT
  TensorOptions with_dtype(DType t) const {
    TensorOptions o = *this;
    o.dtype = t;
    return o;
  }
  TensorOptions with_device(Device d) const {
    TensorOptions o = *this;
    o.device = d;
    return o;
  }
};

namespace detail {
// Throws ValueError "[where] called on an undefined tensor (a default-constructed Tensor holds no
// data)". Out of line: the throwing path stays out of the callers.
[[noreturn]] LOOM_API void throw_undefined_tensor(const char* where);
}  // namespace detail

// Note [undefined tensors]
//   A default-constructed Tensor holds no TensorImpl. defined(), impl(), impl_ptr(), use_count(),
//   is_same() and str() answer for it (false, null, 0, ..., "tensor(undefined)"); every other
//   method throws ValueError naming itself ("[Tensor::dim] called on an undefined tensor ..."), at
//   the cost of one predictable branch. Operators reject an undefined Tensor (or Tensor[] element)
//   argument at the dispatcher's entry, where it computes the arguments' dispatch keys
//   (detail::keys_of in loom/detail/boxing.h), naming the operator and the argument; an undefined
//   tensor passed for a Tensor? argument means "none", as in PyTorch.
class LOOM_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const IntrusivePtr<TensorImpl>& impl_ptr() const { return impl_; }
  int use_count() const { return impl_ ? impl_->use_count() : 0; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Shape and type. size(d) and stride(d) accept negative dims and throw IndexError when out of
  // range.
  LOOM_ALWAYS_INLINE IntArrayRef sizes() const { return checked("Tensor::sizes").sizes(); }
  LOOM_ALWAYS_INLINE IntArrayRef strides() const { return checked("Tensor::strides").strides(); }
  LOOM_ALWAYS_INLINE IntArrayRef shape() const { return checked("Tensor::shape").sizes(); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  LOOM_ALWAYS_INLINE int64_t dim() const { return checked("Tensor::dim").dim(); }
  LOOM_ALWAYS_INLINE int64_t ndim() const { return checked("Tensor::ndim").dim(); }
  LOOM_ALWAYS_INLINE int64_t numel() const { return checked("Tensor::numel").numel(); }
  LOOM_ALWAYS_INLINE DType dtype() const { return checked("Tensor::dtype").dtype(); }
  LOOM_ALWAYS_INLINE Device device() const { return checked("Tensor::device").device(); }
  LOOM_ALWAYS_INLINE bool is_cpu() const { return checked("Tensor::is_cpu").device().is_cpu(); }
  LOOM_ALWAYS_INLINE bool is_cuda() const { return checked("Tensor::is_cuda").device().is_cuda(); }
  LOOM_ALWAYS_INLINE bool is_meta() const { return checked("Tensor::is_meta").device().is_meta(); }
  LOOM_ALWAYS_INLINE bool is_contiguous() const {
    return checked("Tensor::is_contiguous").is_contiguous();
  }
  LOOM_ALWAYS_INLINE bool is_floating_point() const {
    return is_floating(checked("Tensor::is_floating_point").dtype());
  }
  LOOM_ALWAYS_INLINE int64_t storage_offset() const {
    return checked("Tensor::storage_offset").storage_offset();
  }
  LOOM_ALWAYS_INLINE size_t element_size() const {
    return loom::element_size(checked("Tensor::element_size").dtype());
  }
  LOOM_ALWAYS_INLINE size_t nbytes() const {
    const TensorImpl& i = checked("Tensor::nbytes");
    return static_cast<size_t>(i.numel()) * loom::element_size(i.dtype());
  }
  LOOM_ALWAYS_INLINE const Storage& storage() const { return checked("Tensor::storage").storage(); }
  LOOM_ALWAYS_INLINE DispatchKeySet key_set() const { return checked("Tensor::key_set").key_set(); }
  LOOM_ALWAYS_INLINE uint32_t version() const {
    return checked("Tensor::version").storage()->version();
  }
  // The options (dtype, device) that make a tensor like this one.
  LOOM_ALWAYS_INLINE TensorOptions options() const {
    const TensorImpl& i = checked("Tensor::options");
    return TensorOptions(i.dtype()).with_device(i.device());
  }

  // Data access. data_ptr<T>() checks that T matches the dtype (TypeError otherwise).
  LOOM_ALWAYS_INLINE void* data_ptr() const { return checked("Tensor::data_ptr").data(); }
  template <class T>
  T* data_ptr() const {
    check_dtype_for_access(DTypeOf<T>::value);
    return static_cast<T*>(impl_->data());
  }
  // The value of a one-element tensor (ValueError otherwise), read by the dispatched operator
  // _local_scalar_dense, which waits for a device's work (Note [Host reads] in
  // src/ops/host_read.cpp).
  Scalar item() const;
  template <class T>
  T item() const {
    return item().to<T>();
  }

  // PyTorch-style text: tensor([[1., 2.], [3., 4.]], dtype=int32).
  std::string str() const;
  std::string shape_str() const;  // "[2, 3]"

  // Views (share storage). See ops.h for the full set of operators.
  Tensor view(IntArrayRef size) const;
  Tensor reshape(IntArrayRef size) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
               int64_t step = 1) const;
  Tensor expand(IntArrayRef size) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze(std::optional<int64_t> dim = std::nullopt) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // Copies and conversions.
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(TensorOptions options) const;
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& fill_(const Scalar& value) const;
  const Tensor& zero_() const;

  // A few common operators as methods (the free functions in ops.h are the full API).
  Tensor add(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& other, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  const Tensor& add_(const Tensor& other, const Scalar& alpha = 1) const;
  const Tensor& sub_(const Tensor& other, const Scalar& alpha = 1) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& mul_(const Scalar& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sum() const;
  Tensor sum(IntArrayRef dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;

  // Autograd (see autograd.h for the full API: grad(), hooks, grad modes).
  bool requires_grad() const;
  const Tensor& requires_grad_(bool requires_grad = true) const;
  bool is_leaf() const;
  // The accumulated gradient of a leaf (undefined before the first backward).
  Tensor grad() const;
  // Backpropagates from this tensor; `gradient` may be omitted for a one-element tensor.
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  Tensor detach() const;
  void retain_grad() const;

  void check_dtype_for_access(DType expected) const;

 private:
  // The impl, or ValueError naming `method` (Note [undefined tensors]). Always inlined, as the
  // accessors using it: kernels call them many times per operator.
  LOOM_ALWAYS_INLINE const TensorImpl& checked(const char* method) const {
    if (LOOM_UNLIKELY(!impl_)) detail::throw_undefined_tensor(method);
    return *impl_;
  }

  IntrusivePtr<TensorImpl> impl_;
};

LOOM_API std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Wraps an existing storage as a tensor (no copy).
LOOM_API Tensor make_tensor(Storage storage, DType dtype, IntArrayRef sizes, IntArrayRef strides,
                            int64_t storage_offset = 0);
// A new uninitialised contiguous tensor (no dispatch; used by kernels). Sizes are checked as by
// checked_nbytes (op "empty").
LOOM_API Tensor empty_tensor(IntArrayRef sizes, DType dtype, Device device = kCPU);

// Note [checked sizes]
//   Element counts and byte sizes are computed with overflow checks wherever a tensor is created,
//   viewed or resized: a product of sizes that does not fit int64, or a byte size above INT64_MAX,
//   would otherwise wrap to a small number and give a tensor whose storage is far smaller than its
//   shape says. checked_numel and checked_nbytes throw ValueError naming the operator, the sizes
//   and (for bytes) the dtype; TensorImpl checks its own sizes again as a backstop.
namespace detail {
// The out-of-line rest of checked_numel / checked_nbytes when their fast loop saw a negative size
// or an overflow: the count when a zero size makes the overflow harmless, else the ValueError.
LOOM_API int64_t checked_numel_slow(IntArrayRef sizes, const char* op);
[[noreturn]] LOOM_API void throw_too_many_bytes(IntArrayRef sizes, DType dtype, const char* op);
}  // namespace detail
// The number of elements of `sizes`; ValueError naming `op` for a negative size or an overflow.
// Inline: every new tensor and every TensorIterator counts its elements.
inline int64_t checked_numel(IntArrayRef sizes, const char* op) {
  int64_t n = 1;
  bool bad = false;
  for (int64_t s : sizes) {
    bad |= s < 0;
    bad |= __builtin_mul_overflow(n, s, &n);
  }
  return LOOM_UNLIKELY(bad) ? detail::checked_numel_slow(sizes, op) : n;
}
// The bytes of a contiguous tensor of `sizes` and `dtype`; ValueError naming `op` as checked_numel
// does, or when the byte count exceeds INT64_MAX.
inline size_t checked_nbytes(IntArrayRef sizes, DType dtype, const char* op) {
  int64_t bytes = 0;
  if (LOOM_UNLIKELY(__builtin_mul_overflow(checked_numel(sizes, op),
                                           static_cast<int64_t>(element_size(dtype)), &bytes))) {
    detail::throw_too_many_bytes(sizes, dtype, op);
  }
  return static_cast<size_t>(bytes);
}
// Contiguous strides for sizes.
LOOM_API DimVector contiguous_strides(IntArrayRef sizes);
// A 0-dim tensor holding s, flagged as a wrapped number for type promotion.
LOOM_API Tensor wrap_scalar(const Scalar& s, Device device = kCPU);
// Normalises a possibly negative dim against a rank; IndexError naming op and rank otherwise.
LOOM_API int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);

namespace detail {
LOOM_API void check_from_vector(int64_t got, int64_t want);
}

// Copies a C++ array into a new CPU tensor of the matching dtype: from_vector({1.f, 2.f}, {2}).
template <class T>
Tensor from_vector(const std::vector<T>& values, IntArrayRef sizes) {
  Tensor t = empty_tensor(sizes, DTypeOf<T>::value);
  detail::check_from_vector(static_cast<int64_t>(values.size()), t.numel());
  T* out = static_cast<T*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}
template <class T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, {static_cast<int64_t>(values.size())});
}
// Reads a tensor's elements (any layout, any dtype, any device: Note [Host reads] in
// src/ops/host_read.cpp) into a vector, converting to T. Instantiated
// for bool, uint8_t, int32_t, int64_t, float and double.
template <class T>
LOOM_API std::vector<T> to_vector(const Tensor& t);

}  // namespace loom
