// SmallVector<T, N> (core layer, internal but header-only because autograd.h's Node uses it): a
// vector with room for N elements inside the object, so that a list that stays short never
// allocates.
//
// Why: recording one autograd node used to make a separate heap allocation for each of its short
// lists (next edges, input metadata, saved values, non-tensor arguments), and those allocations and
// frees were the largest single cost of recording a small operation. The subset of std::vector's
// interface here is what the autograd layer uses. Plain value type; not synchronised.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace loom::detail {

template <class T, size_t N>
class SmallVector {
  static_assert(N > 0, "SmallVector needs inline room for at least one element");
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                "SmallVector's heap storage uses plain operator new");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;
  using size_type = size_t;

  SmallVector() noexcept : data_(inline_data()) {}
  SmallVector(const SmallVector& o) : SmallVector() { append_copies(o); }
  SmallVector(SmallVector&& o) noexcept(std::is_nothrow_move_constructible_v<T>) : SmallVector() {
    take(std::move(o));
  }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      clear();
      append_copies(o);
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &o) {
      clear();
      free_heap();
      take(std::move(o));
    }
    return *this;
  }
  ~SmallVector() {
    clear();
    free_heap();
  }

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  template <class... A>
  T& emplace_back(A&&... args) {
    if (size_ == capacity_) {
      // The arguments may refer to an element of this vector: build the value before moving house.
      T value(std::forward<A>(args)...);
      grow(capacity_ * 2);
      return *new (data_ + size_++) T(std::move(value));
    }
    return *new (data_ + size_++) T(std::forward<A>(args)...);
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  void pop_back() { data_[--size_].~T(); }
  void resize(size_t n) {
    while (size_ > n) pop_back();
    reserve(n);
    while (size_ < n) new (data_ + size_++) T();
  }
  void clear() {
    std::destroy(data_, data_ + size_);
    size_ = 0;
  }

 private:
  T* inline_data() { return reinterpret_cast<T*>(inline_); }
  bool on_heap() const { return data_ != reinterpret_cast<const T*>(inline_); }
  void free_heap() {
    if (on_heap()) ::operator delete(data_);
    data_ = inline_data();
    capacity_ = N;
  }
  void grow(size_t n) {
    T* p = static_cast<T*>(::operator new(n * sizeof(T)));
    std::uninitialized_move(data_, data_ + size_, p);
    std::destroy(data_, data_ + size_);
    if (on_heap()) ::operator delete(data_);
    data_ = p;
    capacity_ = n;
  }
  void append_copies(const SmallVector& o) {
    reserve(size_ + o.size_);
    for (const T& v : o) new (data_ + size_++) T(v);
  }
  // Requires this to be empty with inline storage.
  void take(SmallVector&& o) {
    if (o.on_heap()) {
      data_ = o.data_;
      capacity_ = o.capacity_;
      size_ = o.size_;
      o.data_ = o.inline_data();
      o.capacity_ = N;
      o.size_ = 0;
      return;
    }
    for (T& v : o) new (data_ + size_++) T(std::move(v));
    o.clear();
  }

  T* data_;
  size_t size_ = 0;
  size_t capacity_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

}  // namespace loom::detail
