// Built when CMake did not find liburing (LOOM_URING=OFF, or AUTO without liburing-dev).
#include "data/read_engine.h"
#include "loom/error.h"

namespace loom::data {

std::unique_ptr<ReadEngine> make_uring_engine(const ShardReader&, int) {
  LOOM_THROW(NotImplementedError,
             "[data.read] io_uring is not available in this build (install liburing-dev, e.g. with "
             "scripts/setup.sh, and reconfigure with -DLOOM_URING=ON)");
}

bool uring_probe() {
  return false;
}

}  // namespace loom::data
