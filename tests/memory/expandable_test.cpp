// Expandable segments (Note [expandable segments] in caching_allocator.h): pages mapped only as
// needed, a free block at the end grown instead of a new mapping, empty_cache unmapping trailing
// pages, out-of-memory and its retry, streams, the snapshot field, configuration errors, and a
// random workload against a shadow model on a backed device.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "loom/memory/snapshot_json.h"
#include "memory/allocator_test_util.h"
#include "test_errors.h"

namespace loom::memory {
namespace {

using loom::testing::error_of;
using namespace loom::memory::testing;

AllocatorConfig expandable() {
  return AllocatorConfig::policy("expandable");
}

// (offset from the segment, size, allocated) of each block of the segment holding `address`.
struct Shape {
  uint64_t offset;
  size_t size;
  bool allocated;
  bool operator==(const Shape&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Shape& b) {
  return os << "{" << b.offset / KiB << " KiB, " << b.size / KiB << " KiB, "
            << (b.allocated ? "alloc" : "free") << "}";
}

const SegmentInfo* segment_holding(const Snapshot& s, uint64_t address) {
  for (const SegmentInfo& seg : s.segments) {
    if (address >= seg.address && address < seg.address + seg.size) return &seg;
  }
  return nullptr;
}

std::vector<Shape> shape_of(const CachingAllocator& a, uint64_t address) {
  Snapshot s = a.snapshot();
  const SegmentInfo* seg = segment_holding(s, address);
  std::vector<Shape> out;
  if (seg == nullptr) return out;
  for (const BlockInfo& b : seg->blocks)
    out.push_back({b.address - seg->address, b.size, b.allocated});
  return out;
}

std::vector<TraceEvent> segment_events(const CachingAllocator& a) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : a.snapshot().history) {
    if (e.kind == TraceEvent::Kind::SegmentAlloc || e.kind == TraceEvent::Kind::SegmentFree) {
      out.push_back(e);
    }
  }
  return out;
}

TEST(ExpandableSegments, GrowthMapsPagesOnlyAsNeeded) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, expandable());
  void* p = a.allocate(4 * MiB + 512 * KiB);  // 6 MiB mapped, 1.5 MiB of them free at the end
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));
  void* q = a.allocate(MiB + 512 * KiB);  // fits the free end: nothing mapped
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));
  void* r = a.allocate(3 * MiB);  // 4 MiB more
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(10 * MiB));
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(9 * MiB));  // every rest split off
  EXPECT_EQ(s.segments.current, 1);
  EXPECT_EQ(s.num_device_mallocs, 1);
  EXPECT_EQ(addr(q), addr(p) + 4 * MiB + 512 * KiB);
  EXPECT_EQ(addr(r), addr(p) + 6 * MiB);
  EXPECT_EQ(shape_of(a, addr(p)), (std::vector<Shape>{{0, 4 * MiB + 512 * KiB, true},
                                                      {4 * MiB + 512 * KiB, MiB + 512 * KiB, true},
                                                      {6 * MiB, 3 * MiB, true},
                                                      {9 * MiB, MiB, false}}));
  Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_TRUE(snap.segments[0].expandable);
  EXPECT_FALSE(snap.segments[0].small_pool);
  std::vector<TraceEvent> ev = segment_events(a);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, TraceEvent::Kind::SegmentAlloc);
  EXPECT_EQ(ev[0].address, addr(p));
  EXPECT_EQ(ev[0].size, 6 * MiB);
  EXPECT_EQ(ev[1].address, addr(p) + 6 * MiB);
  EXPECT_EQ(ev[1].size, 4 * MiB);
  // Small requests share the small pool's segment, one page at a time.
  std::vector<void*> small;
  for (int i = 0; i < 5; ++i) small.push_back(a.allocate(512 * KiB));
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(10 * MiB + 4 * MiB));
  EXPECT_EQ(s.segments.current, 2);
  expect_consistent(a);
  for (void* x : small) a.free(x);
  a.free(p);
  a.free(q);
  a.free(r);
  expect_consistent(a);
  // The default policy reserves a 20 MiB segment for the first request alone.
  SimulatedDevice dev2(GiB);
  CachingAllocator d(dev2);
  d.free(d.allocate(4 * MiB + 512 * KiB));
  EXPECT_EQ(d.stats().reserved_bytes.current, static_cast<int64_t>(20 * MiB));
}

