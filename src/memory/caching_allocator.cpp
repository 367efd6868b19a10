// The caching allocator: pools of cached blocks carved from device segments. See Note [caching
// allocator] in include/loom/memory/caching_allocator.h; the pieces here:
//   - Block: one piece of a segment, linked to its neighbours (prev/next, address order) so that a
//     split block can merge back. A segment's first block never changes while the segment lives
//     (merges keep the lower block), so it names the segment.
//   - Pool: the free blocks of one pool in a set ordered by (stream, size, address), so that the
//     best fit for a stream is one lower_bound. Only free blocks are in it.
//   - AddressMap (allocator_parts.h): allocated blocks by address, for free().
//   - Expandable: the reserved range of an expandable segment (Note [expandable segments]); its
//     blocks point to it, and it tracks the block at the end of the mapped range (tail).
// Hot path (a cached block of a pool): one lock, a set lookup/erase/insert (nodes from a pool
// arena), a probe of the address map; Block objects are recycled, so nothing is heap-allocated
// except history strings when a context provider is set.
#include "loom/memory/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "loom/error.h"
#include "loom/profiler.h"
#include "memory/allocator_parts.h"
#include "memory/memory_format.h"

namespace loom::memory {
namespace {

using detail::AddressMap;
using detail::ArenaAllocator;
using detail::format_bytes;
using detail::HistoryClock;
using detail::NodeArena;

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

struct Pool;
struct Expandable;

struct Block {
  uint64_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // while allocated
  StreamId stream = 0;   // the stream of its segment
  Pool* pool = nullptr;
  Expandable* range = nullptr;  // the expandable segment it belongs to, if any
  Block* prev = nullptr;        // neighbours in the segment (next also links spare blocks)
  Block* next = nullptr;
  uint64_t free_tick = 0;  // when it last became free (garbage collection frees the oldest)
  bool allocated = false;
  bool pending = false;               // freed, waiting for events on other streams
  std::vector<StreamId> stream_uses;  // other streams that used it (record_stream)
  std::string context;

  bool is_free() const { return !allocated && !pending; }
  bool is_split() const { return prev != nullptr || next != nullptr; }
  void* ptr() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }
};

struct BlockKey {
  StreamId stream;
  size_t size;
  uint64_t address;
};

struct BlockOrder {
  using is_transparent = void;
  static auto key(const Block* b) { return std::make_tuple(b->stream, b->size, b->address); }
  static auto key(const BlockKey& k) { return std::make_tuple(k.stream, k.size, k.address); }
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return key(a) < key(b);
  }
};

struct Pool {
  Pool(bool small_pool, NodeArena* arena)
      : blocks(BlockOrder{}, ArenaAllocator<Block*>(arena)), small(small_pool) {}
  std::set<Block*, BlockOrder, ArenaAllocator<Block*>> blocks;  // free blocks only
  bool small;
};

struct Expandable {
  uint64_t base = 0;
  size_t reserved = 0;  // address space
  size_t mapped = 0;    // bytes mapped from base on; a multiple of kExpandablePage
  Pool* pool = nullptr;
  StreamId stream = 0;
  Block* head = nullptr;  // the segment's blocks; both nullptr while nothing is mapped
  Block* tail = nullptr;
};

// Stat::add, inlined here for the hot path (the exported one is called through the PLT).
inline void bump(Stat& s, int64_t n) {
  s.current += n;
  if (n >= 0) {
    s.allocated += n;
    if (s.current > s.peak) s.peak = s.current;
  } else {
    s.freed -= n;
  }
}

}  // namespace

struct CachingAllocator::Impl {
  Impl(DeviceMemory& d, AllocatorConfig c)
      : device(d), config(std::move(c)), capacity(d.capacity()) {}

  DeviceMemory& device;
  const AllocatorConfig config;
  const size_t capacity;

