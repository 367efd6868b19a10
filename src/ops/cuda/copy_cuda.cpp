// CUDA kernels of the copy family: copy_ (within a device and between host and device), fill_,
// _to_copy, clone and _local_scalar_dense. The loops are in copy_kernels.cu.
//
// Note [CUDA copies]
//   - Same device, same dtype, both contiguous: one cudaMemcpyAsync on the current stream.
//   - Same device otherwise: a TensorIterator loop (a byte copy by element size, or a cast).
//   - Host <-> device: cudaMemcpyAsync between contiguous buffers of the destination's dtype (a
//     strided or other-dtype side is first made contiguous and cast where it lives), on the
//     device's current stream. The copy is synchronous for the caller (the stream is synchronised)
//     as PyTorch's non_blocking=False; loom::cuda::copy_async (loader staging) is the asynchronous
//     form for pinned buffers.
#include <cstring>

#include "loom/cuda.h"
#include "loom/memory/cuda_memory.h"
#include "ops/cuda/copy_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::check_launch;
using cuda_ops::stream_of;

// self and src on the same CUDA device.
void copy_on_device(const Tensor& self, const Tensor& src) {
  if (self.numel() == 0) return;
  cudaStream_t stream = stream_of(self);
  if (self.dtype() == src.dtype() && self.is_contiguous() && src.is_contiguous() &&
      self.sizes() == src.sizes()) {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(self.data_ptr(), src.data_ptr(), self.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream),
                    "loom::copy_");
    return;
  }
  TensorIteratorConfig cfg;
  cfg.op = "copy_";
  cfg.outputs = {self};
  cfg.inputs = {src.sizes() == self.sizes() ? src : src.expand(self.sizes())};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  cfg.output_dtype = self.dtype();
  cfg.is_inplace = true;
  TensorIterator it(std::move(cfg));
  const cuda_ops::IterArgs a = cuda_ops::make_iter_args(it);
  check_launch(self.dtype() == src.dtype() ? cuda_ops::launch_copy_same(a, stream)
                                           : cuda_ops::launch_cast(a, stream),
               "loom::copy_");
}

// Contiguous buffers of one dtype and size, one on the host, one on a CUDA device.
void copy_host_device(void* dst, const void* src, size_t n, cudaMemcpyKind kind, Device device) {
  if (n == 0) return;
  cudaStream_t stream = cuda_ops::stream_of(device);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, stream), "loom::copy_");
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream), "loom::copy_");
}

Tensor copy_kernel(const Tensor& self, const Tensor& src) {
  if (self.is_same(src)) return self;
  copy_shape(self, src);
  const Tensor s = src.sizes() == self.sizes() ? src : src.expand(self.sizes());
  if (self.is_cuda() && s.is_cuda()) {
    LOOM_CHECK(self.device() == s.device(), "[copy_] copies between CUDA devices (", s.device(),
               " to ", self.device(), ") are not supported yet");
    cuda_ops::KernelGuard guard(self);
    copy_on_device(self, s);
  } else if (self.is_cuda()) {  // host -> device
    LOOM_CHECK(s.is_cpu(), "[copy_] cannot copy from ", s.device(), " to ", self.device());
    cuda_ops::KernelGuard guard(self);
    const Tensor host = s.to(self.dtype()).contiguous();
    if (self.is_contiguous()) {
      copy_host_device(self.data_ptr(), host.data_ptr(), self.nbytes(), cudaMemcpyHostToDevice,
                       self.device());
    } else {
      Tensor staged = empty_tensor(self.sizes(), self.dtype(), self.device());
      copy_host_device(staged.data_ptr(), host.data_ptr(), staged.nbytes(), cudaMemcpyHostToDevice,
                       self.device());
      copy_on_device(self, staged);
    }
  } else {  // device -> host
    LOOM_CHECK(self.is_cpu() && s.is_cuda(), "[copy_] cannot copy from ", s.device(), " to ",
               self.device());
    cuda_ops::KernelGuard guard(s);
    Tensor dev = s;
    if (!s.is_contiguous() || s.dtype() != self.dtype()) {
      dev = empty_tensor(self.sizes(), self.dtype(), s.device());
      copy_on_device(dev, s);
    }
    if (self.is_contiguous()) {
      copy_host_device(self.data_ptr(), dev.data_ptr(), self.nbytes(), cudaMemcpyDeviceToHost,
                       s.device());
    } else {
      Tensor host = empty_tensor(self.sizes(), self.dtype(), kCPU);
      copy_host_device(host.data_ptr(), dev.data_ptr(), host.nbytes(), cudaMemcpyDeviceToHost,
                       s.device());
      self.copy_(host);
    }
  }
  self.storage()->bump_version();
  return self;
}

// The bit pattern of `value` in `dtype`, through a one-element CPU tensor (the CPU's conversion).
uint64_t fill_bits(const Scalar& value, DType dtype) {
  Tensor one = empty_tensor({}, dtype, kCPU);
  one.fill_(value);
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  return bits;
}

Tensor fill_kernel(const Tensor& self, const Scalar& value) {
  if (self.numel() == 0) return self;
  cuda_ops::KernelGuard guard(self);
  const uint64_t bits = fill_bits(value, self.dtype());
  cudaStream_t stream = stream_of(self);
  if (self.is_contiguous()) {
    if (bits == 0) {
      LOOM_CUDA_CHECK(cudaMemsetAsync(self.data_ptr(), 0, self.nbytes(), stream), "loom::fill_");
    } else {
      check_launch(cuda_ops::launch_fill(self.data_ptr(), self.numel(),
                                         static_cast<int>(self.element_size()), bits, stream),
                   "loom::fill_");
    }
  } else {
    Tensor tmp = empty_tensor(self.sizes(), self.dtype(), self.device());
    fill_kernel(tmp, value);
    copy_on_device(self, tmp);
  }
  self.storage()->bump_version();
  return self;
}

// _to_copy from a CUDA tensor: to any device (the destination is allocated there).
Tensor to_copy_kernel(const Tensor& self, std::optional<DType> dtype,
                      std::optional<Device> device) {
  const TensorMeta m = to_copy_shape(self, dtype, device);
  const Device dev = device.value_or(self.device());
  if (dev.is_meta()) return meta_output(m);
  Tensor out = allocate_output(m, dev);
  copy_(out, self);
  return out;
}

Tensor clone_cuda(const Tensor& self) {
  Tensor out = allocate_output(clone_shape(self), self.device());
  copy_(out, self);
  return out;
}

Scalar local_scalar_dense_cuda(const Tensor& self) {
  LOOM_CHECK(self.numel() == 1, "[_local_scalar_dense] a tensor with ", self.numel(),
             " elements (shape ", self.sizes(), ") cannot be converted to a scalar");
  return self.to(kCPU).item();
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("copy_", copy_kernel);
  m.impl("fill_", fill_kernel);
  m.impl("_to_copy", to_copy_kernel);
  m.impl("clone", clone_cuda);
  m.impl("_local_scalar_dense", local_scalar_dense_cuda);
}

}  // namespace loom
