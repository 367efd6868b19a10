// Built when CMake did not enable CUDA: the self-check says so.
#include "loom/build_info.h"

#include <cmath>

namespace loom::cuda {

std::string self_check() {
  return "[cuda] this build has no CUDA backend (configure with the CUDA toolkit installed, "
         "-DLOOM_CUDA=ON)";
}

double launch_floor_us(int) {
  return NAN;
}

}  // namespace loom::cuda
