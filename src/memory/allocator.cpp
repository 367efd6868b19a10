#include <atomic>
#include <cstdlib>
#include <cstring>

#include "loom/error.h"
#include "loom/memory.h"

namespace loom {
namespace {

void cpu_free(void* ctx) {
  std::free(ctx);
}

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, kCPU);
    // Small buffers come from malloc (16-byte aligned, fast tcache path); large ones are cache-line
    // aligned for vector loads.
    void* p = nullptr;
    if (nbytes < 512) {
      p = std::malloc(nbytes);
    } else {
      size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
      p = std::aligned_alloc(kCpuAlignment, rounded);
    }
    if (!p) {
      LOOM_THROW(OutOfMemoryError, "[cpu allocator] could not allocate ", nbytes,
                 " bytes of host memory");
    }
    return DataPtr(p, p, &cpu_free, kCPU);
  }
  DeleterFn raw_deleter() const override { return &cpu_free; }
};

// Meta tensors carry shapes and dtypes only; their storage has no bytes behind it.
class MetaAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t) override { return DataPtr(nullptr, nullptr, nullptr, kMeta); }
};

class MissingCudaAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t) override {
    LOOM_THROW(NotImplementedError,
               "[cuda allocator] CUDA is not available in this build (configure with "
               "-DLOOM_CUDA=ON on a machine with the CUDA toolkit)");
  }
};

CpuAllocator g_cpu;
MetaAllocator g_meta;
MissingCudaAllocator g_missing_cuda;

Allocator* const g_builtin[kNumDeviceTypes] = {&g_cpu, &g_missing_cuda, &g_meta};

// The allocator of every (type, index), each slot starting with its type's built-in one:
// constant-initialised (so allocations during static initialisation work) and read with one
// load, as every new tensor does.
struct AllocatorTable {
  Allocator* slot[kNumDeviceTypes][kMaxDeviceIndex];
};
constexpr AllocatorTable builtin_table() {
  AllocatorTable t{};
  for (int i = 0; i < kMaxDeviceIndex; ++i) {
    t.slot[static_cast<int>(DeviceType::CPU)][i] = &g_cpu;
    t.slot[static_cast<int>(DeviceType::CUDA)][i] = &g_missing_cuda;
    t.slot[static_cast<int>(DeviceType::Meta)][i] = &g_meta;
  }
  return t;
}
constinit AllocatorTable g_table = builtin_table();

}  // namespace

Allocator* get_allocator(Device device) {
  return std::atomic_ref<Allocator*>(g_table.slot[static_cast<int>(device.type())][device.index()])
      .load(std::memory_order_acquire);
}

void set_allocator(Device device, Allocator* allocator) {
  const int type = static_cast<int>(device.type());
  std::atomic_ref<Allocator*>(g_table.slot[type][device.index()])
      .store(allocator != nullptr ? allocator : g_builtin[type], std::memory_order_release);
}

}  // namespace loom
