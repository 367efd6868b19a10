// CUDA kernels from generated source through NVRTC (compiler layer; internal). Implemented by
// compiler/cuda/nvrtc.cpp in CUDA builds and compiler/cuda/nvrtc_stub.cpp otherwise.
//
// A source is compiled by NVRTC (no nvcc at run time) to a cubin for the device's architecture,
// kept in the kernel cache (Note [Kernel cache]: the key adds NVRTC's version and the
// architecture), loaded with cudaLibraryLoadData once per process and device, and launched on
// the device's current stream.
//
// Thread-safety: every function may be called from several threads.
#pragma once

#include <cstdint>
#include <string>

namespace loom::compiler {

struct CudaModule {
  void* kernel = nullptr;       // "loom_kernel" (a cudaKernel_t)
  void* kernel_vec4 = nullptr;  // "loom_kernel_vec4", or null when the source has none
  std::string path;             // the cubin in the cache (the .cu is beside it)
  bool cache_hit = false;
  double build_ms = 0;  // NVRTC's time, 0 on a hit
  int multiprocessors = 0;
};

// "" when kernels can be generated and run on CUDA device `device`, else why not.
std::string cuda_codegen_unavailable(int device);
// Compiles (or finds) `source` for `device`; CompileError with NVRTC's log when it fails.
CudaModule build_cuda_module(const std::string& source, int device);
// Launches `kernel` with `blocks` x `threads` on the current stream of `device`.
void launch_cuda_kernel(void* kernel, int64_t blocks, int threads, void** args, int device);

}  // namespace loom::compiler
