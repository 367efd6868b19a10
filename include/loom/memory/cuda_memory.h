// CUDA memory (memory layer): the caching allocator on each CUDA device and the pinned host pool.
//
// Each device gets one CachingAllocator (loom/memory/caching_allocator.h) over its real memory,
// created on first use with the policy named by LOOM_CUDA_ALLOC_POLICY (the names of
// AllocatorConfig::policy: "default", "expandable", ...). Ordinary segments come from cudaMalloc;
// the expandable policies reserve address space and map 2 MiB pages with the virtual-memory API
// (cuMemAddressReserve / cuMemCreate / cuMemMap). Events are cudaEvents on the streams of the
// device, so a block freed while other streams still use it (record_stream) is reused only after
// their work has passed. CUDA tensors allocate through it: get_allocator(cuda:i) is its adapter.
//
// Pinned host memory: a caching allocator of page-locked host blocks (cudaHostAlloc), sizes rounded
// up to a power of two. A block that a copy used on a stream (record_stream) goes back to the pool
// only after an event recorded on that stream at free time has passed, so a late asynchronous copy
// never reads a buffer already handed out again (PyTorch's CachingHostAllocator does the same).
//
// In a build without CUDA, every function throws NotImplementedError saying how to enable it,
// except the queries (*_if_created, pinned_stats), which report nothing.
// Thread-safety: all functions are thread-safe.
#pragma once

#include <cstdint>

#include "loom/device.h"
#include "loom/export.h"
#include "loom/memory.h"
#include "loom/memory/caching_allocator.h"
#include "loom/stream.h"

namespace loom::cuda {

// The caching allocator of CUDA device `device`, created on first use (ValueError for a device
// that does not exist).
LOOM_API memory::CachingAllocator& caching_allocator(DeviceIndex device);
// The same, or nullptr when nothing has been allocated on that device yet.
LOOM_API memory::CachingAllocator* caching_allocator_if_created(DeviceIndex device);
// Returns the cached, unused segments of every device's allocator to the driver.
LOOM_API void empty_cache();

// Marks that `data` (memory from the CUDA caching allocator or the pinned pool) is also used by the
// work queued on `stream`, so that its reuse after free waits for that work. Memory from other
// allocators needs no such mark and is ignored.
LOOM_API void record_stream(const DataPtr& data, const Stream& stream);

// The pinned host allocator (its DataPtrs are on kCPU).
LOOM_API Allocator* pinned_allocator();
// Whether `p` points into a block of the pinned pool (or memory the runtime knows as page-locked).
LOOM_API bool is_pinned(const void* p);

struct PinnedStats {
  int64_t allocated_bytes = 0;  // in blocks handed out (rounded sizes)
  int64_t cached_bytes = 0;     // in free blocks kept for reuse
  int64_t pending_bytes = 0;    // freed, waiting for the events of the streams that used them
  int64_t host_allocs = 0;      // cudaHostAlloc calls
  int64_t host_frees = 0;       // cudaFreeHost calls
  int64_t reuses = 0;           // allocations served from the pool
};
LOOM_API PinnedStats pinned_stats();
// Frees every cached pinned block whose events have passed.
LOOM_API void pinned_empty_cache();

}  // namespace loom::cuda

namespace loom::memory::detail {
// The allocator get_allocator(cuda:i) starts with: the caching allocator's adapter in CUDA builds,
// an allocator that throws NotImplementedError otherwise. Never null.
LOOM_API Allocator* builtin_cuda_allocator(DeviceIndex device);
}  // namespace loom::memory::detail