TEST(ExpandableSegments, FreeBlockAtTheEndIsExtended) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, expandable());
  void* p = a.allocate(5 * MiB);  // 6 MiB mapped, 1 MiB free at the end
  void* q = a.allocate(4 * MiB);  // the free end grows by 4 MiB and serves it
  EXPECT_EQ(addr(q), addr(p) + 5 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(10 * MiB));
  void* r = a.allocate(3 * MiB);  // the 1 MiB left at the end grows by one page
  EXPECT_EQ(addr(r), addr(p) + 9 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(12 * MiB));
  EXPECT_EQ(
      shape_of(a, addr(p)),
      (std::vector<Shape>{{0, 5 * MiB, true}, {5 * MiB, 4 * MiB, true}, {9 * MiB, 3 * MiB, true}}));
  std::vector<TraceEvent> ev = segment_events(a);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].address, addr(p) + 6 * MiB);
  EXPECT_EQ(ev[1].size, 4 * MiB);
  EXPECT_EQ(ev[2].address, addr(p) + 10 * MiB);
  EXPECT_EQ(ev[2].size, 2 * MiB);
  EXPECT_EQ(a.stats().num_device_mallocs, 1);
  expect_consistent(a);
  // A free block in the middle that is too small: new pages at the end, the hole stays.
  a.free(q);
  void* big = a.allocate(6 * MiB);
  EXPECT_EQ(addr(big), addr(p) + 12 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(18 * MiB));
  void* fits = a.allocate(4 * MiB);  // best fit: the hole
  EXPECT_EQ(addr(fits), addr(q));
  expect_consistent(a);
  for (void* x : {p, r, big, fits}) a.free(x);
  expect_consistent(a);
}

TEST(ExpandableSegments, EmptyCacheUnmapsTrailingFreePages) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, expandable());
  void* p = a.allocate(5 * MiB);
  void* q = a.allocate(4 * MiB);
  void* r = a.allocate(3 * MiB);
  const uint64_t base = addr(p);
  a.free(r);
  a.empty_cache();  // [9, 12) MiB is free: the pages from 10 MiB on go
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(10 * MiB));
  EXPECT_EQ(dev.free_bytes(), GiB - 10 * MiB);
  EXPECT_EQ(
      shape_of(a, base),
      (std::vector<Shape>{{0, 5 * MiB, true}, {5 * MiB, 4 * MiB, true}, {9 * MiB, MiB, false}}));
  expect_consistent(a);
  a.free(q);  // merges into [5, 10) MiB
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));
  EXPECT_EQ(shape_of(a, base), (std::vector<Shape>{{0, 5 * MiB, true}, {5 * MiB, MiB, false}}));
  EXPECT_EQ(a.stats().inactive_split_bytes.current, static_cast<int64_t>(MiB));
  expect_consistent(a);
  a.free(p);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));  // cached
  a.empty_cache();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.segments.current, 0);
  EXPECT_EQ(s.num_device_frees, 1);
  EXPECT_EQ(dev.free_bytes(), GiB);
  expect_consistent(a);
  std::vector<TraceEvent> ev = segment_events(a);
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[3].kind, TraceEvent::Kind::SegmentFree);
  EXPECT_EQ(ev[3].address, base + 10 * MiB);
  EXPECT_EQ(ev[3].size, 2 * MiB);
  EXPECT_EQ(ev[4].address, base + 6 * MiB);
  EXPECT_EQ(ev[4].size, 4 * MiB);
  EXPECT_EQ(ev[5].address, base);
  EXPECT_EQ(ev[5].size, 6 * MiB);
  // The address range stays reserved: the segment comes back at the same place.
  void* again = a.allocate(MiB + 512);
  EXPECT_EQ(addr(again), base);
  EXPECT_EQ(a.stats().segments.current, 1);
  a.free(again);
  expect_consistent(a);
}

