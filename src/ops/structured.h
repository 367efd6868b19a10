// Structured operators (ops layer, internal): a shape function apart from its kernels.
//
// Note [Shape functions and kernels]
// An operator is split in two, as PyTorch's structured kernels are:
//  - its shape function: pure, from the inputs' sizes, strides, dtypes and devices (a TensorMetaRef
//    each) and the non-tensor arguments to the outputs' sizes, strides and dtypes (TensorMeta). It
//    checks the arguments (throwing the operator's errors) and touches no data and no allocator. It
//    is what the Meta key runs, and what a compiler reuses to propagate (symbolic) shapes;
//  - its kernel per backend (src/ops/cpu/<family>_kernels.cpp): loops only. A kernel is handed
//    outputs already sized and never asks whether a tensor is a Meta tensor.
// Structured<shape, loop> builds the Meta kernel (shape fn + empty meta output) and the CPU kernels
// (shape fn + allocate the output, or resize a caller's out=, then the loop) from the pair, so
// every family registers the same way: the operator file registers Meta (register_meta), the kernel
// file its backend (register_cpu; a CUDA file would add register_cuda and its loops). Operators
// that run through TensorIterator keep it as their CPU kernel (it broadcasts and promotes with the
// same pure functions: broadcast_shapes, result_type) and register their shape function for Meta
// with register_meta.
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/export.h"
#include "loom/tensor.h"

namespace loom {

// What a shape function sees of a tensor: a non-owning view of its metadata, never its data.
struct TensorMetaRef {
  IntArrayRef sizes;
  IntArrayRef strides;
  DType dtype = kFloat32;
  Device device = kCPU;
  bool wrapped_number =
      false;  // a C++ number wrapped as a 0-dim tensor (promotion treats it apart)

