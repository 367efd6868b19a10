// The CUDA code generator of a build without CUDA: nothing to generate for
// (compiler/cuda_codegen.h).
#include "compiler/cuda_codegen.h"
#include "loom/error.h"

namespace loom::compiler {

std::string cuda_codegen_unavailable(int) {
  return "this build of loom has no CUDA";
}

CudaModule build_cuda_module(const std::string&, int) {
  LOOM_THROW(NotImplementedError, "[compile] this build of loom has no CUDA code generator");
}

void launch_cuda_kernel(void*, int64_t, int, void**, int) {
  LOOM_THROW(NotImplementedError, "[compile] this build of loom has no CUDA code generator");
}

}  // namespace loom::compiler