TEST(ExpandableSegments, NoCacheUnmapsOnFree) {
  SimulatedDevice dev(GiB);
  AllocatorConfig c = expandable();
  c.cache = false;
  CachingAllocator a(dev, c);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(3 * MiB);
  a.free(q);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(4 * MiB));
  expect_consistent(a);
  a.free(p);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(dev.free_bytes(), GiB);
  expect_consistent(a);
}

TEST(ExpandableSegments, OutOfMemoryReleasesCachedPagesAndRetries) {
  SimulatedDevice dev(16 * MiB);
  CachingAllocator a(dev, expandable());
  void* x = a.allocate(4 * MiB);
  void* y = a.allocate(4 * MiB);
  void* z = a.allocate(6 * MiB, on(/*stream=*/1));
  a.free(z);  // cached on stream 1
  a.free(y);  // cached at the end of stream 0's segment
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(14 * MiB));
  // Needs 6 more MiB; 2 are free: both cached ends are unmapped, and the request (now needing
  // 10 MiB, its own free end having gone) is retried.
  void* w = a.allocate(10 * MiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(14 * MiB));
  EXPECT_EQ(addr(w), addr(x) + 4 * MiB);
  EXPECT_EQ(s.segments.current, 1);
  expect_consistent(a);
  // Nothing left to release: the OOM error.
  std::string msg = error_of<OutOfMemoryError>([&] { a.allocate(4 * MiB, on(/*stream=*/1)); });
  EXPECT_CONTAINS(msg, "out of memory: tried to allocate 4 MiB");
  EXPECT_CONTAINS(msg, "on stream 1");
  s = a.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 2);
  EXPECT_EQ(a.snapshot().history.back().kind, TraceEvent::Kind::Oom);
  expect_consistent(a);
  a.free(w);
  void* v = a.allocate(12 * MiB, on(/*stream=*/0));  // the cached 10 MiB end grows by one page
  EXPECT_EQ(addr(v), addr(x) + 4 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(16 * MiB));
  expect_consistent(a);
  a.free(v);
  a.free(x);
  expect_consistent(a);
}

TEST(ExpandableSegments, EachPoolAndStreamHasItsOwnSegment) {
  SimulatedDevice dev(GiB, /*backed=*/false, /*auto_complete=*/false);
  CachingAllocator a(dev, expandable());
  std::vector<void*> ptrs;
  for (StreamId s : {0, 1, 2}) {
    ptrs.push_back(a.allocate(64 * KiB, on(s)));
    ptrs.push_back(a.allocate(3 * MiB, on(s)));
  }
  Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.segments.size(), 6u);
  for (const SegmentInfo& seg : snap.segments) {
    EXPECT_TRUE(seg.expandable);
    EXPECT_EQ(seg.size, seg.small_pool ? 2 * MiB : 4 * MiB);
  }
  expect_consistent(a);
  // A block freed after use on another stream waits for it; the end grows past it meanwhile.
  void* p = a.allocate(2 * MiB, on(0));
  a.record_stream(p, on(1));
  a.free(p);
  void* q = a.allocate(2 * MiB, on(0));
  EXPECT_NE(q, p);
  EXPECT_EQ(addr(q), addr(p) + 2 * MiB);
  expect_consistent(a);
  a.free(q);
  dev.complete();
  void* again = a.allocate(4 * MiB, on(0));  // the pending block, now free, merged with q's
  EXPECT_EQ(again, p);
  expect_consistent(a);
  a.free(again);
  for (void* x : ptrs) a.free(x);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.stats().segments.current, 0);
  expect_consistent(a);
}

