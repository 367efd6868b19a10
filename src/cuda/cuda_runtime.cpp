// Built when CMake found the CUDA toolkit. Kernels come with the CUDA backend; this file answers
// whether devices exist.
#include <cuda_runtime_api.h>

#include "loom/cuda.h"

namespace loom::cuda {

int device_count() {
  static int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return count;
  }();
  return n;
}

bool is_available() { return device_count() > 0; }
bool is_built() { return true; }

bool host_register(void* p, size_t n) {
  if (!is_available()) return false;
  if (cudaHostRegister(p, n, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

void host_unregister(void* p) {
  if (is_available() && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

}  // namespace loom::cuda
