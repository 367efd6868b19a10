// The backend registry: which factory makes a group's backend for each device type.
#include "distributed/group/backend.h"

#include <atomic>

#include "loom/error.h"

namespace loom::dist {

Backend::~Backend() = default;

void Backend::allgather_records(void*, size_t) {
  LOOM_THROW(NotImplementedError, "[dist] the ", name(), " backend does not exchange records");
}

namespace {

// Indexed by DeviceType; atomics so that a test may register while no group is being made.
std::atomic<BackendFactory>* factories() {
  static std::atomic<BackendFactory> table[kNumDeviceTypes] = {};
  static const bool init = [] {
    table[static_cast<int>(DeviceType::CPU)].store(&make_cpu_backend);
    table[static_cast<int>(DeviceType::CUDA)].store(&make_nccl_backend);
    return true;
  }();
  (void)init;
  return table;
}

}  // namespace

BackendFactory register_backend(DeviceType type, BackendFactory factory) {
  return factories()[static_cast<int>(type)].exchange(factory);
}

BackendFactory backend_factory(DeviceType type) {
  return factories()[static_cast<int>(type)].load();
}

}  // namespace loom::dist
