// Helpers for the caching-allocator tests: sizes, and a structural check of an allocator's state
// (from its snapshot) against its statistics.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/memory/caching_allocator.h"

namespace loom::memory::testing {

// Stream `id` of the simulated device (whose streams are named as the CPU's).
inline Stream on(StreamId id) {
  return Stream(kCPU, id);
}

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;

inline uint64_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

inline std::string pointer_text(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// Every invariant that a snapshot lets us see: blocks tile their segment in address order, no two
// free blocks are neighbours (coalescing), segments do not overlap, and the statistics agree with
// the blocks; an expandable segment has whole pages mapped. `sole_user`: the allocator is the only
// user of its device, so the device's used bytes are the reserved bytes.
inline void expect_consistent(const CachingAllocator& a, bool sole_user = true) {
  Snapshot s = a.snapshot();
  int64_t reserved = 0, allocated = 0, active = 0, inactive_split = 0, allocations = 0;
  size_t largest_free = 0;
  uint64_t previous_end = 0;
  for (const SegmentInfo& seg : s.segments) {
    ASSERT_GE(seg.address, previous_end) << "segments overlap";
    previous_end = seg.address + seg.size;
    ASSERT_FALSE(seg.blocks.empty());
    uint64_t next = seg.address;
    bool previous_free = false;
    for (const BlockInfo& b : seg.blocks) {
      ASSERT_EQ(b.address, next) << "blocks are not contiguous";
      ASSERT_GT(b.size, 0u);
      ASSERT_EQ(b.size % kRoundBytes, 0u);
      ASSERT_EQ(b.stream, seg.stream);
      next += b.size;
      bool is_free = !b.allocated && !b.pending;
      ASSERT_FALSE(is_free && previous_free) << "two free neighbours were not merged";
      previous_free = is_free;
      if (b.allocated) {
        allocated += static_cast<int64_t>(b.size);
        ++allocations;
        ASSERT_GT(b.requested, 0u);
        ASSERT_LE(b.requested, b.size);
      } else {
        ASSERT_EQ(b.requested, 0u);
      }
      if (!is_free) active += static_cast<int64_t>(b.size);
      if (is_free) {
        largest_free = std::max(largest_free, b.size);
        if (seg.blocks.size() > 1) inactive_split += static_cast<int64_t>(b.size);
      }
    }
    ASSERT_EQ(next, seg.address + seg.size) << "blocks do not cover their segment";
    if (seg.expandable) {
      // Note [expandable segments]: pages are mapped whole, and only free blocks lie over
      // unmapped ones.
      ASSERT_EQ(seg.size % kExpandablePage, 0u) << "an expandable segment maps whole pages";
      ASSERT_EQ(seg.address % kRoundBytes, 0u);
      uint64_t after = seg.address;
      for (const auto& [lo, n] : seg.unmapped) {
        ASSERT_GE(lo, after) << "unmapped runs out of order";
        ASSERT_EQ((lo - seg.address) % kExpandablePage, 0u);
        ASSERT_EQ(n % kExpandablePage, 0u);
        after = lo + n;
        ASSERT_LE(after, seg.address + seg.size);
        for (const BlockInfo& b : seg.blocks) {
          if (b.allocated || b.pending) {
            ASSERT_TRUE(b.address + b.size <= lo || b.address >= after)
                << "a block in use lies over unmapped pages";
          }
        }
      }
      ASSERT_GT(seg.mapped_bytes(), 0u) << "a segment without mapped pages should be gone";
    } else {
      ASSERT_TRUE(seg.unmapped.empty());
    }
    reserved += static_cast<int64_t>(seg.mapped_bytes());
  }
  EXPECT_EQ(s.stats.reserved_bytes.current, reserved);
  EXPECT_EQ(s.stats.segments.current, static_cast<int64_t>(s.segments.size()));
  EXPECT_EQ(s.stats.allocated_bytes.current, allocated);
  EXPECT_EQ(s.stats.allocations.current, allocations);
  EXPECT_EQ(s.stats.active_bytes.current, active);
  EXPECT_EQ(s.stats.inactive_split_bytes.current, inactive_split);
  EXPECT_EQ(s.stats.largest_free_block, largest_free);
  EXPECT_LE(s.stats.requested_bytes.current, s.stats.allocated_bytes.current);
  for (const Stat* st : {&s.stats.allocated_bytes, &s.stats.requested_bytes,
                         &s.stats.reserved_bytes, &s.stats.active_bytes,
                         &s.stats.inactive_split_bytes, &s.stats.allocations, &s.stats.segments}) {
    EXPECT_GE(st->current, 0);
    EXPECT_GE(st->peak, st->current);
    EXPECT_EQ(st->allocated - st->freed, st->current);
  }
  EXPECT_EQ(s.stats.num_device_mallocs - s.stats.num_device_frees, s.stats.segments.current);
  if (sole_user) {
    const DeviceMemory& d = a.device();
    EXPECT_EQ(static_cast<int64_t>(d.capacity() - d.free_bytes()), reserved);
  }
}

// The blocks a random workload holds, by address, with the bytes each added to the allocator's
// allocated count. On a backed device each carries a tag in its first and last byte, checked when
// it is taken back. The counters follow what the allocator's statistics should say.
struct LiveBlocks {
  struct Block {
    size_t requested;
    size_t block;
    uint8_t tag;
  };
  std::map<uint64_t, Block> by_address;
  int64_t requested = 0, requested_peak = 0, allocated = 0, allocated_peak = 0, count = 0,
          count_peak = 0;

  // Records a block the allocator just handed out (`block` = what it added to allocated_bytes);
  // false (with the test failed) if it overlaps a live one.
  bool add(void* p, size_t bytes, size_t block, std::mt19937_64& rng) {
    const uint64_t x = addr(p);
    auto next = by_address.lower_bound(x);
    if (next != by_address.end() && x + block > next->first) {
      ADD_FAILURE() << "block at " << pointer_text(p) << " overlaps the next live block";
      return false;
    }
    if (next != by_address.begin() && std::prev(next)->first + std::prev(next)->second.block > x) {
      ADD_FAILURE() << "block at " << pointer_text(p) << " overlaps the previous live block";
      return false;
    }
    const uint8_t tag = static_cast<uint8_t>(rng());
    static_cast<uint8_t*>(p)[0] = tag;
    static_cast<uint8_t*>(p)[bytes - 1] = tag;
    by_address[x] = Block{bytes, block, tag};
    requested += static_cast<int64_t>(bytes);
    allocated += static_cast<int64_t>(block);
    ++count;
    requested_peak = std::max(requested_peak, requested);
    allocated_peak = std::max(allocated_peak, allocated);
    count_peak = std::max(count_peak, count);
    return true;
  }
  // Takes a random live block out of the set (the caller frees it); null (with the test failed) if
  // its tags were overwritten.
  void* take_random(std::mt19937_64& rng, Block* taken = nullptr) {
    auto it = by_address.begin();
    std::advance(it, static_cast<long>(rng() % by_address.size()));
    auto* p = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(it->first));
    if (p[0] != it->second.tag || p[it->second.requested - 1] != it->second.tag) {
      ADD_FAILURE() << "the tags of the block at " << pointer_text(p) << " were overwritten";
      return nullptr;
    }
    requested -= static_cast<int64_t>(it->second.requested);
    allocated -= static_cast<int64_t>(it->second.block);
    --count;
    if (taken != nullptr) *taken = it->second;
    by_address.erase(it);
    return p;
  }
  bool empty() const { return by_address.empty(); }
  std::vector<void*> pointers() const {
    std::vector<void*> out;
    for (const auto& [x, b] : by_address)
      out.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(x)));
    return out;
  }
};

// The end of every random workload: frees what is still live, lets the device finish, empties the
// cache, and expects the allocator and its device back where they started.
inline void expect_drains_to_empty(CachingAllocator& a, SimulatedDevice& dev,
                                   const std::vector<void*>& live) {
  for (void* p : live) a.free(p);
  dev.complete();
  a.empty_cache();
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  EXPECT_EQ(s.active_bytes.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.segments.current, 0);
  EXPECT_EQ(s.inactive_split_bytes.current, 0);
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
  expect_consistent(a);
}

}  // namespace loom::memory::testing
