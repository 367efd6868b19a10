// Why an operator has no CUDA kernel, in a build without CUDA.
#include <string>

#include "loom/ops.h"

namespace loom {

std::string missing_kernel_reason(const std::string&, DispatchKey backend) {
  if (backend != DispatchKey::CUDA) return "";
  return "CUDA is not in this build (configure with -DLOOM_CUDA=ON on a machine with the CUDA "
         "toolkit)";
}

}  // namespace loom
