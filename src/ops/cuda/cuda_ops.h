// Helpers for the CUDA kernel registration files (ops layer, CUDA backend; internal, g++ side).
// See Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include "loom/cuda.h"
#include "loom/stream.h"
#include "loom/tensor.h"
#include "ops/cuda/iter_args.h"
#include "ops/tensor_iterator.h"

namespace loom::cuda_ops {

inline ScalarCode code_of(DType d) {
  return static_cast<ScalarCode>(static_cast<int8_t>(d));
}

// The calling thread's current stream on `device` (a CUDA device), as the runtime's handle.
inline cudaStream_t stream_of(Device device) {
  return static_cast<cudaStream_t>(cuda::current_raw_stream(device.index()));
}
inline cudaStream_t stream_of(const Tensor& t) {
  return stream_of(t.device());
}

// The iterator's coalesced loop as IterArgs; CPU 0-dim operands become kernel-parameter scalars.
// ValueError naming `it`'s op when it has more dimensions or operands than a device loop takes.
IterArgs make_iter_args(const TensorIterator& it);

// Throws DeviceError naming `op` when a launch (or the previous asynchronous work) failed.
inline void check_launch(cudaError_t e, const char* op) {
  if (e != cudaSuccess) cuda::throw_error(static_cast<int>(e), "kernel launch", op);
}

// Runs a family's launcher over the iterator's loop: `launch(IterArgs& a, cudaStream_t s)` returns
// the launch's cudaError_t (it may trim `a` first, IterArgs::keep_operands). The iterator's device
// is current during the launch and its current stream runs it; an empty loop launches nothing (its
// operands may then sit on different devices, which TensorIterator allows for empty outputs).
template <class F>
void launch_iter(const TensorIterator& it, const char* op, const F& launch) {
  if (it.numel() == 0) return;
  const DeviceGuard guard(it.device());
  IterArgs a = make_iter_args(it);
  check_launch(launch(a, stream_of(it.device())), op);
}

// Makes the tensor's device current for the scope of a kernel (a no-op on one GPU, where it is
// already current).
class KernelGuard {
 public:
  explicit KernelGuard(const Tensor& t) : guard_(t.device()) {}

 private:
  DeviceGuard guard_;
};

}  // namespace loom::cuda_ops
