// Built when CMake did not enable CUDA: the self-check says so.
#include "loom/build_info.h"

namespace loom::cuda {

std::string self_check() {
  return "[cuda] this build has no CUDA backend (configure with the CUDA toolkit installed, "
         "-DLOOM_CUDA=ON)";
}

}  // namespace loom::cuda
