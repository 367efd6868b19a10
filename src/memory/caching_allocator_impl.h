// The caching allocator's state (internal): pools of cached blocks carved from device segments.
// See Note [caching allocator] in include/loom/memory/caching_allocator.h. The pieces:
//   - Block: one piece of a segment, linked to its neighbours (prev/next, address order) so that a
//     split block can merge back. A segment's first block never changes while the segment lives
//     (merges keep the lower block), so it names the segment.
//   - Pool: the free blocks of one pool in a set ordered by (stream, size, address), so that the
//     best fit for a stream is one lower_bound. Only free blocks are in it.
//   - AddressMap (allocator_parts.h): allocated blocks by address, for free().
//   - Expandable: the reserved range of an expandable segment (Note [expandable segments]); its
//     blocks point to it; it tracks the block at the end (tail) and which pages are mapped.
// Hot path (a cached block of a pool): one lock, a set lookup/erase/insert (nodes from a pool
// arena), a probe of the address map; Block objects are recycled, so nothing is heap-allocated
// except history strings when a context provider is set.
//
// The methods live in three files: caching_allocator.cpp (allocate, free, ordinary segments, the
// public class), caching_allocator_expandable.cpp (expandable segments and their pages) and
// caching_allocator_report.cpp (errors, statistics, snapshots). Nothing here is thread-safe: the
// public class calls it under Impl::mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "memory/allocator_parts.h"