  mutable std::mutex mutex;
  // Everything below is guarded by mutex.
  NodeArena set_nodes;
  Pool small_pool{true, &set_nodes};
  Pool large_pool{false, &set_nodes};
  AddressMap<Block> allocated;
  struct Segment {
    Block* head;
    size_t size;
    Expandable* range;  // nullptr: an ordinary segment
  };
  std::map<uint64_t, Segment> segments;                         // by address
  std::map<std::pair<bool, StreamId>, Expandable> expandables;  // by (small pool, stream)
  struct PendingFree {
    Block* block;
    std::vector<EventId> events;  // not yet passed
  };
  std::vector<PendingFree> pending;
  MemoryStats stats;  // largest_free_block is filled in by stats()
  uint64_t tick = 0;
  std::deque<Block> block_storage;  // every Block ever made; spare ones are linked through next
  Block* spare_blocks = nullptr;
  HistoryClock clock;
  std::vector<TraceEvent> history;  // a ring once it holds history_capacity events
  size_t history_oldest = 0;
  std::function<std::string()> context_provider;

  // ---- blocks ----
  Block* new_block() {
    if (spare_blocks != nullptr) {
      Block* b = spare_blocks;
      spare_blocks = b->next;
      b->next = nullptr;
      return b;
    }
    return &block_storage.emplace_back();
  }

  void recycle(Block* b) {
    b->requested = 0;
    b->allocated = b->pending = false;
    b->stream_uses.clear();
    b->context.clear();
    b->range = nullptr;
    b->prev = nullptr;
    b->next = spare_blocks;
    spare_blocks = b;
  }

  void insert_free(Block* b) {
    b->pool->blocks.insert(b);
    if (b->is_split()) bump(stats.inactive_split_bytes, static_cast<int64_t>(b->size));
  }

  void remove_free(Block* b) {
    b->pool->blocks.erase(b);
    if (b->is_split()) bump(stats.inactive_split_bytes, -static_cast<int64_t>(b->size));
  }

  // ---- history ----
  void record(TraceEvent::Kind kind, uint64_t address, size_t size, StreamId stream,
              const std::string& context) {
    if (config.history_capacity == 0) return;
    TraceEvent* e;
    if (history.size() < config.history_capacity) {
      e = &history.emplace_back();
    } else {
      e = &history[history_oldest];
      history_oldest = (history_oldest + 1) % history.size();
    }
    e->kind = kind;
    e->address = address;
    e->size = size;
    e->stream = stream;
    e->time_ns = clock.stamp();  // raw until snapshot(): Note [history timestamps]
    e->context = context;
  }

  // ---- sizes ----
  size_t segment_size(const Pool& pool, size_t size) const {
    size_t seg;
    if (pool.small) {
      seg = std::max(config.small_segment, size);
    } else {
      size_t fit = round_up(size, config.large_round);
      seg = size < config.min_large_alloc ? std::max(config.large_segment, fit) : fit;
      // A segment above max_split_size could never be split: do not make it larger than needed.
      if (seg > config.max_split_size) seg = fit;
    }
    if (seg > capacity) {
      // A small device: the largest segment that is not larger than the device, if any fits.
      size_t fit =
          pool.small ? capacity / kRoundBytes * kRoundBytes : round_up(size, config.large_round);
      seg = std::max(size, fit <= capacity ? fit : size_t{0});
    }
    return seg;
  }

  bool should_split(const Block* b, size_t size) const {
    size_t remaining = b->size - size;
    // An expandable segment's free remainder is not wasted on a new segment later: split it off
    // whatever its size (as small-pool blocks are).
    if (b->pool->small || b->range != nullptr) return remaining >= kRoundBytes;
    if (b->size > config.max_split_size) return false;
    return remaining > config.small_size;
  }

  // The best fit for `size` on `stream`, taken out of the pool; nullptr when none.
  Block* take_free_block(Pool& pool, StreamId stream, size_t size) {
    auto it = pool.blocks.lower_bound(BlockKey{stream, size, 0});
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    if (!pool.small) {
      // Every other candidate is larger still, so a refusal here is final.
      if (size <= config.max_split_size && b->size > config.max_split_size) return nullptr;
      if (size > config.max_split_size && b->size - size > config.large_round) return nullptr;
    }
    pool.blocks.erase(it);
    if (b->is_split()) bump(stats.inactive_split_bytes, -static_cast<int64_t>(b->size));
    return b;
  }

