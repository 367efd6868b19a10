// NVRTC code generation for CUDA (compiler/cuda_codegen.h).
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "compiler/codecache.h"
#include "compiler/cuda_codegen.h"
#include "cuda/scoped_device.h"
#include "loom/cuda.h"
#include "loom/error.h"

namespace loom::compiler {
namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) cuda::throw_error(static_cast<int>(e), call, "compiled kernel");
}

std::string nvrtc_identity() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

// Compiles `source` with NVRTC into a cubin at `path`.
void compile_cubin(const std::string& source, const std::string& arch, const std::string& path,
                   const std::string& stem) {
  nvrtcProgram prog = nullptr;
  LOOM_CHECK_AS(CompileError,
                nvrtcCreateProgram(&prog, source.c_str(), "loom_kernel.cu", 0, nullptr, nullptr) ==
                    NVRTC_SUCCESS,
                "[compile] nvrtcCreateProgram failed");
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "--std=c++17"};
  const nvrtcResult rc = nvrtcCompileProgram(prog, 2, opts);
  if (rc != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    const std::string kept = stem + ".cu.failed";
    std::ofstream(kept, std::ios::binary) << source;
    LOOM_THROW(CompileError, "[compile] NVRTC could not compile a generated kernel (",
               nvrtcGetErrorString(rc), "); the source is kept at ", kept, "\n", log);
  }
  size_t n = 0;
  nvrtcGetCUBINSize(prog, &n);
  std::vector<char> cubin(n);
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  std::ofstream out(path, std::ios::binary);
  out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  LOOM_CHECK_AS(CompileError, out.good(), "[compile] cannot write ", path);
  std::ofstream(stem + ".cu", std::ios::binary) << source;
}

std::mutex g_mu;
std::map<std::string, CudaModule> g_modules;  // GUARDED_BY(g_mu), by "<cubin path>@<device>"

}  // namespace

std::string cuda_codegen_unavailable(int device) {
  if (!cuda::is_available()) return "no CUDA device is visible";
  if (device < 0 || device >= cuda::device_count())
    return "there is no CUDA device " + std::to_string(device);
  return "";
}

CudaModule build_cuda_module(const std::string& source, int device) {
  const cuda::DeviceProperties props = cuda::device_properties(device);
  const std::string arch = "sm_" + std::to_string(props.major) + std::to_string(props.minor);
  const std::string key_text =
      "loom cuda codegen 1\n" + nvrtc_identity() + "\n" + arch + "\n" + source;
  const CachedFile file =
      cached_file(key_text, ".cubin", [&](const std::string& tmp, const std::string& stem) {
        compile_cubin(source, arch, tmp, stem);
      });
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string id = file.path + "@" + std::to_string(device);
  if (auto it = g_modules.find(id); it != g_modules.end()) {
    CudaModule m = it->second;
    m.cache_hit = true;
    m.build_ms = 0;
    return m;
  }
  std::ifstream in(file.path, std::ios::binary);
  const std::vector<char> cubin((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LOOM_CHECK_AS(CompileError, !cubin.empty(), "[compile] cannot read the cached kernel ",
                file.path);
  cuda::detail::ScopedDevice on(device);
  cudaLibrary_t lib = nullptr;
  // Never unloaded: kernels of it may be queued on a stream.
  check_cuda(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "cudaLibraryLoadData");
  CudaModule m;
  cudaKernel_t k = nullptr;
  check_cuda(cudaLibraryGetKernel(&k, lib, "loom_kernel"), "cudaLibraryGetKernel");
  m.kernel = reinterpret_cast<void*>(k);
  // Asked for only when the source defines it: a failed lookup is an API error that
  // compute-sanitizer reports, even when handled.
  if (source.find("void loom_kernel_vec4(") != std::string::npos) {
    cudaKernel_t v = nullptr;
    check_cuda(cudaLibraryGetKernel(&v, lib, "loom_kernel_vec4"), "cudaLibraryGetKernel");
    m.kernel_vec4 = reinterpret_cast<void*>(v);
  }
  m.path = file.path;
  m.cache_hit = file.cache_hit;
  m.build_ms = file.build_ms;
  m.multiprocessors = props.multiprocessors;
  g_modules[id] = m;
  return m;
}

void launch_cuda_kernel(void* kernel, int64_t blocks, int threads, void** args, int device) {
  if (blocks <= 0) return;
  cuda::detail::ScopedDevice on(device);
  auto stream =
      static_cast<cudaStream_t>(cuda::current_raw_stream(static_cast<DeviceIndex>(device)));
  check_cuda(cudaLaunchKernel(static_cast<const void*>(kernel), dim3(static_cast<unsigned>(blocks)),
                              dim3(static_cast<unsigned>(threads)), args, 0, stream),
             "cudaLaunchKernel");
}

}  // namespace loom::compiler
