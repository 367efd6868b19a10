// Pages of expandable segments (Note [expandable pages] in src/memory/caching_allocator_impl.h):
// holes of unmapped pages under free blocks left by empty_cache, garbage collection and cache =
// false, mapped again when a request takes the block; share_pages taking free pages from holes and
// other segments before mapping new ones; the snapshot's unmapped runs and their checks; and a
// random workload on a backed device where every handed-out byte is written.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loom/error.h"
#include "loom/json.h"
#include "loom/memory/caching_allocator.h"
#include "loom/memory/snapshot_json.h"
#include "memory/allocator_test_util.h"
#include "test_errors.h"

namespace loom::memory {
namespace {

using loom::testing::error_of;
using namespace loom::memory::testing;

using Runs = std::vector<std::pair<uint64_t, size_t>>;  // (offset from the segment, bytes)

// The unmapped runs of the segment that starts at `base`, relative to it.
Runs unmapped_of(const CachingAllocator& a, uint64_t base) {
  Runs out;
  for (const SegmentInfo& seg : a.snapshot().segments) {
    if (seg.address != base) continue;
    for (const auto& [lo, n] : seg.unmapped) out.emplace_back(lo - base, n);
  }
  return out;
}

TEST(ExpandablePages, EmptyCacheLeavesAHoleThatIsMappedAgainOnReuse) {
  SimulatedDevice dev(GiB, /*backed=*/true);
  CachingAllocator a(dev, AllocatorConfig::policy("expandable"));
  void* p = a.allocate(4 * MiB);
  void* q = a.allocate(4 * MiB);
  void* r = a.allocate(4 * MiB);
  const uint64_t base = addr(p);
  a.free(q);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(12 * MiB));  // cached
  a.empty_cache();  // the free block in the middle loses its pages; the segment keeps its shape
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(8 * MiB));
  EXPECT_EQ(s.num_device_unmaps, 1);
  EXPECT_EQ(dev.free_bytes(), GiB - 8 * MiB);
  EXPECT_EQ(unmapped_of(a, base), (Runs{{4 * MiB, 4 * MiB}}));
  expect_consistent(a);
  // Best fit takes the hole; its pages are mapped again and the memory is usable.
  void* again = a.allocate(2 * MiB);
  EXPECT_EQ(again, q);
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(10 * MiB));  // one page of the hole
  EXPECT_EQ(s.num_device_maps, 4);  // p, q, r, then the page of the hole
  EXPECT_EQ(unmapped_of(a, base), (Runs{{6 * MiB, 2 * MiB}}));
  std::memset(again, 0x5a, 2 * MiB);
  expect_consistent(a);
  a.free(again);
  a.free(r);
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.stats().segments.current, 0);
  EXPECT_EQ(dev.free_bytes(), GiB);
  expect_consistent(a);
}

TEST(ExpandablePages, OnlyWholeFreePagesAreUnmapped) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, AllocatorConfig::policy("expandable"));
  void* p = a.allocate(3 * MiB);  // [0, 3)
  void* q = a.allocate(4 * MiB);  // [3, 7): pages 2-3 lie wholly inside it
  void* r = a.allocate(2 * MiB);  // [7, 9), and [9, 10) free at the end
  const uint64_t base = addr(p);
  a.free(q);
  a.empty_cache();
  // Pages [2, 4) and [6, 8) MiB also hold p and r; the page at the end goes with the free end.
  EXPECT_EQ(unmapped_of(a, base), (Runs{{4 * MiB, 2 * MiB}}));
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(8 * MiB));
  expect_consistent(a);
  for (void* x : {p, r}) a.free(x);
  expect_consistent(a);
}

TEST(ExpandablePages, NoCacheUnmapsAFreedBlockInTheMiddle) {
  SimulatedDevice dev(GiB);
  AllocatorConfig c = AllocatorConfig::policy("expandable");
  c.cache = false;
  CachingAllocator a(dev, c);
  void* p = a.allocate(4 * MiB);
  void* q = a.allocate(6 * MiB);
  void* r = a.allocate(2 * MiB);
  a.free(q);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));
  EXPECT_EQ(unmapped_of(a, addr(p)), (Runs{{4 * MiB, 6 * MiB}}));
  expect_consistent(a);
  a.free(p);
  a.free(r);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.stats().segments.current, 0);
  expect_consistent(a);
}