  // ---- segments ----
  Block* new_segment(Pool& pool, StreamId stream, size_t size, size_t bytes,
                     const std::string& context) {
    size_t seg = segment_size(pool, size);
    if (config.gc_threshold > 0.0) collect_garbage(seg);
    void* p = device.malloc(seg);
    if (p == nullptr) {
      process_events();
      release_cached_segments();
      ++stats.num_alloc_retries;
      p = device.malloc(seg);
      if (p == nullptr) throw_oom(bytes, size, seg, stream, context);
    }
    uint64_t address = reinterpret_cast<uintptr_t>(p);
    Block* b = new_block();
    b->address = address;
    b->size = seg;
    b->stream = stream;
    b->pool = &pool;
    b->free_tick = ++tick;
    segments.emplace(address, Segment{b, seg, nullptr});
    ++stats.num_device_mallocs;
    bump(stats.reserved_bytes, static_cast<int64_t>(seg));
    bump(stats.segments, 1);
    if (config.history_capacity != 0) {
      record(TraceEvent::Kind::SegmentAlloc, address, seg, stream, std::string());
    }
    return b;
  }

  // `b` is a whole segment, already out of its pool.
  void release_segment(Block* b) {
    if (b->range != nullptr) {
      trim_tail(b);
      return;
    }
    segments.erase(b->address);
    device.free(b->ptr(), b->size);
    ++stats.num_device_frees;
    bump(stats.reserved_bytes, -static_cast<int64_t>(b->size));
    bump(stats.segments, -1);
    if (config.history_capacity != 0) {
      record(TraceEvent::Kind::SegmentFree, b->address, b->size, b->stream, std::string());
    }
    recycle(b);
  }

