// Structured operators on CUDA (ops layer, CUDA backend; internal, g++ side): the twin of
// Structured<shape, loop> (structured.h) for the CUDA key. The kernel runs the operator's shape
// function, allocates the outputs on the device of its first CUDA tensor argument (made current
// for the call), then runs the loop, which gets outputs already sized as on the CPU.
#pragma once

#include <array>
#include <optional>

#include "loom/error.h"
#include "loom/stream.h"
#include "ops/structured.h"

namespace loom::cuda_ops {

inline void find_cuda_device(std::optional<Device>& d, const Tensor& t) {
  if (!d && t.defined() && t.is_cuda()) d = t.device();
}
inline void find_cuda_device(std::optional<Device>& d, const std::optional<Tensor>& t) {
  if (t.has_value()) find_cuda_device(d, *t);
}
inline void find_cuda_device(std::optional<Device>& d, TensorList list) {
  for (const Tensor& t : list) find_cuda_device(d, t);
}
template <class T>
void find_cuda_device(std::optional<Device>&, const T&) {}

// The device of the first CUDA tensor among a kernel's arguments.
template <class... A>
Device cuda_device_of(const A&... a) {
  std::optional<Device> d;
  (find_cuda_device(d, a), ...);
  LOOM_INTERNAL_ASSERT(d.has_value(), "[cuda] a CUDA kernel called without a CUDA tensor");
  return *d;
}

template <auto Shape, auto Loop, class Sig = decltype(Shape)>
struct CudaStructured;

template <auto Shape, auto Loop, class... A>
struct CudaStructured<Shape, Loop, TensorMeta (*)(A...)> {
  static Tensor run(kernel_arg_t<A>... a) {
    const Device device = cuda_device_of(a...);
    DeviceGuard guard(device);
    Tensor out = allocate_output(Shape(a...), device);
    Loop(out, a...);
    return out;
  }
  static void register_cuda(Library& m, const char* name) { m.impl(name, DispatchKey::CUDA, &run); }
};

template <auto Shape, auto Loop, size_t N, class... A>
struct CudaStructured<Shape, Loop, std::array<TensorMeta, N> (*)(A...)> {
  static TensorTuple<N> run(kernel_arg_t<A>... a) {
    const Device device = cuda_device_of(a...);
    DeviceGuard guard(device);
    const std::array<TensorMeta, N> ms = Shape(a...);
    std::array<Tensor, N> outs;
    for (size_t i = 0; i < N; ++i) outs[i] = allocate_output(ms[i], device);
    Loop(outs, a...);
    return to_tuple(outs, std::make_index_sequence<N>{});
  }
  static void register_cuda(Library& m, const char* name) { m.impl(name, DispatchKey::CUDA, &run); }
};

}  // namespace loom::cuda_ops
