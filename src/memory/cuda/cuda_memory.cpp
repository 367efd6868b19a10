// CUDA memory (CUDA builds): the caching allocator over each device's memory, and the pinned host
// pool. See loom/memory/cuda_memory.h.
//
// Note [CUDA device memory]
//   CudaDeviceMemory is the caching allocator's DeviceMemory for one device:
//   - malloc/free: cudaMalloc / cudaFree (a refused cudaMalloc returns nullptr, so the allocator
//     frees its cache and retries before it reports OutOfMemoryError with its own numbers);
//   - events: cudaEvents recorded on the block's streams, from a free list; an EventId that has
//     passed is forgotten, and ids only grow, so an unknown id below the next one has passed;
//   - virtual memory for expandable segments, through the driver API reached with
//     cudaGetDriverEntryPointByVersion (libloom does not link libcuda, so it loads on machines
//     without a driver): reserve = cuMemAddressReserve, map = one cuMemCreate handle per 2 MiB page
//     mapped and made accessible (so that any run of pages can be unmapped again, as PyTorch's
//     expandable segments do), unmap = cuMemUnmap + cuMemRelease per page, release =
//     cuMemAddressFree.
//   All of it runs under the allocator's lock with the device made current.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <bit>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/scoped_device.h"
#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/memory/cuda_memory.h"

namespace loom::cuda {
namespace {

const config::ChoiceSetting kAllocPolicy(
    "LOOM_CUDA_ALLOC_POLICY", "default",
    {"default", "no-cache", "no-split", "max-split-64m", "gc-0.8", "small-segments", "expandable",
     "expandable-share"},
    "policy of the CUDA caching allocator (AllocatorConfig::policy)");

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw_error(static_cast<int>(e), call, "cuda allocator");
}

using detail::ScopedDevice;

// The driver entry points for virtual memory (nullptr members when the driver lacks them).
struct DriverVmm {
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  bool ok() const {
    return reserve && address_free && create && release && map && unmap && set_access;
  }
};

const DriverVmm& driver_vmm() {
  static const DriverVmm vmm = [] {
    DriverVmm v;
    auto get = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult status{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status) ==
              cudaSuccess &&
          status == cudaDriverEntryPointSuccess)
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      else
        cudaGetLastError();
    };
    get("cuMemAddressReserve", v.reserve);
    get("cuMemAddressFree", v.address_free);
    get("cuMemCreate", v.create);
    get("cuMemRelease", v.release);
    get("cuMemMap", v.map);
    get("cuMemUnmap", v.unmap);
    get("cuMemSetAccess", v.set_access);
    get("cuGetErrorName", v.error_name);
    return v;
  }();
  return vmm;
}

void check_driver(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (driver_vmm().error_name) driver_vmm().error_name(r, &name);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    LOOM_THROW(OutOfMemoryError, "[cuda allocator] ", call, " failed: ", name ? name : "",
               " (CUresult ", static_cast<int>(r), ")");
  }
  LOOM_THROW(DeviceError, "[cuda allocator] ", call, " failed: ", name ? name : "", " (CUresult ",
             static_cast<int>(r), ")");
}