  void release_cached_segments() {
    for (Pool* pool : {&small_pool, &large_pool}) {
      for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
        Block* b = *it;
        if (b->is_split()) {
          ++it;
          continue;
        }
        it = pool->blocks.erase(it);
        release_segment(b);
      }
    }
    for (auto& [key, r] : expandables) {
      if (r.tail != nullptr && r.tail->is_free()) {
        remove_free(r.tail);
        trim_tail(r.tail);
      }
    }
  }

  // ---- expandable segments (Note [expandable segments]) ----
  Expandable& expandable_of(Pool& pool, StreamId stream) {
    auto [it, inserted] = expandables.try_emplace(std::make_pair(pool.small, stream));
    Expandable& r = it->second;
    if (inserted) {
      r.reserved = round_up(capacity, kExpandablePage);
      void* p = device.reserve(r.reserved);
      if (p == nullptr) {
        expandables.erase(it);
        LOOM_THROW(OutOfMemoryError, "[caching allocator] ", device.name(), " could not reserve ",
                   format_bytes(round_up(capacity, kExpandablePage)),
                   " of address space for an expandable segment of stream ", stream);
      }
      r.base = reinterpret_cast<uintptr_t>(p);
      r.pool = &pool;
      r.stream = stream;
    }
    return r;
  }

  // Bytes to map at the end of `r` so that a block of `size` fits there.
  static size_t pages_needed(const Expandable& r, size_t size) {
    size_t have = r.tail != nullptr && r.tail->is_free() ? r.tail->size : 0;
    return size > have ? round_up(size - have, kExpandablePage) : 0;
  }

  bool try_map(Expandable& r, size_t n) {
    if (n == 0) return true;
    if (r.mapped + n > r.reserved) return false;
    return device.map(reinterpret_cast<void*>(static_cast<uintptr_t>(r.base + r.mapped)), n);
  }

  // A free block of at least `size` at the end of the expandable segment of (pool, stream), out of
  // its pool: the free block there grown by the missing pages, or new pages.
  Block* grow(Pool& pool, StreamId stream, size_t size, size_t bytes, const std::string& context) {
    Expandable& r = expandable_of(pool, stream);
    if (config.gc_threshold > 0.0) collect_garbage(pages_needed(r, size));
    if (config.share_pages && pages_needed(r, size) != 0) {
      // Pages move between the segments of the pools and streams instead of adding up.
      for (auto& [key, other] : expandables) {
        if (&other != &r && other.tail != nullptr && other.tail->is_free()) {
          remove_free(other.tail);
          trim_tail(other.tail);
        }
      }
    }
    size_t n = pages_needed(r, size);
    if (!try_map(r, n)) {
      process_events();
      release_cached_segments();
      ++stats.num_alloc_retries;
      n = pages_needed(r, size);  // the retry may have unmapped a free block at the end
      if (!try_map(r, n)) throw_oom(bytes, size, n, stream, context);
    }
    uint64_t at = r.base + r.mapped;
    if (n != 0) {
      r.mapped += n;
      bump(stats.reserved_bytes, static_cast<int64_t>(n));
      if (config.history_capacity != 0) {
        record(TraceEvent::Kind::SegmentAlloc, at, n, stream, std::string());
      }
    }
    Block* b;
    if (r.tail != nullptr && r.tail->is_free()) {
      b = r.tail;
      remove_free(b);
      b->size += n;
    } else {
      b = new_block();
      b->address = at;
      b->size = n;
      b->stream = stream;
      b->pool = &pool;
      b->range = &r;
      b->free_tick = ++tick;
      b->prev = r.tail;
      if (r.tail != nullptr) {
        r.tail->next = b;
      } else {
        r.head = b;
        segments.emplace(r.base, Segment{b, 0, &r});
        ++stats.num_device_mallocs;
        bump(stats.segments, 1);
      }
      r.tail = b;
    }
    segments.at(r.base).size = r.mapped;
    return b;
  }

  // `b`, free and out of its pool, is the block at the end of its expandable segment: unmaps its
  // whole pages and puts what is left of it back in its pool. A segment left without pages is gone.
  void trim_tail(Block* b) {
    Expandable& r = *b->range;
    uint64_t end = b->address + b->size;
    uint64_t keep = r.base + round_up(b->address - r.base, kExpandablePage);
    if (keep >= end) {
      insert_free(b);
      return;
    }
    size_t n = end - keep;
    device.unmap(reinterpret_cast<void*>(static_cast<uintptr_t>(keep)), n);
    r.mapped -= n;
    bump(stats.reserved_bytes, -static_cast<int64_t>(n));
    if (config.history_capacity != 0) {
      record(TraceEvent::Kind::SegmentFree, keep, n, r.stream, std::string());
    }
    if (keep > b->address) {
      b->size = keep - b->address;
      insert_free(b);
      segments.at(r.base).size = r.mapped;
      return;
    }
    Block* prev = b->prev;
    recycle(b);
    if (prev != nullptr) {
      prev->next = nullptr;
      r.tail = prev;
      segments.at(r.base).size = r.mapped;
      return;
    }
    segments.erase(r.base);
    r.head = r.tail = nullptr;
    ++stats.num_device_frees;
    bump(stats.segments, -1);
  }

  // Before reserved memory grows past gc_threshold x capacity, returns the segments that have been
  // free longest until the new segment fits under the threshold (or none are left); with
  // expandable segments, also the pages of free blocks at their ends.
  void collect_garbage(size_t new_segment) {
    double limit = config.gc_threshold * static_cast<double>(capacity);
    double after =
        static_cast<double>(stats.reserved_bytes.current) + static_cast<double>(new_segment);
    if (after <= limit) return;
    std::vector<Block*> candidates;  // whole free segments, and free ends of expandable ones
    for (Pool* pool : {&small_pool, &large_pool}) {
      for (Block* b : pool->blocks) {
        if (!b->is_split() || (b->range != nullptr && b->next == nullptr)) candidates.push_back(b);
      }
    }
    std::sort(candidates.begin(), candidates.end(),
              [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
    double excess = after - limit;
    for (Block* b : candidates) {
      if (excess <= 0) break;
      excess -= static_cast<double>(b->size);
      remove_free(b);
      if (b->range != nullptr) {
        trim_tail(b);  // its whole pages
      } else {
        release_segment(b);
      }
    }
  }

  // ---- allocate / free ----
  void* allocate(size_t bytes, StreamId stream) {
    // First, so that a provider that throws leaves everything as it was.
    std::string context;
    if (context_provider) context = context_provider();
    if (!pending.empty()) process_events();
    size_t size = bytes < kRoundBytes ? kRoundBytes : round_up(bytes, kRoundBytes);
    Pool& pool = size <= config.small_size ? small_pool : large_pool;
    Block* b = take_free_block(pool, stream, size);
    if (b == nullptr) {
      b = config.expandable ? grow(pool, stream, size, bytes, context)
                            : new_segment(pool, stream, size, bytes, context);
    }
    if (should_split(b, size)) {
      Block* rest = new_block();
      rest->address = b->address + size;
      rest->size = b->size - size;
      rest->stream = b->stream;
      rest->pool = b->pool;
      rest->range = b->range;
      if (rest->range != nullptr && b->next == nullptr) rest->range->tail = rest;
      rest->free_tick = b->free_tick;
      rest->prev = b;
      rest->next = b->next;
      if (rest->next != nullptr) rest->next->prev = rest;
      b->next = rest;
      b->size = size;
      insert_free(rest);
    }
    b->allocated = true;
    b->requested = bytes;
    b->context = std::move(context);
    allocated.insert(b->address, b);
    bump(stats.allocated_bytes, static_cast<int64_t>(b->size));
    bump(stats.requested_bytes, static_cast<int64_t>(bytes));
    bump(stats.active_bytes, static_cast<int64_t>(b->size));
    bump(stats.allocations, 1);
    profiler::record_memory(
        b->ptr(), static_cast<int64_t>(b->size), stats.allocated_bytes.current,
        stats.reserved_bytes.current);  // one branch unless a Profile records memory
    if (config.history_capacity != 0) {
      record(TraceEvent::Kind::Alloc, b->address, b->size, stream, b->context);
    }
    return b->ptr();
  }

  void free(void* p) {
    uint64_t address = reinterpret_cast<uintptr_t>(p);
    Block* b = allocated.find(address);
    if (b == nullptr) throw_bad_free(p);
    allocated.erase(address);
    bump(stats.allocated_bytes, -static_cast<int64_t>(b->size));
    bump(stats.requested_bytes, -static_cast<int64_t>(b->requested));
    bump(stats.allocations, -1);
    profiler::record_memory(p, -static_cast<int64_t>(b->size), stats.allocated_bytes.current,
                            stats.reserved_bytes.current);
    if (config.history_capacity != 0) {
      record(TraceEvent::Kind::Free, b->address, b->size, b->stream, b->context);
    }
    b->allocated = false;
    b->requested = 0;
    if (b->stream_uses.empty()) {
      free_block(b);
      return;
    }
    // Used on other streams: reusable once the work queued there so far has finished.
    PendingFree pf{b, {}};
    for (StreamId s : b->stream_uses) {
      EventId e = device.record_event(s);
      if (!device.query(e)) pf.events.push_back(e);
    }
    b->stream_uses.clear();
    if (pf.events.empty()) {
      free_block(b);
      return;
    }
    b->pending = true;
    pending.push_back(std::move(pf));
  }

  // Makes `b` (no longer allocated) free: merges it with free neighbours and caches it, or returns
  // its segment without caching.
  void free_block(Block* b) {
    b->pending = false;
    b->context.clear();
    bump(stats.active_bytes, -static_cast<int64_t>(b->size));
    if (b->next != nullptr && b->next->is_free()) {
      Block* n = b->next;
      remove_free(n);
      b->size += n->size;
      b->next = n->next;
      if (b->next != nullptr) b->next->prev = b;
      recycle(n);
    }
    if (b->prev != nullptr && b->prev->is_free()) {
      Block* p = b->prev;
      remove_free(p);
      p->size += b->size;
      p->next = b->next;
      if (p->next != nullptr) p->next->prev = p;
      recycle(b);
      b = p;
    }
    b->free_tick = ++tick;
    if (b->range != nullptr && b->next == nullptr) {
      b->range->tail = b;
      if (!config.cache) {
        trim_tail(b);
        return;
      }
    }
    if (!config.cache && !b->is_split()) {
      release_segment(b);
      return;
    }
    insert_free(b);
  }

  // Frees the pending blocks whose events have all passed.
  void process_events() {
    for (size_t i = 0; i < pending.size();) {
      PendingFree& pf = pending[i];
      while (!pf.events.empty() && device.query(pf.events.back())) pf.events.pop_back();
      if (!pf.events.empty()) {
        ++i;
        continue;
      }
      Block* b = pf.block;
      if (i + 1 != pending.size()) pending[i] = std::move(pending.back());
      pending.pop_back();
      free_block(b);
    }
  }

  // ---- errors ----
  [[noreturn]] void throw_bad_free(void* p) const {
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

  [[noreturn]] void throw_oom(size_t bytes, size_t size, size_t seg, StreamId stream,
                              const std::string& context) {
    ++stats.num_ooms;
    if (config.history_capacity != 0) record(TraceEvent::Kind::Oom, 0, bytes, stream, context);
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

  // ---- inspection ----
  size_t largest_free_block() const {
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

  MemoryStats current_stats() const {
    MemoryStats s = stats;
    s.largest_free_block = largest_free_block();
    return s;
  }
};

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

CachingAllocator::CachingAllocator(DeviceMemory& device, AllocatorConfig config) {
  config.validate();
  LOOM_CHECK(!config.expandable || device.supports_expandable(), "[caching allocator] ",
             device.name(), " does not support expandable segments (config expandable; Note ",
             "[expandable segments])");
  impl_ = std::make_unique<Impl>(device, std::move(config));
  LOOM_CHECK(impl_->capacity > 0, "[caching allocator] ", device.name(), " has no capacity");
  if (impl_->config.history_capacity != 0) {
    impl_->history.reserve(std::min<size_t>(impl_->config.history_capacity, 4096));
  }
}

CachingAllocator::~CachingAllocator() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  try {
    m.process_events();  // pending frees whose work has finished are not "in use"
  } catch (const std::exception&) {
  }
  size_t live = m.allocated.size() + m.pending.size();
  if (live != 0) {
    std::fprintf(stderr,
                 "[caching allocator] warning: destroyed while %zu block(s) are still in use (%lld "
                 "bytes allocated) on %s; their segments are returned to the device\n",
                 live, static_cast<long long>(m.stats.allocated_bytes.current),
                 m.device.name().c_str());
  }
  for (auto& [address, seg] : m.segments) {
    try {
      if (seg.range != nullptr) {
        m.device.unmap(seg.head->ptr(), seg.size);
      } else {
        m.device.free(seg.head->ptr(), seg.size);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[caching allocator] warning: returning a segment failed: %s\n",
                   e.what());
    }
  }
  for (auto& [key, r] : m.expandables) {
    try {
      m.device.release(reinterpret_cast<void*>(static_cast<uintptr_t>(r.base)), r.reserved);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[caching allocator] warning: releasing an address range failed: %s\n",
                   e.what());
    }
  }
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  Impl& m = *impl_;
  LOOM_CHECK(bytes <= m.capacity, "[caching allocator] cannot allocate ", bytes, " bytes (",
             format_bytes(bytes), "): more than the capacity of ", m.device.name(), " (",
             m.capacity, " bytes)");
  std::lock_guard<std::mutex> lock(m.mutex);
  return m.allocate(bytes, stream);
}

void CachingAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->free(p);
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  Block* b = m.allocated.find(reinterpret_cast<uintptr_t>(p));
  LOOM_CHECK(b != nullptr, "[caching allocator] record_stream(", p, ", stream ", stream,
             "): the pointer is not a block allocated by this caching allocator");
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->process_events();
  impl_->release_cached_segments();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->current_stats();
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (const detail::StatField& f : detail::kStatFields) {
    Stat& s = impl_->stats.*(f.member);
    s.peak = s.current;
  }
}

Snapshot CachingAllocator::snapshot() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  Snapshot snap;
  snap.device = m.device.name();
  snap.capacity = m.capacity;
  snap.config = m.config.describe();
  snap.stats = m.current_stats();
  snap.segments.reserve(m.segments.size());
  for (const auto& [address, seg] : m.segments) {
    SegmentInfo& si = snap.segments.emplace_back();
    si.address = address;
    si.size = seg.size;
    si.small_pool = seg.head->pool->small;
    si.expandable = seg.range != nullptr;
    si.stream = seg.head->stream;
    for (const Block* b = seg.head; b != nullptr; b = b->next) {
      BlockInfo& bi = si.blocks.emplace_back();
      bi.address = b->address;
      bi.size = b->size;
      bi.requested = b->allocated ? b->requested : 0;
      bi.allocated = b->allocated;
      bi.pending = b->pending;
      bi.stream = b->stream;
      bi.context = b->context;
    }
  }
  snap.history.reserve(m.history.size());
  HistoryClock::Mapping to_ns(m.clock);
  for (size_t i = 0; i < m.history.size(); ++i) {
    TraceEvent& e = snap.history.emplace_back(m.history[(m.history_oldest + i) % m.history.size()]);
    e.time_ns = to_ns(e.time_ns);
  }
  return snap;
}

const AllocatorConfig& CachingAllocator::config() const {
  return impl_->config;
}

DeviceMemory& CachingAllocator::device() const {
  return impl_->device;
}

void CachingAllocator::set_context_provider(std::function<std::string()> fn) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->context_provider = std::move(fn);
}

}  // namespace loom::memory
