// CachingAllocatorAdapter: loom's Allocator interface over a CachingAllocator.
#include <cstdio>
#include <memory>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"

namespace loom::memory {
namespace {

struct AdapterAllocation {
  CachingAllocator* allocator;
  void* ptr;
};

void adapter_delete(void* ctx) {
  auto* a = static_cast<AdapterAllocation*>(ctx);
  try {
    a->allocator->free(a->ptr);
  } catch (const std::exception& e) {
    // A deleter must not throw (it runs in destructors); a failure here is a bug elsewhere.
    std::fprintf(stderr, "[caching allocator adapter] %s\n", e.what());
  }
  delete a;
}

}  // namespace

CachingAllocatorAdapter::CachingAllocatorAdapter(CachingAllocator& a, Device device)
    : a_(a), device_(device) {}

DataPtr CachingAllocatorAdapter::allocate(size_t nbytes) {
  return allocate_on(nbytes, current_stream(device_));
}

DataPtr CachingAllocatorAdapter::allocate_on(size_t nbytes, const Stream& stream) {
  if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, device_);
  LOOM_CHECK(stream.device() == device_, "[caching allocator adapter] an allocation on ", stream,
             " from the allocator of ", device_);
  auto ctx = std::make_unique<AdapterAllocation>(AdapterAllocation{&a_, nullptr});
  ctx->ptr = a_.allocate(nbytes, stream);
  void* p = ctx->ptr;
  return DataPtr(p, ctx.release(), &adapter_delete, device_);
}

}  // namespace loom::memory

namespace loom::memory {

DeleterFn CachingAllocatorAdapter::raw_deleter() const {
  return &adapter_delete;
}

CachingAllocator* CachingAllocatorAdapter::allocator_of(const DataPtr& data) {
  if (data.deleter() != &adapter_delete) return nullptr;
  return static_cast<AdapterAllocation*>(data.context())->allocator;
}

}  // namespace loom::memory
