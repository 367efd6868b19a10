// Expandable segments of the caching allocator: Note [expandable segments] in
// include/loom/memory/caching_allocator.h and Note [expandable pages] in
// memory/caching_allocator_impl.h.
#include <algorithm>
#include <cstdio>

#include "loom/error.h"
#include "memory/caching_allocator_impl.h"
#include "memory/memory_format.h"

namespace loom::memory {

using detail::bump;
using detail::format_bytes;
using detail::round_up;
using Block = detail::Block;
using Pool = detail::Pool;
using Expandable = detail::Expandable;

namespace {

void* as_ptr(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

// Address space reserved for each expandable segment: twice the device, so that holes of unmapped
// pages between blocks (Note [expandable pages]) do not run it out before memory does.
constexpr size_t kAddressSpaceFactor = 2;

}  // namespace

Expandable& CachingAllocator::Impl::expandable_of(Pool& pool, StreamId stream) {
  auto [it, inserted] = expandables.try_emplace(std::make_pair(pool.small, stream));
  Expandable& r = it->second;
  if (inserted) {
    r.reserved = round_up(capacity, kExpandablePage) * kAddressSpaceFactor;
    void* p = device.reserve(r.reserved);
    if (p == nullptr) {
      size_t want = r.reserved;
      expandables.erase(it);
      LOOM_THROW(OutOfMemoryError, "[caching allocator] ", device.name(), " could not reserve ",
                 format_bytes(want), " of address space for an expandable segment of stream ",
                 stream);
    }
    r.base = reinterpret_cast<uintptr_t>(p);
    r.pool = &pool;
    r.stream = stream;
  }
  return r;
}

// A free block of at least `size` at the end of the expandable segment of (pool, stream), out of
// its pool: the free block there grown, or a new one. Only address space: map_for maps the pages.
Block* CachingAllocator::Impl::grow(Pool& pool, StreamId stream, size_t size, size_t bytes,
                                    const std::string& context) {
  Expandable& r = expandable_of(pool, stream);
  auto missing = [&r, size] {
    const size_t have = r.tail != nullptr && r.tail->is_free() ? r.tail->size : 0;
    return round_up(size - have, kExpandablePage);
  };
  size_t n = missing();
  if (r.end + n > r.reserved) {
    // The reserved range is full of holes: a rare case, handled as memory running out.
    process_events();
    release_cached_segments();
    ++stats.num_alloc_retries;
    n = missing();  // the free block at the end may have gone
    if (r.end + n > r.reserved) throw_oom(bytes, size, n, stream, context);
  }
  const uint64_t at = r.base + r.end;
  r.end += n;
  r.page_mapped.resize(r.end / kExpandablePage, 0);
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
  segments.at(r.base).size = r.end;
  return b;
}

// Maps the pages under the first `size` bytes of `b` (free, out of its pool). Before mapping, the
// garbage collector and share_pages may unmap other free pages; when the device refuses, every
// cached page is released and the mapping retried once; then OutOfMemoryError, with `b` back in
// its pool.
void CachingAllocator::Impl::map_for(Block* b, size_t size, size_t bytes,
                                     const std::string& context) {
  Expandable& r = *b->range;
  const size_t n = unmapped_bytes(r, b->address, size);
  if (n == 0) return;
  b->allocated = true;  // so that nothing below merges, trims or unmaps it
  if (config.gc_threshold > 0.0) collect_garbage(n);
  if (config.share_pages) share_pages(n);
  if (!map_pages(r, b->address, size)) {
    process_events();
    release_cached_segments();
    ++stats.num_alloc_retries;
    if (!map_pages(r, b->address, size)) {
      b->allocated = false;
      cache_block(b);
      if (r.tail != nullptr && r.tail->is_free()) release_free_tail(r.tail);
      throw_oom(bytes, size, n, b->stream, context);
    }
  }
  b->allocated = false;
}

size_t CachingAllocator::Impl::unmapped_bytes(const Expandable& r, uint64_t address,
                                              size_t size) const {
  if (r.mapped == r.end) return 0;
  size_t n = 0;
  for (size_t i = r.page_of(address), last = r.page_of(address + size - 1); i <= last; ++i) {
    if (!r.page_mapped[i]) n += kExpandablePage;
  }
  return n;
}

// Maps the unmapped pages under [address, address + size), one device call per run of them; false
// when the device refuses one (the runs mapped before it stay mapped).
bool CachingAllocator::Impl::map_pages(Expandable& r, uint64_t address, size_t size) {
  const size_t last = r.page_of(address + size - 1);
  for (size_t i = r.page_of(address); i <= last;) {
    if (r.page_mapped[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j <= last && !r.page_mapped[j]) ++j;
    const size_t n = (j - i) * kExpandablePage;
    if (!device.map(as_ptr(r.page_address(i)), n)) return false;
    std::fill(r.page_mapped.begin() + static_cast<ptrdiff_t>(i),
              r.page_mapped.begin() + static_cast<ptrdiff_t>(j), 1);
    r.mapped += n;
    ++stats.num_device_maps;
    bump(stats.reserved_bytes, static_cast<int64_t>(n));
    record(TraceEvent::Kind::SegmentAlloc, r.page_address(i), n, r.stream, std::string());
    i = j;
  }
  return true;
}

// Unmaps the mapped pages among pages [from, to) of `r`, one device call per run, until at least
// `limit` bytes are unmapped; returns how many were.
size_t CachingAllocator::Impl::unmap_pages(Expandable& r, uint64_t from, uint64_t to,
                                           size_t limit) {
  size_t done = 0;
  for (size_t i = from; i < to && done < limit;) {
    if (!r.page_mapped[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < to && r.page_mapped[j] && done + (j - i) * kExpandablePage < limit) ++j;
    const size_t n = (j - i) * kExpandablePage;
    device.unmap(as_ptr(r.page_address(i)), n);
    std::fill(r.page_mapped.begin() + static_cast<ptrdiff_t>(i),
              r.page_mapped.begin() + static_cast<ptrdiff_t>(j), 0);
    r.mapped -= n;
    done += n;
    ++stats.num_device_unmaps;
    bump(stats.reserved_bytes, -static_cast<int64_t>(n));
    notify(as_ptr(r.page_address(i)), 0, r.stream);  // as release_segment does
    record(TraceEvent::Kind::SegmentFree, r.page_address(i), n, r.stream, std::string());
    i = j;
  }
  return done;
}

// The mapped pages that lie wholly inside the free block `b` (in its pool or not; the block itself
// is unchanged), until `limit` bytes; returns the bytes unmapped.
size_t CachingAllocator::Impl::unmap_free_pages(Block* b, size_t limit) {
  Expandable& r = *b->range;
  const uint64_t lo = r.base + round_up(b->address - r.base, kExpandablePage);
  const uint64_t hi = r.base + (b->address + b->size - r.base) / kExpandablePage * kExpandablePage;
  if (lo >= hi) return 0;
  return unmap_pages(r, r.page_of(lo), r.page_of(hi), limit);
}

// share_pages (Note [expandable segments]): before `want` bytes of pages are mapped, the free pages
// of every expandable segment (other pools, other streams, holes of this one) are unmapped, those
// free longest first, until as many are; the free block at a segment's end gives its pages by
// shrinking the segment. Returns the bytes unmapped.
size_t CachingAllocator::Impl::share_pages(size_t want) {
  std::vector<Block*> candidates;
  for (Pool* pool : {&small_pool, &large_pool}) {
    for (Block* b : pool->blocks) {
      if (b->range != nullptr && b->size >= kExpandablePage) candidates.push_back(b);
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
  size_t done = 0;
  for (Block* b : candidates) {
    if (done >= want) break;
    done += b->next == nullptr ? release_free_tail(b) : unmap_free_pages(b, want - done);
  }
  return done;
}

// `b`, free and out of its pool, is the block at the end of its expandable segment: unmaps its
// whole pages, shrinks the segment's end to them and puts what is left of `b` back in its pool. A
// segment left without blocks is gone (its address range stays reserved for reuse).
void CachingAllocator::Impl::trim_tail(Block* b) {
  Expandable& r = *b->range;
  const uint64_t end = r.base + r.end;
  const uint64_t keep = r.base + round_up(b->address - r.base, kExpandablePage);
  if (keep >= end) {
    insert_free(b);
    return;
  }
  unmap_pages(r, r.page_of(keep), r.end / kExpandablePage, SIZE_MAX);
  r.end = keep - r.base;
  r.page_mapped.resize(r.end / kExpandablePage);
  if (keep > b->address) {
    b->size = keep - b->address;
    insert_free(b);
    segments.at(r.base).size = r.end;
    return;
  }
  Block* prev = b->prev;
  recycle(b);
  if (prev != nullptr) {
    prev->next = nullptr;
    r.tail = prev;
    segments.at(r.base).size = r.end;
    return;
  }
  segments.erase(r.base);
  r.head = r.tail = nullptr;
  ++stats.num_device_frees;
  bump(stats.segments, -1);
}

// `b`, free and in its pool, is the block at the end of its segment: takes it out and trims it.
// Returns the bytes unmapped.
size_t CachingAllocator::Impl::release_free_tail(Block* b) {
  Expandable& r = *b->range;
  const size_t before = r.mapped;
  remove_free(b);
  trim_tail(b);
  return before - r.mapped;
}

// empty_cache() and the OOM retry: the free block at the end of each segment goes (trim_tail), then
// the free pages of the other free blocks.
void CachingAllocator::Impl::release_expandable_pages() {
  for (auto& [key, r] : expandables) {
    if (is_kept(key.second)) continue;
    if (r.tail != nullptr && r.tail->is_free()) release_free_tail(r.tail);
  }
  for (Pool* pool : {&small_pool, &large_pool}) {
    for (Block* b : pool->blocks) {
      if (is_kept(b->stream)) continue;
      if (b->range != nullptr && b->range->mapped != 0) unmap_free_pages(b, SIZE_MAX);
    }
  }
}

// The destructor's: every mapped run, then every reserved range, back to the device.
void CachingAllocator::Impl::release_expandables() {
  for (auto& [key, r] : expandables) {
    try {
      unmap_pages(r, 0, r.end / kExpandablePage, SIZE_MAX);
      device.release(as_ptr(r.base), r.reserved);
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "[caching allocator] warning: returning an expandable segment failed: %s\n",
                   e.what());
    }
  }
}

}  // namespace loom::memory