  TensorMetaRef() = default;
  TensorMetaRef(IntArrayRef sizes_, IntArrayRef strides_, DType dtype_, Device device_ = kCPU,
                bool wrapped = false)
      : sizes(sizes_), strides(strides_), dtype(dtype_), device(device_), wrapped_number(wrapped) {}
  // Implicit, so that a kernel passes its Tensor arguments to its shape function unchanged.
  TensorMetaRef(const Tensor& t)  // NOLINT(google-explicit-constructor)
      : sizes(t.sizes()),
        strides(t.strides()),
        dtype(t.dtype()),
        device(t.device()),
        wrapped_number(t.impl()->is_wrapped_number()) {}
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t size(int64_t d) const { return sizes[static_cast<size_t>(d < 0 ? d + dim() : d)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

// A Tensor? argument as a shape function sees it: none, or a tensor's metadata (an undefined tensor
// passed for a Tensor? means none, Note [undefined tensors]).
struct OptionalTensorMetaRef {
  std::optional<TensorMetaRef> ref;
  OptionalTensorMetaRef() = default;
  OptionalTensorMetaRef(std::nullopt_t) {}                 // NOLINT(google-explicit-constructor)
  OptionalTensorMetaRef(const std::optional<Tensor>& t) {  // NOLINT(google-explicit-constructor)
    if (t.has_value() && t->defined()) ref = TensorMetaRef(*t);
  }
  explicit OptionalTensorMetaRef(const TensorMetaRef& t) : ref(t) {}
  bool has_value() const { return ref.has_value(); }
  const TensorMetaRef* operator->() const { return &*ref; }
  const TensorMetaRef& operator*() const { return *ref; }
};

// A Tensor[] argument as a shape function sees it: each element's metadata, made on access (no
// copy of the list).
class TensorMetaList {
 public:
  TensorMetaList(TensorList tensors) : tensors_(tensors) {}  // NOLINT(google-explicit-constructor)
  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  // Whether element i is a tensor at all (an undefined element is an error the op names).
  bool defined(size_t i) const { return tensors_[i].defined(); }
  TensorMetaRef operator[](size_t i) const { return TensorMetaRef(tensors_[i]); }

 private:
  TensorList tensors_;
};

// What a shape function returns for one output. Empty strides mean contiguous.
struct TensorMeta {
  DimVector sizes;
  DimVector strides;
  DType dtype = kFloat32;
  bool defined = true;  // false: the output is an undefined tensor (not asked for)

  TensorMeta() = default;
  TensorMeta(IntArrayRef sizes_, DType dtype_) : sizes(sizes_), dtype(dtype_) {}
  TensorMeta(IntArrayRef sizes_, IntArrayRef strides_, DType dtype_)
      : sizes(sizes_), strides(strides_), dtype(dtype_) {}
  // The strides an output gets: the given ones, else contiguous ones.
  DimVector output_strides() const { return strides.empty() ? contiguous_strides(sizes) : strides; }
};

// ---- pure pieces shared by shape functions and TensorIterator ----

// The broadcast of the inputs' sizes; ValueError naming `op` and every shape when they do not
// broadcast, or when the result's element count overflows (Note [checked sizes]).
LOOM_API DimVector broadcast_shapes(const char* op, std::initializer_list<TensorMetaRef> inputs);
LOOM_API DimVector broadcast_shapes(const char* op, const TensorMetaRef* inputs, size_t n);

// Result dtype of pointwise promotion (Note [Promotion categories]); entries whose skip flag is
// set take no part.
LOOM_API DType result_type(std::initializer_list<TensorMetaRef> inputs);
LOOM_API DType result_type(const TensorMetaRef* inputs, size_t n, const bool* skip = nullptr);

// The device of a pointwise op's inputs: the first that is not a CPU 0-dim tensor (those mix with
// any device); ValueError naming `op` when two others differ.
LOOM_API Device common_device(const char* op, const TensorMetaRef* inputs, size_t n);

// ---- building outputs from a TensorMeta ----

// The meta of an output that is not produced (an undefined tensor).
inline TensorMeta undefined_meta() {
  TensorMeta m;
  m.defined = false;
  return m;
}
// An output of the Meta backend: sizes, strides and dtype, no storage bytes.
LOOM_API Tensor meta_output(const TensorMeta& m);
// A fresh output on `device` (the backend's), with the meta's geometry.
LOOM_API Tensor allocate_output(const TensorMeta& m, Device device);
// Makes a caller's out= tensor fit `m`: checks its device and that the result dtype can be cast to
// its dtype, resizes it (a new buffer when the old is too small) when its sizes differ, and
// returns the tensor the loop should write (out itself, or a temporary of m's dtype when out's
// dtype differs; finish_out copies that back).
LOOM_API Tensor prepare_out(const char* op, const Tensor& out, const TensorMeta& m, Device device);
// The Meta kernel of an in-place pointwise op: self must already have the result's shape and be
// able to hold its dtype (TensorIterator's rules); returns self.
LOOM_API Tensor meta_inplace(const char* op, const Tensor& self, const TensorMeta& m);
// Copies a temporary written by the loop back into the caller's out= (or bumps out's version).
LOOM_API void finish_out(const Tensor& out, const Tensor& written);

// ---- registering a shape function with its kernels ----

// A shape function's TensorMetaRef parameter is a kernel's `const Tensor&`; others are the same.
template <class A>
struct KernelArg {
  using type = A;
};
template <>
struct KernelArg<TensorMetaRef> {
  using type = const Tensor&;
};
template <>
struct KernelArg<const TensorMetaRef&> {
  using type = const Tensor&;
};
template <>
struct KernelArg<OptionalTensorMetaRef> {
  using type = const std::optional<Tensor>&;
};
template <>
struct KernelArg<const OptionalTensorMetaRef&> {
  using type = const std::optional<Tensor>&;
};
template <>
struct KernelArg<TensorMetaList> {
  using type = TensorList;
};
template <class A>
using kernel_arg_t = typename KernelArg<A>::type;

template <size_t N, size_t... I>
auto to_tuple(const std::array<Tensor, N>& outs, std::index_sequence<I...>) {
  return std::make_tuple(outs[I]...);
}
template <size_t N>
using TensorTuple = decltype(to_tuple(std::array<Tensor, N>{}, std::make_index_sequence<N>{}));

// The Meta kernel of a shape function: the shape function, then empty meta outputs. The operator
// file registers it (register_meta); its backend kernels are registered from their own files.
template <auto Shape, class Sig = decltype(Shape)>
struct MetaKernel;
template <auto Shape, class... A>
struct MetaKernel<Shape, TensorMeta (*)(A...)> {
  static Tensor run(kernel_arg_t<A>... a) { return meta_output(Shape(a...)); }
  static void register_meta(Library& m, const char* name) { m.impl(name, DispatchKey::Meta, &run); }
};
template <auto Shape, size_t N, class... A>
struct MetaKernel<Shape, std::array<TensorMeta, N> (*)(A...)> {
  static TensorTuple<N> run(kernel_arg_t<A>... a) {
    const std::array<TensorMeta, N> ms = Shape(a...);
    std::array<Tensor, N> outs;
    for (size_t i = 0; i < N; ++i) outs[i] = meta_output(ms[i]);
    return to_tuple(outs, std::make_index_sequence<N>{});
  }
  static void register_meta(Library& m, const char* name) { m.impl(name, DispatchKey::Meta, &run); }
};

// Kernels of an operator from its shape function and its backend loop. A single-output shape
// function returns a TensorMeta and its loop is `void loop(const Tensor& out, <the kernel's
// arguments>)`; one of N outputs returns std::array<TensorMeta, N> and its loop takes
// `const std::array<Tensor, N>& outs` first (an output whose meta is not `defined` is an undefined
// tensor, e.g. a gradient that output_mask did not ask for). Outputs come sized as the shape
// function says, contiguous unless it gave strides, of its dtype.
template <auto Shape, auto Loop, class Sig = decltype(Shape)>
struct Structured;

template <auto Shape, auto Loop, class... A>
struct Structured<Shape, Loop, TensorMeta (*)(A...)> {
  static Tensor cpu(kernel_arg_t<A>... a) {
    Tensor out = allocate_output(Shape(a...), kCPU);
    Loop(out, a...);
    return out;
  }
  static Tensor meta_out(kernel_arg_t<A>... a, const Tensor& out) {
    prepare_out(name_, out, Shape(a...), out.device());
    return out;
  }
  static Tensor cpu_out(kernel_arg_t<A>... a, const Tensor& out) {
    Tensor w = prepare_out(name_, out, Shape(a...), kCPU);
    Loop(w, a...);
    finish_out(out, w);
    return out;
  }
  // Registers `name` (and `out_name`, its out= overload, when given) for the CPU key.
  static void register_cpu(Library& m, const char* name, const char* out_name = nullptr) {
    name_ = name;
    m.impl(name, DispatchKey::CPU, &cpu);
    if (out_name != nullptr) m.impl(out_name, DispatchKey::CPU, &cpu_out);
  }
  // Both keys at once, for an operator whose loop is in the same file.
  static void register_kernels(Library& m, const char* name, const char* out_name = nullptr) {
    name_ = name;
    MetaKernel<Shape>::register_meta(m, name);
    if (out_name != nullptr) m.impl(out_name, DispatchKey::Meta, &meta_out);
    register_cpu(m, name, out_name);
  }

 private:
  static inline const char* name_ = "out";  // the operator's name, for out='s messages
};

template <auto Shape, auto Loop, size_t N, class... A>
struct Structured<Shape, Loop, std::array<TensorMeta, N> (*)(A...)> {
  static TensorTuple<N> cpu(kernel_arg_t<A>... a) {
    const std::array<TensorMeta, N> ms = Shape(a...);
    std::array<Tensor, N> outs;
    for (size_t i = 0; i < N; ++i) outs[i] = allocate_output(ms[i], kCPU);
    Loop(outs, a...);
    return to_tuple(outs, std::make_index_sequence<N>{});
  }
  static void register_cpu(Library& m, const char* name) { m.impl(name, DispatchKey::CPU, &cpu); }
  // Both keys at once, for an operator whose loop is in the same file.
  static void register_kernels(Library& m, const char* name) {
    MetaKernel<Shape>::register_meta(m, name);
    register_cpu(m, name);
  }
};

}  // namespace loom
