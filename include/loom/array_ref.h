// ArrayRef<T> and DimVector (core layer): a non-owning view of a contiguous array (like std::span
// but constructible from a braced list for call arguments), and a small vector with inline room for
// the common number of dimensions. IntArrayRef is how sizes, strides and dims are passed
// everywhere.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <vector>

#include "loom/export.h"

namespace loom {

template <class T>
class ArrayRef {
 public:
  constexpr ArrayRef() = default;
  constexpr ArrayRef(const T* data, size_t n) : data_(data), size_(n) {}
  constexpr ArrayRef(const T& one) : data_(&one), size_(1) {}  // NOLINT: a single value
  // The list must outlive the ArrayRef: fine for call arguments, wrong for a stored variable.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  constexpr ArrayRef(std::initializer_list<T> list)  // NOLINT
      : data_(list.begin() == list.end() ? nullptr : list.begin()), size_(list.size()) {}
#pragma GCC diagnostic pop
  template <class A>
  ArrayRef(const std::vector<T, A>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT

  constexpr const T* data() const {
    return data_;
  }
  constexpr size_t size() const {
    return size_;
  }
  constexpr bool empty() const {
    return size_ == 0;
  }
  constexpr const T* begin() const {
    return data_;
  }
  constexpr const T* end() const {
    return data_ + size_;
  }
  constexpr const T& operator[](size_t i) const {
    return data_[i];
  }
  constexpr const T& front() const {
    return data_[0];
  }
  constexpr const T& back() const {
    return data_[size_ - 1];
  }
  std::vector<T> vec() const {
    return std::vector<T>(data_, data_ + size_);
  }
  constexpr ArrayRef slice(size_t start, size_t n) const {
    return ArrayRef(data_ + start, n);
  }
  constexpr ArrayRef slice(size_t start) const {
    return ArrayRef(data_ + start, size_ - start);
  }

  bool equals(ArrayRef o) const {
    if (size_ != o.size_) return false;
    for (size_t i = 0; i < size_; ++i) {
      if (!(data_[i] == o.data_[i])) return false;
    }
    return true;
  }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

using IntArrayRef = ArrayRef<int64_t>;

inline bool operator==(IntArrayRef a, IntArrayRef b) {
  return a.equals(b);
}
inline bool operator!=(IntArrayRef a, IntArrayRef b) {
  return !a.equals(b);
}

// Prints "[2, 3]".
LOOM_API std::ostream& operator<<(std::ostream& os, IntArrayRef a);

// Product of sizes; 1 for an empty list.
inline int64_t multiply_sizes(IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// A vector of int64 with inline room for kInline values (no heap allocation for up to 6 dims).
class LOOM_API DimVector {
 public:
  static constexpr size_t kInline = 6;
  DimVector() = default;
  explicit DimVector(size_t n, int64_t value = 0) { assign(n, value); }
  DimVector(IntArrayRef a) { assign(a); }  // NOLINT
  DimVector(std::initializer_list<int64_t> l) { assign(IntArrayRef(l)); }
  DimVector(const DimVector& o) { assign(o.ref()); }
  DimVector& operator=(const DimVector& o) {
    if (this != &o) assign(o.ref());
    return *this;
  }
  DimVector(DimVector&& o) noexcept { steal(o); }
  DimVector& operator=(DimVector&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~DimVector() { release(); }

  void assign(IntArrayRef a) {
    resize(a.size());
    if (!a.empty()) std::memmove(data(), a.data(), a.size() * sizeof(int64_t));
  }
  void assign(size_t n, int64_t value) {
    resize(n);
    for (size_t i = 0; i < n; ++i) data()[i] = value;
  }
  // Inline while it fits (the common case: copying a tensor's sizes into a new one); grow() is
  // out of line.
  void resize(size_t n) {
    if (n > capacity_) grow(n);
    size_ = n;
  }
  void push_back(int64_t v) {
    resize(size_ + 1);
    data()[size_ - 1] = v;
  }
  void insert(size_t pos, int64_t v);
  void erase(size_t pos);
  void pop_back() { --size_; }

  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  IntArrayRef ref() const { return IntArrayRef(data(), size_); }
  operator IntArrayRef() const { return ref(); }  // NOLINT
  std::vector<int64_t> vec() const { return ref().vec(); }

 private:
  void grow(size_t n);
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    capacity_ = kInline;
    size_ = 0;
  }
  void steal(DimVector& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    if (o.heap_) {
      heap_ = o.heap_;
      o.heap_ = nullptr;
    } else {
      heap_ = nullptr;
      std::memcpy(inline_, o.inline_, sizeof(inline_));
    }
    o.size_ = 0;
    o.capacity_ = kInline;
  }

  int64_t inline_[kInline];
  int64_t* heap_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

}  // namespace loom