namespace loom::memory::detail {

inline size_t round_up(size_t n, size_t multiple) {
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
  std::string op;  // while allocated: current_alloc_context() at allocation

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

// Note [expandable pages]
//   An expandable segment's blocks cover [base, base + end); `end` grows by whole pages when no
//   free block fits (its address range is reserved up front). Each page of that range is mapped or
//   not (`page_mapped`): a page under an allocated or pending block is always mapped; a free
//   block's pages may be either, so a request that takes a free block maps the pages it lacks.
//   Pages are unmapped by empty_cache, garbage collection, the OOM retry, a free under cache =
//   false, and with share_pages before other pages are mapped (Note [expandable segments]); the
//   pages of the free block at the end are unmapped by shrinking `end` (trim_tail).
struct Expandable {
  uint64_t base = 0;
  size_t reserved = 0;  // address space
  size_t end = 0;       // bytes covered by blocks from base on; a multiple of kExpandablePage
  size_t mapped = 0;    // bytes mapped within [base, base + end)
  std::vector<uint8_t> page_mapped;  // one per page of [base, base + end)
  Pool* pool = nullptr;
  StreamId stream = 0;
  Block* head = nullptr;  // the segment's blocks; both nullptr while end == 0
  Block* tail = nullptr;

  size_t page_of(uint64_t address) const { return (address - base) / kExpandablePage; }
  uint64_t page_address(size_t page) const { return base + page * kExpandablePage; }
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

}  // namespace loom::memory::detail

namespace loom::memory {

struct CachingAllocator::Impl {
  using Block = detail::Block;
  using Pool = detail::Pool;
  using Expandable = detail::Expandable;

  Impl(DeviceMemory& d, AllocatorConfig c)
      : device(d), config(std::move(c)), capacity(d.capacity()), stream_device(d.device()) {}

  DeviceMemory& device;
  const AllocatorConfig config;
  const size_t capacity;

  mutable std::mutex mutex;
  // Everything below is guarded by mutex.
  detail::NodeArena set_nodes;
  Pool small_pool{true, &set_nodes};
  Pool large_pool{false, &set_nodes};
  detail::AddressMap<Block> allocated;
  struct Segment {
    Block* head;
    size_t size;        // expandable: its `end` (the blocks' extent), not its mapped bytes
    Expandable* range;  // nullptr: an ordinary segment
  };
  std::map<uint64_t, Segment> segments;                         // by address
  std::map<std::pair<bool, StreamId>, Expandable> expandables;  // by (small pool, stream)
  std::map<StreamId, int> kept;  // Note [Kept streams]: keep_stream counts
  bool is_kept(StreamId s) const { return !kept.empty() && kept.count(s) != 0; }
  struct PendingFree {
    Block* block;
    std::vector<EventId> events;  // not yet passed
  };
  std::vector<PendingFree> pending;
  MemoryStats stats;  // largest_free_block is filled in by stats()
  uint64_t tick = 0;
  std::deque<Block> block_storage;  // every Block ever made; spare ones are linked through next
  Block* spare_blocks = nullptr;
  detail::HistoryClock clock;
  std::vector<TraceEvent> history;  // a ring once it holds history_capacity events
  size_t history_oldest = 0;
  std::function<std::string()> context_provider;
  // The device whose streams this allocator serves (DeviceMemory::device()). Last, so that the
  // members above keep the offsets (and cache lines) they had.
  const Device stream_device;
  void check_stream(const Stream& stream, const char* method) const {
    if (LOOM_LIKELY(stream.device() == stream_device)) return;
    throw_wrong_device(stream, method);
  }
  // Out of line: the allocation path keeps only the comparison above.
  [[noreturn]] void throw_wrong_device(const Stream& stream, const char* method) const;

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
    b->op.clear();
    b->range = nullptr;
    b->prev = nullptr;
    b->next = spare_blocks;
    spare_blocks = b;
  }

  void insert_free(Block* b) {
    b->pool->blocks.insert(b);
    if (b->is_split()) detail::bump(stats.inactive_split_bytes, static_cast<int64_t>(b->size));
  }

  void remove_free(Block* b) {
    b->pool->blocks.erase(b);
    if (b->is_split()) detail::bump(stats.inactive_split_bytes, -static_cast<int64_t>(b->size));
  }

  // ---- history ----
  void record(TraceEvent::Kind kind, uint64_t address, size_t size, StreamId stream,
              const std::string& context, std::string_view op = {}) {
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
    e->op = op;
  }

  // The observer seam (caching_allocator.h): one relaxed load when nobody observes.
  void notify(const void* ptr, int64_t delta_bytes, StreamId stream) const {
    notify_allocator_observer(AllocatorEvent{ptr, delta_bytes, stream,
                                             stats.allocated_bytes.current,
                                             stats.reserved_bytes.current, stream_device});
  }

  // ---- caching_allocator.cpp ----
  size_t segment_size(const Pool& pool, size_t size) const;
  bool should_split(const Block* b, size_t size) const;
  Block* take_free_block(Pool& pool, StreamId stream, size_t size);
  Block* new_segment(Pool& pool, StreamId stream, size_t size, size_t bytes,
                     const std::string& context);
  void release_segment(Block* b);
  void release_cached_segments();
  void collect_garbage(size_t new_bytes);
  void* allocate(size_t bytes, StreamId stream);
  void free(void* p);
  void free_block(Block* b);
  void cache_block(Block* b);
  void process_events();

  // ---- caching_allocator_expandable.cpp (Note [expandable pages]) ----
  Expandable& expandable_of(Pool& pool, StreamId stream);
  Block* grow(Pool& pool, StreamId stream, size_t size, size_t bytes, const std::string& context);
  void map_for(Block* b, size_t size, size_t bytes, const std::string& context);
  size_t unmapped_bytes(const Expandable& r, uint64_t address, size_t size) const;
  bool map_pages(Expandable& r, uint64_t address, size_t size);
  size_t unmap_pages(Expandable& r, uint64_t from, uint64_t to, size_t limit);
  size_t unmap_free_pages(Block* b, size_t limit);
  size_t share_pages(size_t want);
  void trim_tail(Block* b);
  size_t release_free_tail(Block* b);
  void release_expandable_pages();
  void release_expandables();  // the destructor's

  // ---- caching_allocator_report.cpp ----
  [[noreturn]] void throw_bad_free(void* p) const;
  [[noreturn]] void throw_oom(size_t bytes, size_t size, size_t seg, StreamId stream,
                              const std::string& context);
  size_t largest_free_block() const;
  MemoryStats current_stats() const;
  Snapshot snapshot() const;
};

}  // namespace loom::memory
