// The caching allocator: allocate, free, ordinary segments, and the public class. The state and
// its pieces are described in memory/caching_allocator_impl.h; expandable segments are in
// caching_allocator_expandable.cpp, errors, statistics and snapshots in
// caching_allocator_report.cpp.
#include "loom/memory/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "loom/error.h"
#include "loom/memory/alloc_context.h"
#include "memory/caching_allocator_impl.h"
#include "memory/memory_format.h"

namespace loom::memory {

using detail::bump;
using detail::format_bytes;
using detail::round_up;
using Block = detail::Block;
using Pool = detail::Pool;
using BlockKey = detail::BlockKey;

// ---- sizes ----
size_t CachingAllocator::Impl::segment_size(const Pool& pool, size_t size) const {
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

bool CachingAllocator::Impl::should_split(const Block* b, size_t size) const {
  size_t remaining = b->size - size;
  // An expandable segment's free remainder is not wasted on a new segment later: split it off
  // whatever its size (as small-pool blocks are).
  if (b->pool->small || b->range != nullptr) return remaining >= kRoundBytes;
  if (b->size > config.max_split_size) return false;
  return remaining > config.small_size;
}

// The best fit for `size` on `stream`, taken out of the pool; nullptr when none.
Block* CachingAllocator::Impl::take_free_block(Pool& pool, StreamId stream, size_t size) {
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

// ---- ordinary segments ----
Block* CachingAllocator::Impl::new_segment(Pool& pool, StreamId stream, size_t size, size_t bytes,
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
void CachingAllocator::Impl::release_segment(Block* b) {
  if (b->range != nullptr) {
    trim_tail(b);
    return;
  }
  segments.erase(b->address);
  device.free(b->ptr(), b->size);
  ++stats.num_device_frees;
  bump(stats.reserved_bytes, -static_cast<int64_t>(b->size));
  bump(stats.segments, -1);
  // A change of reserved bytes alone: an event of 0 bytes, so a profile's counter follows it.
  notify(b->ptr(), 0, b->stream);
  if (config.history_capacity != 0) {
    record(TraceEvent::Kind::SegmentFree, b->address, b->size, b->stream, std::string());
  }
  recycle(b);
}

// Everything cached goes back: ordinary segments without allocated blocks, and the free pages of
// expandable segments.
void CachingAllocator::Impl::release_cached_segments() {
  for (Pool* pool : {&small_pool, &large_pool}) {
    for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
      Block* b = *it;
      if (b->is_split() || b->range != nullptr || is_kept(b->stream)) {
        ++it;
        continue;
      }
      it = pool->blocks.erase(it);
      release_segment(b);
    }
  }
  release_expandable_pages();
}

// Before reserved memory grows past gc_threshold x capacity, returns what has been free longest
// (whole ordinary segments, the free pages of expandable segments) until `new_bytes` more fit under
// the threshold or nothing is left.
void CachingAllocator::Impl::collect_garbage(size_t new_bytes) {
  double limit = config.gc_threshold * static_cast<double>(capacity);
  double after = static_cast<double>(stats.reserved_bytes.current) + static_cast<double>(new_bytes);
  if (after <= limit) return;
  std::vector<Block*> candidates;
  for (Pool* pool : {&small_pool, &large_pool}) {
    for (Block* b : pool->blocks) {
      if (is_kept(b->stream)) continue;
      if (!b->is_split() || b->range != nullptr) candidates.push_back(b);
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
  double excess = after - limit;
  for (Block* b : candidates) {
    if (excess <= 0) break;
    if (b->range == nullptr) {
      excess -= static_cast<double>(b->size);
      remove_free(b);
      release_segment(b);
    } else if (b->next == nullptr) {
      excess -= static_cast<double>(release_free_tail(b));  // the segment's end shrinks too
    } else {
      excess -= static_cast<double>(unmap_free_pages(b, SIZE_MAX));
    }
  }
}

// ---- allocate / free ----
void* CachingAllocator::Impl::allocate(size_t bytes, StreamId stream) {
  // First, so that a provider that throws leaves everything as it was.
  std::string context;
  if (context_provider) context = context_provider();
  const char* op = current_alloc_context();  // Note [allocation context]
  if (!pending.empty()) process_events();
  size_t size = bytes < kRoundBytes ? kRoundBytes : round_up(bytes, kRoundBytes);
  Pool& pool = size <= config.small_size ? small_pool : large_pool;
  Block* b = take_free_block(pool, stream, size);
  if (b == nullptr) {
    b = config.expandable ? grow(pool, stream, size, bytes, context)
                          : new_segment(pool, stream, size, bytes, context);
  }
  // Note [expandable pages]: the pages under the block must be mapped.
  if (b->range != nullptr && b->range->mapped != b->range->end) map_for(b, size, bytes, context);
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
  if (op != nullptr) b->op = op;
  allocated.insert(b->address, b);
  bump(stats.allocated_bytes, static_cast<int64_t>(b->size));
  bump(stats.requested_bytes, static_cast<int64_t>(bytes));
  bump(stats.active_bytes, static_cast<int64_t>(b->size));
  bump(stats.allocations, 1);
  notify(b->ptr(), static_cast<int64_t>(b->size), stream);  // one branch unless observed
  if (config.history_capacity != 0) {
    record(TraceEvent::Kind::Alloc, b->address, b->size, stream, b->context, b->op);
  }
  return b->ptr();
}

void CachingAllocator::Impl::free(void* p) {
  uint64_t address = reinterpret_cast<uintptr_t>(p);
  Block* b = allocated.find(address);
  if (b == nullptr) throw_bad_free(p);
  allocated.erase(address);
  bump(stats.allocated_bytes, -static_cast<int64_t>(b->size));
  bump(stats.requested_bytes, -static_cast<int64_t>(b->requested));
  bump(stats.allocations, -1);
  notify(p, -static_cast<int64_t>(b->size), b->stream);
  if (config.history_capacity != 0) {
    record(TraceEvent::Kind::Free, b->address, b->size, b->stream, b->context, b->op);
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
    EventId e = device.record_event(Stream(stream_device, s));
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

// Makes `b` (no longer allocated) free.
void CachingAllocator::Impl::free_block(Block* b) {
  b->pending = false;
  b->context.clear();
  b->op.clear();
  bump(stats.active_bytes, -static_cast<int64_t>(b->size));
  cache_block(b);
}

// `b` is free and out of its pool: merges it with free neighbours and caches it, or (cache =
// false) returns its segment or pages.
void CachingAllocator::Impl::cache_block(Block* b) {
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
  if (b->range != nullptr) {
    if (b->next == nullptr) {
      b->range->tail = b;
      if (!config.cache) {
        trim_tail(b);
        return;
      }
    } else if (!config.cache) {
      unmap_free_pages(b, SIZE_MAX);
    }
    insert_free(b);
    return;
  }
  if (!config.cache && !b->is_split()) {
    release_segment(b);
    return;
  }
  insert_free(b);
}

// Frees the pending blocks whose events have all passed.
void CachingAllocator::Impl::process_events() {
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

// ---- the public class ----
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
    if (seg.range != nullptr) continue;  // below
    try {
      m.device.free(seg.head->ptr(), seg.size);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[caching allocator] warning: returning a segment failed: %s\n",
                   e.what());
    }
  }
  m.release_expandables();
}

[[gnu::noinline, gnu::cold]] void CachingAllocator::Impl::throw_wrong_device(
    const Stream& stream, const char* method) const {
  LOOM_THROW(ValueError, "[caching allocator] ", method, " on ", stream,
             ": this allocator serves the streams of ", stream_device, " (", device.name(), ")");
}

void* CachingAllocator::allocate(size_t bytes, const Stream& stream) {
  if (bytes == 0) return nullptr;
  Impl& m = *impl_;
  LOOM_CHECK(bytes <= m.capacity, "[caching allocator] cannot allocate ", bytes, " bytes (",
             format_bytes(bytes), "): more than the capacity of ", m.device.name(), " (",
             m.capacity, " bytes)");
  std::lock_guard<std::mutex> lock(m.mutex);
  m.check_stream(stream, "allocate");
  return m.allocate(bytes, stream.id());
}

void CachingAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->free(p);
}

void CachingAllocator::record_stream(void* p, const Stream& s) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  Block* b = m.allocated.find(reinterpret_cast<uintptr_t>(p));
  LOOM_CHECK(b != nullptr, "[caching allocator] record_stream(", p, ", ", s,
             "): the pointer is not a block allocated by this caching allocator");
  m.check_stream(s, "record_stream");
  const StreamId stream = s.id();
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

void CachingAllocator::keep_stream(const Stream& stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->check_stream(stream, "keep_stream");
  ++impl_->kept[stream.id()];
}

void CachingAllocator::release_stream(const Stream& stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->kept.find(stream.id());
  LOOM_CHECK(it != impl_->kept.end(), "[caching allocator] release_stream(", stream,
             "): the stream is not kept");
  if (--it->second == 0) impl_->kept.erase(it);
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
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->snapshot();
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

void CachingAllocator::record_step(int64_t steps) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->record(TraceEvent::Kind::Step, 0, static_cast<size_t>(std::max<int64_t>(steps, 0)), 0,
                std::string());
}

// ---- the observer seam ----
namespace detail {
std::atomic<AllocatorObserver> g_allocator_observer{nullptr};
}  // namespace detail

void set_allocator_observer(AllocatorObserver observer) {
  detail::g_allocator_observer.store(observer, std::memory_order_relaxed);
}

}  // namespace loom::memory
