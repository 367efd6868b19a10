// What this build of loom contains (base layer): the optional parts chosen when it was configured
// (CUDA and its toolkit libraries, io_uring) and, for each part left out, how to enable it.
// `loom info` prints this. Plain data; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "loom/export.h"

namespace loom {

struct BuildPart {
  std::string name;    // "cuda", "cublasLt", "cudnn", "io_uring", ...
  bool built = false;  // compiled into this build
  std::string detail;  // when built: e.g. the CUDA architectures; otherwise how to enable it
};

LOOM_API std::vector<BuildPart> build_parts();

namespace cuda {
// Runs a small kernel on the current device and checks its output: "" when it ran correctly,
// otherwise what failed (no device, a CUDA error naming the call, a wrong value and where).
// In a build without CUDA it says so.
LOOM_API std::string self_check();
// The floor under every eager operator: host microseconds per launch of an empty kernel on the
// current device's default stream (the median of three runs of `launches` launches, each ended by
// one synchronisation). NaN where no device is visible or CUDA is not in the build.
LOOM_API double launch_floor_us(int launches = 20000);
}  // namespace cuda

}  // namespace loom