TEST(ExpandablePages, GarbageCollectionUnmapsHolesOldestFirst) {
  SimulatedDevice dev(64 * MiB);
  AllocatorConfig c = AllocatorConfig::policy("expandable");
  c.gc_threshold = 0.5;  // 32 MiB
  CachingAllocator a(dev, c);
  std::vector<void*> blocks;
  for (int i = 0; i < 7; ++i) blocks.push_back(a.allocate(4 * MiB));  // 28 MiB
  const uint64_t base = addr(blocks[0]);
  a.free(blocks[1]);  // freed first: the oldest hole
  a.free(blocks[4]);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(28 * MiB));
  // 6 MiB more would pass 32 MiB: 2 MiB must go, taken from the oldest free block.
  void* big = a.allocate(6 * MiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(30 * MiB));
  EXPECT_EQ(unmapped_of(a, base), (Runs{{4 * MiB, 4 * MiB}}));
  EXPECT_EQ(s.num_ooms, 0);
  expect_consistent(a);
  a.free(big);
  for (void* x : blocks) {
    if (x != blocks[1] && x != blocks[4]) a.free(x);
  }
  expect_consistent(a);
}

TEST(ExpandablePages, SharePagesTakesFreePagesBeforeMappingNew) {
  for (bool share : {false, true}) {
    SimulatedDevice dev(GiB);
    CachingAllocator a(dev, AllocatorConfig::policy(share ? "expandable-share" : "expandable"));
    void* p = a.allocate(4 * MiB);
    void* q = a.allocate(4 * MiB);
    void* r = a.allocate(4 * MiB);
    a.free(q);  // a cached 4 MiB hole
    // 6 MiB fits nowhere: the end grows by 6 MiB. Sharing first unmaps the hole's pages.
    void* big = a.allocate(6 * MiB);
    MemoryStats s = a.stats();
    EXPECT_EQ(addr(big), addr(p) + 12 * MiB);
    EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(share ? 14 * MiB : 18 * MiB));
    EXPECT_EQ(s.num_device_unmaps, share ? 1 : 0);
    EXPECT_EQ(unmapped_of(a, addr(p)), share ? (Runs{{4 * MiB, 4 * MiB}}) : Runs{});
    expect_consistent(a);
    // The hole is still the best fit for 4 MiB: its pages come back.
    void* back = a.allocate(4 * MiB);
    EXPECT_EQ(back, q);
    EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(18 * MiB));
    expect_consistent(a);
    for (void* x : {p, r, big, back}) a.free(x);
    expect_consistent(a);
  }
}

TEST(ExpandablePages, OutOfMemoryRetryUsesHoles) {
  SimulatedDevice dev(16 * MiB);
  CachingAllocator a(dev, AllocatorConfig::policy("expandable"));
  void* p = a.allocate(4 * MiB);
  void* q = a.allocate(4 * MiB);
  void* r = a.allocate(4 * MiB);
  a.free(q);  // 12 MiB mapped, 4 of them free in the middle
  // 8 MiB: no free block fits; the end needs 8 MiB of pages but only 4 are left on the device.
  // The retry unmaps the hole, and then the pages fit.
  void* big = a.allocate(8 * MiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(16 * MiB));
  expect_consistent(a);
  // Now nothing is free: the error, with everything as it was.
  std::string msg = error_of<OutOfMemoryError>([&] { a.allocate(2 * MiB); });
  EXPECT_CONTAINS(msg, "out of memory: tried to allocate 2 MiB");
  EXPECT_EQ(a.stats().num_ooms, 1);
  expect_consistent(a);
  for (void* x : {p, r, big}) a.free(x);
  expect_consistent(a);
}

