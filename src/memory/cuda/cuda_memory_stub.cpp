// CUDA memory in a build without CUDA: allocations say how to enable it; queries report nothing.
#include "loom/error.h"
#include "loom/memory/cuda_memory.h"

namespace loom::cuda {
namespace {

[[noreturn]] void missing(const char* what) {
  LOOM_THROW(NotImplementedError, "[cuda allocator] ", what,
             " is not available in this build (configure with -DLOOM_CUDA=ON on a machine with "
             "the CUDA toolkit)");
}

class MissingCudaAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t) override { missing("CUDA memory"); }
};

}  // namespace

memory::CachingAllocator& caching_allocator(DeviceIndex) {
  missing("the CUDA caching allocator");
}
memory::CachingAllocator* caching_allocator_if_created(DeviceIndex) {
  return nullptr;
}
void empty_cache() {}
void record_stream(const DataPtr&, const Stream&) {
  missing("record_stream");
}
Allocator* pinned_allocator() {
  static MissingCudaAllocator a;
  return &a;
}
bool is_pinned(const void*) {
  return false;
}
PinnedStats pinned_stats() {
  return {};
}
void pinned_empty_cache() {}

}  // namespace loom::cuda

namespace loom::memory::detail {

Allocator* builtin_cuda_allocator(DeviceIndex) {
  static cuda::MissingCudaAllocator a;
  return &a;
}

}  // namespace loom::memory::detail