class CudaDeviceMemory final : public memory::DeviceMemory {
 public:
  explicit CudaDeviceMemory(int index) : index_(index) {
    const DeviceProperties p = device_properties(index);
    name_ = "cuda:" + std::to_string(index) + " (" + p.name + ")";
    capacity_ = p.total_memory;
  }
  ~CudaDeviceMemory() override {
    // Called at exit after the allocator returned its segments; the driver may already be gone.
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (auto& [id, e] : live_events_) cudaEventDestroy(e);
  }
  std::string name() const override { return name_; }
  Device device() const override {
    return Device(DeviceType::CUDA, static_cast<DeviceIndex>(index_));
  }
  size_t capacity() const override { return capacity_; }
  size_t free_bytes() const override {
    ScopedDevice scope(index_);
    size_t free_b = 0, total = 0;
    check(cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo");
    return free_b;
  }
  void* malloc(size_t bytes) override {
    ScopedDevice scope(index_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    check(e, "cudaMalloc");
    return p;
  }
  void free(void* p, size_t) override {
    ScopedDevice scope(index_);
    check(cudaFree(p), "cudaFree");
  }
  memory::EventId record_event(const Stream& stream) override {
    ScopedDevice scope(index_);
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    check(cudaEventRecord(e, static_cast<cudaStream_t>(raw_stream(stream))), "cudaEventRecord");
    const memory::EventId id = next_event_++;
    live_events_.emplace(id, e);
    return id;
  }
  bool query(memory::EventId id) override {
    auto it = live_events_.find(id);
    if (it == live_events_.end()) return id < next_event_;
    cudaError_t r = cudaEventQuery(it->second);
    if (r == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(r, "cudaEventQuery");
    free_events_.push_back(it->second);
    live_events_.erase(it);
    return true;
  }

  bool supports_expandable() const override { return driver_vmm().ok(); }
  void* reserve(size_t bytes) override {
    const DriverVmm& d = checked_vmm();
    CUdeviceptr p = 0;
    CUresult r = d.reserve(&p, bytes, memory::kExpandablePage, 0, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    check_driver(r, "cuMemAddressReserve");
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  bool map(void* address, size_t bytes) override {
    const DriverVmm& d = checked_vmm();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = index_;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const auto base = reinterpret_cast<uintptr_t>(address);
    size_t done = 0;
    for (; done < bytes; done += memory::kExpandablePage) {
      CUmemGenericAllocationHandle h = 0;
      CUresult r = d.create(&h, memory::kExpandablePage, &prop, 0);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
      check_driver(r, "cuMemCreate");
      const CUdeviceptr page = base + done;
      r = d.map(page, memory::kExpandablePage, 0, h, 0);
      if (r == CUDA_SUCCESS) r = d.set_access(page, memory::kExpandablePage, &access, 1);
      if (r != CUDA_SUCCESS) {
        d.release(h);
        check_driver(r, "cuMemMap");
      }
      pages_[page] = h;
    }
    if (done < bytes) {  // out of memory part way: undo, so the caller sees nothing mapped
      unmap(address, done);
      return false;
    }
    return true;
  }
  void unmap(void* address, size_t bytes) override {
    const DriverVmm& d = checked_vmm();
    ScopedDevice scope(index_);
    // Work queued on the pages must finish before they go (cuMemUnmap does not wait).
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto base = reinterpret_cast<uintptr_t>(address);
    for (size_t off = 0; off < bytes; off += memory::kExpandablePage) {
      auto it = pages_.find(base + off);
      LOOM_INTERNAL_ASSERT(it != pages_.end(), "[cuda allocator] unmap of a page not mapped");
      check_driver(d.unmap(it->first, memory::kExpandablePage), "cuMemUnmap");
      check_driver(d.release(it->second), "cuMemRelease");
      pages_.erase(it);
    }
  }
  void release(void* base, size_t bytes) override {
    check_driver(checked_vmm().address_free(reinterpret_cast<uintptr_t>(base), bytes),
                 "cuMemAddressFree");
  }

 private:
  const DriverVmm& checked_vmm() const {
    const DriverVmm& d = driver_vmm();
    LOOM_CHECK_AS(NotImplementedError, d.ok(), "[cuda allocator] the driver of ", name_,
                  " offers no virtual-memory API (cuMemCreate); use a policy without "
                  "expandable segments");
    return d;
  }

  const int index_;
  std::string name_;
  size_t capacity_ = 0;
  memory::EventId next_event_ = 1;
  std::unordered_map<memory::EventId, cudaEvent_t> live_events_;
  std::vector<cudaEvent_t> free_events_;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> pages_;  // mapped expandable pages
};

struct DeviceAllocator {
  std::unique_ptr<CudaDeviceMemory> memory;
  std::unique_ptr<memory::CachingAllocator> allocator;
  std::unique_ptr<memory::CachingAllocatorAdapter> adapter;
};

struct Devices {
  std::mutex mutex;
  std::array<std::atomic<DeviceAllocator*>, kMaxDeviceIndex> slots{};
};

Devices& devices() {
  // Leaked on purpose: tensors destroyed during static destruction still free into it.
  static Devices* d = new Devices;
  return *d;
}

DeviceAllocator& device_allocator(DeviceIndex index) {
  LOOM_CHECK(index >= 0 && index < device_count(), "[cuda allocator] no CUDA device ",
             static_cast<int>(index), " (", device_count(), " visible)");
  Devices& d = devices();
  if (DeviceAllocator* a = d.slots[static_cast<size_t>(index)].load(std::memory_order_acquire))
    return *a;
  std::lock_guard<std::mutex> lock(d.mutex);
  if (DeviceAllocator* a = d.slots[static_cast<size_t>(index)].load(std::memory_order_acquire))
    return *a;
  auto* a = new DeviceAllocator;
  a->memory = std::make_unique<CudaDeviceMemory>(index);
  a->allocator = std::make_unique<memory::CachingAllocator>(
      *a->memory, memory::AllocatorConfig::policy(kAllocPolicy.get()));
  a->adapter = std::make_unique<memory::CachingAllocatorAdapter>(*a->allocator,
                                                                 Device(DeviceType::CUDA, index));
  d.slots[static_cast<size_t>(index)].store(a, std::memory_order_release);
  return *a;
}

// ---- pinned host memory ----

// Note [pinned pool]
//   Blocks are cudaHostAlloc'ed at a power-of-two size (at least 4 KiB) and kept after free in a
//   list per size. record_stream notes the streams a block's copies ran on; freeing such a block
//   records an event on each and parks it in `pending` until all have passed (checked on every
//   allocation and by pinned_empty_cache). Blocks are never split, so a block serves only requests
//   of its own size class.
struct PinnedBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool allocated = false;
  std::vector<Stream> streams;      // used by these streams (record_stream) while allocated
  std::vector<cudaEvent_t> events;  // pending: recorded at free time
};

class PinnedPool;
PinnedPool& pinned_pool();

class PinnedPool final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, kCPU);
    LOOM_CHECK_AS(NotImplementedError, is_available(),
                  "[pinned allocator] no CUDA device is visible: pinned memory needs one");
    const size_t size = std::max<size_t>(4096, std::bit_ceil(nbytes));
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim();
    auto& free_list = free_[size];
    PinnedBlock* b = nullptr;
    if (!free_list.empty()) {
      b = free_list.back();
      free_list.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(size);
      ++stats_.reuses;
    } else {
      void* p = nullptr;
      cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      if (e != cudaSuccess) {
        cudaGetLastError();
        LOOM_THROW(OutOfMemoryError, "[pinned allocator] cudaHostAlloc of ", size,
                   " bytes (request ", nbytes, ") failed: ", cudaGetErrorString(e), "; ",
                   stats_.allocated_bytes, " bytes pinned in use, ", stats_.cached_bytes,
                   " cached");
      }
      b = new PinnedBlock;
      b->ptr = p;
      b->size = size;
      by_ptr_[p] = b;
      ++stats_.host_allocs;
    }
    b->allocated = true;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    return DataPtr(b->ptr, b, &PinnedPool::deleter, kCPU);
  }
  DeleterFn raw_deleter() const override { return &PinnedPool::deleter; }

  void record_stream(PinnedBlock* b, const Stream& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Stream& x : b->streams)
      if (x == s) return;
    b->streams.push_back(s);
  }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_ptr_.upper_bound(p);
    if (it == by_ptr_.begin()) return false;
    --it;
    return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second->size;
  }
  PinnedStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim();
    return stats_;
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    reclaim();
    for (auto& [size, list] : free_) {
      for (PinnedBlock* b : list) {
        cudaFreeHost(b->ptr);
        by_ptr_.erase(b->ptr);
        stats_.cached_bytes -= static_cast<int64_t>(b->size);
        ++stats_.host_frees;
        delete b;
      }
      list.clear();
    }
  }

 private:
  static void deleter(void* ctx) {
    try {
      pinned_pool().release(static_cast<PinnedBlock*>(ctx));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[pinned allocator] %s\n", e.what());
    }
  }

  void release(PinnedBlock* b) {
    std::lock_guard<std::mutex> lock(mutex_);
    b->allocated = false;
    stats_.allocated_bytes -= static_cast<int64_t>(b->size);
    for (const Stream& s : b->streams) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      check(cudaEventRecord(e, static_cast<cudaStream_t>(raw_stream(s))), "cudaEventRecord");
      b->events.push_back(e);
    }
    b->streams.clear();
    if (b->events.empty()) {
      free_[b->size].push_back(b);
      stats_.cached_bytes += static_cast<int64_t>(b->size);
    } else {
      pending_.push_back(b);
      stats_.pending_bytes += static_cast<int64_t>(b->size);
    }
  }
  // Moves pending blocks whose events have all passed to their free lists. Under mutex_.
  void reclaim() {
    for (size_t i = 0; i < pending_.size();) {
      PinnedBlock* b = pending_[i];
      while (!b->events.empty()) {
        cudaError_t r = cudaEventQuery(b->events.back());
        if (r == cudaErrorNotReady) {
          cudaGetLastError();
          break;
        }
        check(r, "cudaEventQuery");
        cudaEventDestroy(b->events.back());
        b->events.pop_back();
      }
      if (!b->events.empty()) {
        ++i;
        continue;
      }
      pending_[i] = pending_.back();
      pending_.pop_back();
      stats_.pending_bytes -= static_cast<int64_t>(b->size);
      stats_.cached_bytes += static_cast<int64_t>(b->size);
      free_[b->size].push_back(b);
    }
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<PinnedBlock*>> free_;  // by size
  std::vector<PinnedBlock*> pending_;
  std::map<const void*, PinnedBlock*> by_ptr_;  // every block, for contains()
  PinnedStats stats_;
};