TEST(ExpandablePages, SnapshotCarriesUnmappedRunsAndChecksThem) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, AllocatorConfig::policy("expandable"));
  void* p = a.allocate(4 * MiB);
  void* q = a.allocate(4 * MiB);
  void* r = a.allocate(4 * MiB);
  a.free(q);
  a.empty_cache();
  const Snapshot s = a.snapshot();
  ASSERT_EQ(s.segments.size(), 1u);
  EXPECT_EQ(s.segments[0].mapped_bytes(), 8 * MiB);
  EXPECT_EQ(s.stats.num_device_maps, 3);
  EXPECT_EQ(s.stats.num_device_unmaps, 1);
  const std::string text = to_json(s).dump();
  Snapshot back = snapshot_from_json(Json::parse(text, "s.json"), "s.json");
  EXPECT_EQ(back.segments[0].unmapped, s.segments[0].unmapped);
  EXPECT_EQ(back.stats.num_device_unmaps, 1);
  // A run under an allocated block, a run outside the segment: DataError naming the run.
  Json doc = Json::parse(text, "s.json");
  Json& runs = doc.at("segments").as_array()[0].at("unmapped");
  runs.as_array()[0].as_array()[0] = Json(addr(p));
  EXPECT_CONTAINS(error_of<DataError>([&] { snapshot_from_json(doc, "bad.json"); }),
                  "bad.json: segment 0: unmapped run 0");
  EXPECT_CONTAINS(error_of<DataError>([&] { snapshot_from_json(doc, "bad.json"); }),
                  "which is in use");
  runs.as_array()[0].as_array()[0] = Json(addr(p) + 64 * MiB);
  EXPECT_CONTAINS(error_of<DataError>([&] { snapshot_from_json(doc, "bad.json"); }),
                  "outside the segment");
  runs.as_array()[0] = Json::array({Json(1)});
  EXPECT_CONTAINS(error_of<DataError>([&] { snapshot_from_json(doc, "bad.json"); }),
                  "is not [address, size > 0]");
  for (void* x : {p, r}) a.free(x);
}

// Random sizes, frees, streams and cache flushes on a backed device with share_pages and a small
// capacity: every byte handed out is written (an unmapped page would fault), contents survive,
// and the invariants hold throughout.
TEST(ExpandablePages, RandomWorkloadWritesEveryByte) {
  for (uint64_t seed : {11, 12}) {
    SimulatedDevice dev(128 * MiB, /*backed=*/true, /*auto_complete=*/false);
    CachingAllocator a(dev, AllocatorConfig::policy("expandable-share"));
    std::mt19937_64 rng(seed);
    struct Live {
      size_t bytes;
      uint8_t tag;
    };
    std::map<void*, Live> live;
    int64_t ooms = 0;
    for (int op = 0; op < 3000; ++op) {
      if (live.empty() || rng() % 100 < 55) {
        const size_t bytes = rng() % 4 == 0 ? 1 + rng() % (12 * MiB) : 1 + rng() % (256 * KiB);
        const StreamId stream = static_cast<StreamId>(rng() % 2);
        void* p = nullptr;
        try {
          p = a.allocate(bytes, on(stream));
        } catch (const OutOfMemoryError&) {
          ++ooms;
          continue;
        }
        const uint8_t tag = static_cast<uint8_t>(rng());
        std::memset(p, tag, bytes);
        live[p] = Live{bytes, tag};
        if (rng() % 8 == 0) a.record_stream(p, on(static_cast<StreamId>(rng() % 2)));
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        const auto* bytes = static_cast<const uint8_t*>(it->first);
        ASSERT_EQ(bytes[0], it->second.tag);
        ASSERT_EQ(bytes[it->second.bytes / 2], it->second.tag);
        ASSERT_EQ(bytes[it->second.bytes - 1], it->second.tag);
        a.free(it->first);
        live.erase(it);
      }
      if (rng() % 40 == 0) dev.complete(on(static_cast<StreamId>(rng() % 2)));
      if (rng() % 500 == 0) a.empty_cache();
      if (op % 250 == 0) {
        expect_consistent(a);
        if (::testing::Test::HasFailure()) return;
      }
    }
    expect_consistent(a);
    const MemoryStats s = a.stats();
    EXPECT_EQ(s.num_ooms, ooms);
    EXPECT_GT(s.num_device_unmaps, 0);
    std::vector<void*> rest;
    for (auto& [p, l] : live) rest.push_back(p);
    expect_drains_to_empty(a, dev, rest);
  }
}

}  // namespace
}  // namespace loom::memory
