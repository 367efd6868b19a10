// Memory (memory layer): the Allocator interface and DataPtr.
//
// A DataPtr owns one allocation: it carries the pointer, an opaque context and the deleter that
// frees it, plus the device the memory lives on. It is move-only; destroying it frees the memory.
// An Allocator hands out DataPtrs; one allocator is registered per device type (CPU: 64-byte
// aligned host memory; Meta: no memory at all). Allocators must be thread-safe.
#pragma once

#include <cstddef>
#include <utility>

#include "loom/device.h"
#include "loom/export.h"
#include "loom/stream.h"

namespace loom {

using DeleterFn = void (*)(void* ctx);

class LOOM_API DataPtr {
 public:
  DataPtr() = default;
  DataPtr(void* data, void* ctx, DeleterFn deleter, Device device)
      : data_(data), ctx_(ctx), deleter_(deleter), device_(device) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  DataPtr(DataPtr&& o) noexcept { swap(o); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    DataPtr tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DataPtr() { reset(); }

  void* get() const { return data_; }
  void* context() const { return ctx_; }
  DeleterFn deleter() const { return deleter_; }
  Device device() const { return device_; }
  explicit operator bool() const { return data_ != nullptr; }

  void reset() {
    if (deleter_) deleter_(ctx_);
    data_ = ctx_ = nullptr;
    deleter_ = nullptr;
  }
  void swap(DataPtr& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(ctx_, o.ctx_);
    std::swap(deleter_, o.deleter_);
    std::swap(device_, o.device_);
  }

 private:
  void* data_ = nullptr;
  void* ctx_ = nullptr;
  DeleterFn deleter_ = nullptr;
  Device device_;
};

class LOOM_API Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nbytes of memory (nbytes may be 0) for use on the current stream of the allocator's
  // device. Throws OutOfMemoryError with the request size and the device when it cannot.
  virtual DataPtr allocate(size_t nbytes) = 0;
  // Optional: the same for use on `stream` (of the allocator's device). Allocators whose memory is
  // not tied to streams (CPU, Meta) keep this default, which ignores the stream.
  virtual DataPtr allocate_on(size_t nbytes, const Stream& stream) { return allocate(nbytes); }
  // Optional: the deleter this allocator puts in its DataPtrs (used to recognise its own memory).
  virtual DeleterFn raw_deleter() const { return nullptr; }
};

// The allocator of a device: the one registered for it, else its type's built-in one. Never null.
LOOM_API Allocator* get_allocator(Device device);
// Registers the allocator of a device (the caller keeps ownership and must outlive all use);
// nullptr restores the built-in one (memory it handed out keeps its own deleter).
LOOM_API void set_allocator(Device device, Allocator* allocator);
// The same for Device(type): the CPU, Meta, or the current CUDA device (Note [Canonical devices]).
inline Allocator* get_allocator(DeviceType type) {
  return get_allocator(Device(type));
}
inline void set_allocator(DeviceType type, Allocator* allocator) {
  set_allocator(Device(type), allocator);
}

// Alignment of CPU allocations, in bytes (a cache line; enough for AVX-512 loads).
constexpr size_t kCpuAlignment = 64;

// The CPU allocator's cache of large blocks (Note [Large host blocks] in src/memory/allocator.cpp).
struct HostCacheStats {
  size_t cached_bytes = 0;  // freed large blocks kept for reuse
  size_t limit_bytes = 0;   // the most it keeps
  int64_t hits = 0;         // large allocations served from the cache
  int64_t misses = 0;       // large allocations that asked the system
};
LOOM_API HostCacheStats host_cache_stats();
// Returns the cached large blocks to the system.
LOOM_API void empty_host_cache();

}  // namespace loom
