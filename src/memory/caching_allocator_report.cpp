// The caching allocator's reports: errors (bad free, out of memory), statistics and snapshots;
// also the DeviceMemory defaults for devices without virtual memory.
#include <algorithm>
#include <cstdio>

#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "memory/caching_allocator_impl.h"
#include "memory/memory_format.h"

namespace loom::memory {

using detail::format_bytes;
using Block = detail::Block;
using Pool = detail::Pool;
using BlockKey = detail::BlockKey;

void CachingAllocator::Impl::throw_bad_free(void* p) const {
  uint64_t address = reinterpret_cast<uintptr_t>(p);
  auto it = segments.upper_bound(address);
  if (it != segments.begin()) {
    --it;
    if (address < it->first + it->second.size) {
      for (const Block* b = it->second.head; b != nullptr; b = b->next) {
        if (address >= b->address + b->size) continue;
        if (b->allocated) {
          LOOM_THROW(ValueError, "[caching allocator] free(", p, "): the pointer is inside the ",
                     format_bytes(b->size), " block allocated at ", b->ptr(),
                     " but is not its start");
        }
        LOOM_THROW(ValueError, "[caching allocator] free(", p,
                   "): double free: the memory is not allocated (",
                   b->pending ? "already freed, waiting for events on other streams"
                              : "already freed and cached",
                   ")");
      }
    }
  }
  LOOM_THROW(ValueError, "[caching allocator] free(", p,
             "): the pointer was not allocated by this caching allocator (a foreign pointer, "
             "or one freed and returned to the device already)");
}

void CachingAllocator::Impl::throw_oom(size_t bytes, size_t size, size_t seg, StreamId stream,
                                       const std::string& context) {
  ++stats.num_ooms;
  if (config.history_capacity != 0) {
    const char* op = current_alloc_context();
    record(TraceEvent::Kind::Oom, 0, bytes, stream, context, op != nullptr ? op : "");
  }
  MemoryStats s = current_stats();
  size_t device_free = device.free_bytes();
  size_t free_cached = static_cast<size_t>(s.reserved_bytes.current - s.active_bytes.current);
  const char* hint;
  if (free_cached >= size) {
    hint =
        "enough memory is cached but no free block is large enough (fragmentation): try a "
        "max_split_size policy (max-split-64m) or allocate the largest tensors first";
  } else {
    hint =
        "reduce the batch size or the model, or free tensors that are no longer needed; "
        "memory used by other allocators of the device is not returned by empty_cache()";
  }
  char frag[32];
  std::snprintf(frag, sizeof(frag), "%.2f", s.fragmentation());
  LOOM_THROW(OutOfMemoryError, "[caching allocator] out of memory: tried to allocate ",
             format_bytes(bytes), " (", bytes, " bytes; a new ", format_bytes(seg),
             " segment) on stream ", stream, " of ", device.name(), "; the device has ",
             format_bytes(device_free), " free of ", format_bytes(capacity),
             " total; this allocator has ", format_bytes(s.reserved_bytes.current), " reserved, ",
             format_bytes(s.allocated_bytes.current), " allocated, largest free block ",
             format_bytes(s.largest_free_block), ", fragmentation ", frag,
             " (cached segments were already released and the request retried). Hint: ", hint);
}

size_t CachingAllocator::Impl::largest_free_block() const {
  size_t largest = 0;
  for (const Pool* pool : {&small_pool, &large_pool}) {
    // The last block of each stream's range is that stream's largest: hop from range to range.
    auto it = pool->blocks.end();
    while (it != pool->blocks.begin()) {
      --it;
      largest = std::max(largest, (*it)->size);
      it = pool->blocks.lower_bound(BlockKey{(*it)->stream, 0, 0});
    }
  }
  return largest;
}

MemoryStats CachingAllocator::Impl::current_stats() const {
  MemoryStats s = stats;
  s.largest_free_block = largest_free_block();
  return s;
}

Snapshot CachingAllocator::Impl::snapshot() const {
  Snapshot snap;
  snap.device = device.name();
  snap.capacity = capacity;
  snap.config = config.describe();
  snap.stats = current_stats();
  snap.segments.reserve(segments.size());
  for (const auto& [address, seg] : segments) {
    SegmentInfo& si = snap.segments.emplace_back();
    si.address = address;
    si.size = seg.size;
    si.small_pool = seg.head->pool->small;
    si.expandable = seg.range != nullptr;
    si.stream = seg.head->stream;
    if (const detail::Expandable* r = seg.range) {
      // Note [expandable pages]: the runs of unmapped pages.
      const size_t pages = r->end / kExpandablePage;
      for (size_t i = 0; i < pages;) {
        if (r->page_mapped[i]) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < pages && !r->page_mapped[j]) ++j;
        si.unmapped.push_back({r->page_address(i), (j - i) * kExpandablePage});
        i = j;
      }
    }
    for (const Block* b = seg.head; b != nullptr; b = b->next) {
      BlockInfo& bi = si.blocks.emplace_back();
      bi.address = b->address;
      bi.size = b->size;
      bi.requested = b->allocated ? b->requested : 0;
      bi.allocated = b->allocated;
      bi.pending = b->pending;
      bi.stream = b->stream;
      bi.context = b->context;
      bi.op = b->op;
    }
  }
  snap.history.reserve(history.size());
  detail::HistoryClock::Mapping to_ns(clock);
  for (size_t i = 0; i < history.size(); ++i) {
    TraceEvent& e = snap.history.emplace_back(history[(history_oldest + i) % history.size()]);
    e.time_ns = to_ns(e.time_ns);
  }
  return snap;
}

namespace {
[[noreturn]] void throw_no_virtual_memory(const DeviceMemory& d, const char* op) {
  LOOM_THROW(ValueError, "[caching allocator] ", d.name(), " does not support ", op,
             " (virtual memory for expandable segments is not supported by this device)");
}
}  // namespace

void* DeviceMemory::reserve(size_t) {
  throw_no_virtual_memory(*this, "reserve");
}
bool DeviceMemory::map(void*, size_t) {
  throw_no_virtual_memory(*this, "map");
}
void DeviceMemory::unmap(void*, size_t) {
  throw_no_virtual_memory(*this, "unmap");
}
void DeviceMemory::release(void*, size_t) {
  throw_no_virtual_memory(*this, "release");
}

}  // namespace loom::memory