PinnedPool& pinned_pool() {
  static PinnedPool* p = new PinnedPool;  // leaked: pinned tensors may die at exit
  return *p;
}

}  // namespace

memory::CachingAllocator& caching_allocator(DeviceIndex device) {
  return *device_allocator(device).allocator;
}

memory::CachingAllocator* caching_allocator_if_created(DeviceIndex device) {
  if (device < 0 || device >= kMaxDeviceIndex) return nullptr;
  DeviceAllocator* a = devices().slots[static_cast<size_t>(device)].load(std::memory_order_acquire);
  return a ? a->allocator.get() : nullptr;
}

void empty_cache() {
  for (int i = 0; i < device_count() && i < kMaxDeviceIndex; ++i)
    if (auto* a = caching_allocator_if_created(static_cast<DeviceIndex>(i))) a->empty_cache();
}

void record_stream(const DataPtr& data, const Stream& stream) {
  if (!data) return;
  LOOM_CHECK(stream.device_type() == DeviceType::CUDA, "[record_stream] ", stream,
             " is not a CUDA stream");
  if (data.deleter() == pinned_pool().raw_deleter()) {
    pinned_pool().record_stream(static_cast<PinnedBlock*>(data.context()), stream);
  } else if (memory::CachingAllocator* a = memory::CachingAllocatorAdapter::allocator_of(data)) {
    a->record_stream(data.get(), stream);
  }
}

Allocator* pinned_allocator() {
  return &pinned_pool();
}

bool is_pinned(const void* p) {
  if (pinned_pool().contains(p)) return true;
  if (!is_available()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

PinnedStats pinned_stats() {
  return pinned_pool().stats();
}

void pinned_empty_cache() {
  pinned_pool().empty_cache();
}

}  // namespace loom::cuda

namespace loom::memory::detail {

Allocator* builtin_cuda_allocator(DeviceIndex device) {
  return cuda::device_allocator(device).adapter.get();
}

}  // namespace loom::memory::detail
