#include <atomic>
#include <cstdlib>
#include <cstring>

#include "loom/error.h"
#include "loom/memory.h"
#include "loom/memory/cuda_memory.h"

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

// A CUDA device's slot starts with this: the first allocation asks the CUDA memory layer for the
// device's allocator (the caching allocator's adapter, or one that says CUDA is not in this build)
// and puts it in the slot, so later allocations go straight to it.
class LazyCudaAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override { return resolve()->allocate(nbytes); }
  DataPtr allocate_on(size_t nbytes, const Stream& stream) override {
    return resolve()->allocate_on(nbytes, stream);
  }

 private:
  Allocator* resolve();
};

CpuAllocator g_cpu;
MetaAllocator g_meta;
LazyCudaAllocator g_lazy_cuda[kMaxDeviceIndex];

Allocator* builtin(int type, int index) {
  switch (static_cast<DeviceType>(type)) {
    case DeviceType::CPU:
      return &g_cpu;
    case DeviceType::CUDA:
      return &g_lazy_cuda[index];
    default:
      return &g_meta;
  }
}

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
    t.slot[static_cast<int>(DeviceType::CUDA)][i] = &g_lazy_cuda[i];
    t.slot[static_cast<int>(DeviceType::Meta)][i] = &g_meta;
  }
  return t;
}
constinit AllocatorTable g_table = builtin_table();

Allocator* LazyCudaAllocator::resolve() {
  const auto index = static_cast<DeviceIndex>(this - g_lazy_cuda);
  Allocator* real = memory::detail::builtin_cuda_allocator(index);
  Allocator* expected = this;
  std::atomic_ref<Allocator*>(g_table.slot[static_cast<int>(DeviceType::CUDA)][index])
      .compare_exchange_strong(expected, real, std::memory_order_acq_rel);
  return real;
}

}  // namespace

Allocator* get_allocator(Device device) {
  return std::atomic_ref<Allocator*>(g_table.slot[static_cast<int>(device.type())][device.index()])
      .load(std::memory_order_acquire);
}

void set_allocator(Device device, Allocator* allocator) {
  const int type = static_cast<int>(device.type());
  std::atomic_ref<Allocator*>(g_table.slot[type][device.index()])
      .store(allocator != nullptr ? allocator : builtin(type, device.index()),
             std::memory_order_release);
}

}  // namespace loom
