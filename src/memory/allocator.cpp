#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "loom/error.h"
#include "loom/memory.h"
#include "loom/memory/cuda_memory.h"

namespace loom {
namespace {

void cpu_free(void* ctx) {
  std::free(ctx);
}

// Note [Large host blocks]
//   A fresh large block from glibc is mmap'd memory that the kernel faults in 4 KiB at a time on
//   first touch: 16384 faults for a 64 MiB tensor, which took ~130 ms on the 2-core VM, so that an
//   eager elementwise operator with a fresh output ran at 0.9 GB/s instead of the 15 GB/s it
//   reaches into a reused one. Blocks of kLargeBytes and more are therefore
//   - 2 MiB aligned and asked for transparent huge pages (madvise MADV_HUGEPAGE: 512 times fewer
//     faults where the kernel grants them), and
//   - kept after they are freed, up to a limit (1/8 of physical memory, at most 2 GiB), and handed
//     out again for a request of the same rounded size or up to 1/8 smaller, so that an eager loop
//     that frees and allocates the same shapes touches its pages once. The oldest cached blocks
//     go back to the system first when the limit is reached; empty_host_cache() returns them all.
constexpr size_t kLargeBytes = size_t{1} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

struct LargeBlock {
  void* p;
  size_t size;
};

class HostCache {
 public:
  HostCache() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * page : 0;
    limit_ = std::min<size_t>(phys / 8, size_t{2} << 30);
  }

  LargeBlock* take(size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first - size <= size / 8) {
        LargeBlock* b = it->second;
        free_.erase(it);
        cached_ -= b->size;
        ++hits_;
        return b;
      }
      ++misses_;
    }
    void* p = std::aligned_alloc(kHugePage, size);
    if (p == nullptr) {
      release_all();  // cached blocks may be what stands in the way
      p = std::aligned_alloc(kHugePage, size);
      if (p == nullptr) return nullptr;
    }
#ifdef MADV_HUGEPAGE
    ::madvise(p, size, MADV_HUGEPAGE);  // advice: refused where THP is off, which is fine
#endif
    return new LargeBlock{p, size};
  }

  void give(LargeBlock* b) {
    std::vector<LargeBlock*> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (b->size > limit_) {
        evicted.push_back(b);
      } else {
        free_.emplace(b->size, b);
        cached_ += b->size;
        order_.push_back(b);
        // The oldest first (order_ may name blocks taken again since: skip those).
        while (cached_ > limit_ && !order_.empty()) {
          LargeBlock* old = order_.front();
          order_.pop_front();
          for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->second == old) {
              free_.erase(it);
              cached_ -= old->size;
              evicted.push_back(old);
              break;
            }
          }
        }
      }
    }
    for (LargeBlock* e : evicted) destroy(e);
  }

  void release_all() {
    std::vector<LargeBlock*> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [size, blk] : free_) all.push_back(blk);
      free_.clear();
      order_.clear();
      cached_ = 0;
    }
    for (LargeBlock* b : all) destroy(b);
  }

  HostCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return HostCacheStats{cached_, limit_, hits_, misses_};
  }

 private:
  static void destroy(LargeBlock* b) {
    std::free(b->p);
    delete b;
  }

  std::mutex mu_;
  std::multimap<size_t, LargeBlock*> free_;  // GUARDED_BY(mu_)
  std::deque<LargeBlock*> order_;            // GUARDED_BY(mu_): when blocks were cached
  size_t cached_ = 0;                        // GUARDED_BY(mu_)
  size_t limit_ = 0;
  int64_t hits_ = 0, misses_ = 0;  // GUARDED_BY(mu_)
};

HostCache& host_cache() {
  static HostCache* c = new HostCache;  // never destroyed: tensors may be freed during exit
  return *c;
}

void cpu_free_large(void* ctx) {
  host_cache().give(static_cast<LargeBlock*>(ctx));
}

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, kCPU);
    // Small buffers come from malloc (16-byte aligned, fast tcache path); large ones are cache-line
    // aligned for vector loads.
    void* p = nullptr;
    if (nbytes >= kLargeBytes) {
      const size_t rounded = (nbytes + kHugePage - 1) / kHugePage * kHugePage;
      if (LargeBlock* b = host_cache().take(rounded))
        return DataPtr(b->p, b, &cpu_free_large, kCPU);
    } else if (nbytes < 512) {
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

HostCacheStats host_cache_stats() {
  return host_cache().stats();
}

void empty_host_cache() {
  host_cache().release_all();
}

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
