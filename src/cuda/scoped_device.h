// Makes a CUDA device current for a scope and restores the previous one (base layer, CUDA builds;
// internal). Streams, events and allocations belong to the device that was current when they were
// made, so runtime calls on a given device run inside one of these. Errors are DeviceErrors
// (throw_error in loom/cuda.h).
#pragma once

#include <cuda_runtime_api.h>

#include "loom/cuda.h"

namespace loom::cuda::detail {

class ScopedDevice {
 public:
  explicit ScopedDevice(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
  }
  ~ScopedDevice() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  static void check(cudaError_t e, const char* call) {
    if (e != cudaSuccess) throw_error(static_cast<int>(e), call, nullptr);
  }
  int previous_ = 0;
};

}  // namespace loom::cuda::detail