TEST(ExpandableSegments, SharedPagesMoveBetweenSegments) {
  for (bool share : {false, true}) {
    SimulatedDevice dev(GiB);
    CachingAllocator a(dev, AllocatorConfig::policy(share ? "expandable-share" : "expandable"));
    std::vector<void*> small;
    for (int i = 0; i < 3; ++i) small.push_back(a.allocate(512 * KiB, on(/*stream=*/0)));
    void* other = a.allocate(3 * MiB, on(/*stream=*/1));
    for (void* p : small) a.free(p);
    a.free(other);  // cached: 2 MiB in the small pool, 4 MiB on stream 1
    EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(6 * MiB));
    void* p = a.allocate(3 * MiB, on(/*stream=*/0));
    MemoryStats s = a.stats();
    EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(share ? 4 * MiB : 10 * MiB)) << share;
    EXPECT_EQ(s.segments.current, share ? 1 : 3) << share;
    EXPECT_EQ(s.num_alloc_retries, 0);
    expect_consistent(a);
    a.free(p);
    expect_consistent(a);
  }
}

// A device without virtual memory: the allocator refuses the expandable policy.
class PlainDevice final : public DeviceMemory {
 public:
  std::string name() const override { return "plain test device"; }
  size_t capacity() const override { return inner_.capacity(); }
  size_t free_bytes() const override { return inner_.free_bytes(); }
  void* malloc(size_t bytes) override { return inner_.malloc(bytes); }
  void free(void* p, size_t bytes) override { inner_.free(p, bytes); }
  EventId record_event(const Stream& stream) override { return inner_.record_event(stream); }
  bool query(EventId event) override { return inner_.query(event); }

 private:
  SimulatedDevice inner_{GiB};
};

TEST(ExpandableSegments, ConfigurationErrors) {
  PlainDevice plain;
  EXPECT_FALSE(plain.supports_expandable());
  std::string msg = error_of<ValueError>([&] { CachingAllocator a(plain, expandable()); });
  EXPECT_CONTAINS(msg, "plain test device does not support expandable segments");
  EXPECT_CONTAINS(error_of<ValueError>([&] { plain.reserve(MiB); }), "plain test device");
  CachingAllocator ok(plain);  // the default policy is not expandable
  ok.free(ok.allocate(MiB));
  AllocatorConfig c = expandable();
  c.max_split_size = 64 * MiB;
  EXPECT_CONTAINS(error_of<ValueError>([&] { c.validate(); }), "expandable");
  EXPECT_CONTAINS(expandable().describe(), "policy=expandable");
  EXPECT_CONTAINS(AllocatorConfig{}.describe(), "expandable=off");
  AllocatorConfig shared;
  shared.share_pages = true;
  EXPECT_CONTAINS(error_of<ValueError>([&] { shared.validate(); }), "share_pages needs expandable");
  EXPECT_CONTAINS(AllocatorConfig::policy("expandable-share").describe(),
                  "policy=expandable-share");
}

TEST(ExpandableSegments, SnapshotMarksExpandableSegments) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, expandable());
  void* p = a.allocate(3 * MiB);
  Snapshot s = a.snapshot();
  const Json j = to_json(s);
  EXPECT_TRUE(j.at("segments").at(size_t{0}).at("expandable").as_bool());
  Snapshot back = snapshot_from_json(Json::parse(j.dump(), "s.json"), "s.json");
  ASSERT_EQ(back.segments.size(), 1u);
  EXPECT_TRUE(back.segments[0].expandable);
  // A snapshot from before the field: not expandable.
  std::string old = j.dump();
  const std::string field = "\"expandable\":true,";
  ASSERT_NE(old.find(field), std::string::npos) << old.substr(0, 400);
  old.erase(old.find(field), field.size());
  Snapshot legacy = snapshot_from_json(Json::parse(old, "old.json"), "old.json");
  ASSERT_EQ(legacy.segments.size(), 1u);
  EXPECT_FALSE(legacy.segments[0].expandable);
  a.free(p);
}

size_t random_size(std::mt19937_64& rng) {
  int kind = static_cast<int>(rng() % 100);
  if (kind < 70) return 1 + rng() % (64 * KiB);
  if (kind < 90) return 1 + rng() % MiB;
  if (kind < 98) return MiB + 1 + rng() % (9 * MiB);
  return 10 * MiB + rng() % (30 * MiB);
}

// The shadow model of caching_allocator_stats_test.cpp (LiveBlocks) for the expandable policy on a
// backed device (so mapped pages are really written): live bytes and peaks, no overlaps, tags
// intact. `end`: the statistics after the last operation, before everything is freed.
void run_random_workload(uint64_t seed, size_t capacity, AllocatorConfig c, MemoryStats* end) {
  SimulatedDevice dev(capacity, /*backed=*/true, /*auto_complete=*/false);
  CachingAllocator a(dev, c);
  std::mt19937_64 rng(seed);
  LiveBlocks live;
  int64_t ooms = 0;
  for (int op = 0; op < 8000; ++op) {
    if (live.empty() || rng() % 100 < 52) {
      size_t bytes = random_size(rng);
      StreamId stream = static_cast<StreamId>(rng() % 3);
      int64_t before = a.stats().allocated_bytes.current;
      void* p = nullptr;
      try {
        p = a.allocate(bytes, on(stream));
      } catch (const OutOfMemoryError&) {
        ++ooms;
        continue;
      }
      ASSERT_NE(p, nullptr);
      size_t block = static_cast<size_t>(a.stats().allocated_bytes.current - before);
      size_t rounded = (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
      ASSERT_GE(block, rounded);
      ASSERT_LE(block, rounded + MiB);
      ASSERT_TRUE(live.add(p, bytes, block, rng));
      if (rng() % 10 == 0) a.record_stream(p, on(static_cast<StreamId>(rng() % 3)));
    } else {
      void* p = live.take_random(rng);
      ASSERT_NE(p, nullptr);
      a.free(p);
    }
    if (rng() % 50 == 0) dev.complete(on(static_cast<StreamId>(rng() % 3)));
    if (rng() % 1000 == 0) a.empty_cache();
    MemoryStats s = a.stats();
    ASSERT_EQ(s.requested_bytes.current, live.requested) << "op " << op;
    ASSERT_EQ(s.allocated_bytes.current, live.allocated) << "op " << op;
    ASSERT_EQ(s.allocated_bytes.peak, live.allocated_peak) << "op " << op;
    ASSERT_EQ(s.reserved_bytes.current % static_cast<int64_t>(kExpandablePage), 0);
    ASSERT_LE(s.segments.current, 6);
    if (op % 400 == 0) {
      expect_consistent(a);
      if (::testing::Test::HasFailure()) return;
    }
  }
  expect_consistent(a);
  *end = a.stats();
  EXPECT_EQ(end->num_ooms, ooms);
  expect_drains_to_empty(a, dev, live.pointers());
}

TEST(ExpandableSegments, RandomWorkloadMatchesShadowModel) {
  MemoryStats s;
  run_random_workload(3, 4 * GiB, expandable(), &s);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_GT(s.reserved_bytes.peak, 0);
  run_random_workload(6, 4 * GiB, AllocatorConfig::policy("expandable-share"), &s);
  EXPECT_EQ(s.num_ooms, 0);
}

TEST(ExpandableSegments, RandomWorkloadUnderMemoryPressure) {
  MemoryStats s;
  run_random_workload(4, 256 * MiB, expandable(), &s);
  EXPECT_GT(s.num_alloc_retries, 0);
  EXPECT_GT(s.num_ooms, 0);
  std::cout << "256 MiB: " << s.num_alloc_retries << " retries, " << s.num_ooms << " OOMs\n";
  AllocatorConfig gc = expandable();
  gc.gc_threshold = 0.5;
  run_random_workload(5, 512 * MiB, gc, &s);  // garbage collection unmaps free ends
  std::cout << "512 MiB, gc 0.5: " << s.num_alloc_retries << " retries, " << s.num_ooms << " OOMs, "
            << s.reserved_bytes.freed / MiB << " MiB unmapped\n";
  EXPECT_LE(s.reserved_bytes.current, static_cast<int64_t>(512 * MiB));
}

}  // namespace
}  // namespace loom::memory
