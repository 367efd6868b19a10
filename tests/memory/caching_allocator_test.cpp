// The caching allocator on a simulated device: rounding, pools, best fit, splitting and
// coalescing, max_split_size, streams, out-of-memory and its retry, garbage collection,
// empty_cache, bad frees and configuration.
#include "loom/memory/caching_allocator.h"
#include "loom/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "memory/allocator_test_util.h"
#include "test_errors.h"

namespace loom::memory {
namespace {

using loom::testing::error_of;
using namespace loom::memory::testing;

// The blocks of the one segment containing `p`, as (offset from the segment, size, allocated).
struct BlockShape {
  uint64_t offset;
  size_t size;
  bool allocated;
  bool operator==(const BlockShape&) const = default;
};
std::ostream& operator<<(std::ostream& os, const BlockShape& b) {
  return os << "{" << b.offset << ", " << b.size << ", " << (b.allocated ? "alloc" : "free") << "}";
}

std::vector<BlockShape> segment_of(const CachingAllocator& a, uint64_t address) {
  for (const SegmentInfo& seg : a.snapshot().segments) {
    if (address < seg.address || address >= seg.address + seg.size) continue;
    std::vector<BlockShape> out;
    for (const BlockInfo& b : seg.blocks)
      out.push_back({b.address - seg.address, b.size, b.allocated});
    return out;
  }
  return {};
}

TEST(CachingAllocator, RoundsRequestsTo512Bytes) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  EXPECT_EQ(a.allocate(0), nullptr);
  EXPECT_EQ(a.stats().allocations.current, 0);
  struct Case {
    size_t bytes, rounded;
  };
  int64_t expected_allocated = 0, expected_requested = 0;
  std::vector<void*> ptrs;
  for (Case c : {Case{1, 512}, Case{511, 512}, Case{512, 512}, Case{513, 1024}, Case{4000, 4096},
                 Case{MiB - 1, MiB}, Case{MiB + 1, MiB + 512}}) {
    void* p = a.allocate(c.bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % kRoundBytes, 0u);
    ptrs.push_back(p);
    expected_allocated += static_cast<int64_t>(c.rounded);
    expected_requested += static_cast<int64_t>(c.bytes);
    MemoryStats s = a.stats();
    EXPECT_EQ(s.allocated_bytes.current, expected_allocated) << c.bytes << " bytes";
    EXPECT_EQ(s.requested_bytes.current, expected_requested) << c.bytes << " bytes";
  }
  expect_consistent(a);
  for (void* p : ptrs) a.free(p);
  EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  EXPECT_EQ(a.stats().requested_bytes.current, 0);
  a.free(nullptr);  // a no-op, like std::free
  expect_consistent(a);
}

TEST(CachingAllocator, PoolsAndSegmentSizes) {
  struct Case {
    size_t bytes;
    bool small;
    size_t segment;
  };
  for (Case c : {Case{512, true, 2 * MiB}, Case{MiB, true, 2 * MiB}, Case{MiB + 1, false, 20 * MiB},
                 Case{9 * MiB, false, 20 * MiB}, Case{10 * MiB, false, 10 * MiB},
                 Case{11 * MiB + 1, false, 12 * MiB}, Case{100 * MiB, false, 100 * MiB}}) {
    SCOPED_TRACE(c.bytes);
    SimulatedDevice dev(GiB);
    CachingAllocator a(dev);
    void* p = a.allocate(c.bytes);
    Snapshot s = a.snapshot();
    ASSERT_EQ(s.segments.size(), 1u);
    EXPECT_EQ(s.segments[0].address, addr(p));
    EXPECT_EQ(s.segments[0].small_pool, c.small);
    EXPECT_EQ(s.segments[0].size, c.segment);
    EXPECT_EQ(dev.free_bytes(), GiB - c.segment);
    a.free(p);
    expect_consistent(a);
  }
  // Segments are never larger than the device.
  SimulatedDevice tiny(5 * MiB);
  CachingAllocator a(tiny);
  void* p = a.allocate(3 * MiB);  // 20 MiB would not fit: the request rounded to 2 MiB
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(4 * MiB));
  a.free(p);
  a.empty_cache();
  p = a.allocate(5 * MiB - 512);  // 6 MiB would not fit either: exactly the request
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(5 * MiB - 512));
  a.free(p);
  SimulatedDevice smaller(MiB);
  CachingAllocator b(smaller);
  p = b.allocate(4 * KiB);  // small pool, device below one 2 MiB segment
  EXPECT_EQ(b.stats().reserved_bytes.current, static_cast<int64_t>(MiB));
  b.free(p);
}

TEST(CachingAllocator, SmallRequestsShareASegment) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(4 * KiB);
  void* q = a.allocate(4 * KiB);
  EXPECT_EQ(addr(q), addr(p) + 4 * KiB);
  EXPECT_EQ(a.stats().segments.current, 1);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(2 * MiB));
  // A large request does not come from the small pool's segment.
  void* big = a.allocate(2 * MiB);
  EXPECT_EQ(a.stats().segments.current, 2);
  a.free(p);
  a.free(q);
  a.free(big);
  expect_consistent(a);
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  // Free blocks of 4, 16 and 8 KiB kept apart by allocated separators.
  void* b4 = a.allocate(4 * KiB);
  void* s1 = a.allocate(KiB);
  void* b16 = a.allocate(16 * KiB);
  void* s2 = a.allocate(KiB);
  void* b8 = a.allocate(8 * KiB);
  void* s3 = a.allocate(KiB);
  a.free(b4);
  a.free(b16);
  a.free(b8);
  expect_consistent(a);
  EXPECT_EQ(a.allocate(6 * KiB), b8);    // 8 KiB fits best (its 2 KiB rest stays free)
  EXPECT_EQ(a.allocate(10 * KiB), b16);  // 16 KiB
  EXPECT_EQ(a.allocate(3 * KiB), b4);    // 4 KiB
  (void)s1, (void)s2, (void)s3;
  expect_consistent(a);

  // Ties go to the lower address: two free 4 KiB blocks.
  SimulatedDevice dev2(GiB);
  CachingAllocator b(dev2);
  void* t1 = b.allocate(4 * KiB);
  b.allocate(KiB);
  void* t2 = b.allocate(4 * KiB);
  b.allocate(KiB);
  b.free(t2);
  b.free(t1);
  EXPECT_EQ(b.allocate(4 * KiB), t1);
  EXPECT_EQ(b.allocate(4 * KiB), t2);
  expect_consistent(b);
}

TEST(CachingAllocator, SplitsAndCoalescesInEveryFreeOrder) {
  std::vector<int> order = {0, 1, 2, 3};
  do {
    SimulatedDevice dev(GiB);
    CachingAllocator a(dev);
    std::vector<void*> p;
    for (int i = 0; i < 4; ++i) p.push_back(a.allocate(256 * KiB));
    uint64_t base = addr(p[0]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(addr(p[i]), base + i * 256 * KiB);
    EXPECT_EQ(segment_of(a, base), (std::vector<BlockShape>{{0, 256 * KiB, true},
                                                            {256 * KiB, 256 * KiB, true},
                                                            {512 * KiB, 256 * KiB, true},
                                                            {768 * KiB, 256 * KiB, true},
                                                            {MiB, MiB, false}}));
    EXPECT_EQ(a.stats().inactive_split_bytes.current, static_cast<int64_t>(MiB));
    std::vector<bool> live(5, true);
    live[4] = false;  // the remainder
    for (int i : order) {
      a.free(p[i]);
      live[i] = false;
      // Expected: runs of free neighbours merged into one block.
      std::vector<BlockShape> expected;
      for (int j = 0; j < 5; ++j) {
        size_t size = j < 4 ? 256 * KiB : MiB;
        if (!live[j] && !expected.empty() && !expected.back().allocated) {
          expected.back().size += size;
        } else {
          expected.push_back(
              {static_cast<uint64_t>(j) * 256 * KiB, size, static_cast<bool>(live[j])});
        }
      }
      EXPECT_EQ(segment_of(a, base), expected);
      expect_consistent(a);
    }
    EXPECT_EQ(segment_of(a, base), (std::vector<BlockShape>{{0, 2 * MiB, false}}));
    EXPECT_EQ(a.stats().inactive_split_bytes.current, 0);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(CachingAllocator, LargePoolSplitsOnlyWhenTheRestIsLarge) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(3 * MiB);  // a 20 MiB segment: 17 MiB left, split
  EXPECT_EQ(segment_of(a, addr(p)),
            (std::vector<BlockShape>{{0, 3 * MiB, true}, {3 * MiB, 17 * MiB, false}}));
  void* q = a.allocate(16 * MiB + 512 * KiB);  // 512 KiB would be left: not split
  EXPECT_EQ(addr(q), addr(p) + 3 * MiB);
  EXPECT_EQ(segment_of(a, addr(p)),
            (std::vector<BlockShape>{{0, 3 * MiB, true}, {3 * MiB, 17 * MiB, true}}));
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(s.requested_bytes.current, static_cast<int64_t>(19 * MiB + 512 * KiB));
  a.free(p);
  a.free(q);
  expect_consistent(a);
}

TEST(CachingAllocator, MaxSplitSizeKeepsLargeBlocksWhole) {
  SimulatedDevice dev(GiB);
  AllocatorConfig config;
  config.max_split_size = 64 * MiB;
  CachingAllocator a(dev, config);
  void* big = a.allocate(100 * MiB);
  a.free(big);
  // A request under max_split_size does not cut the 100 MiB block.
  void* small = a.allocate(10 * MiB);
  EXPECT_NE(addr(small), addr(big));
  EXPECT_EQ(segment_of(a, addr(big)), (std::vector<BlockShape>{{0, 100 * MiB, false}}));
  // An oversize request takes it whole when at most large_round (2 MiB) would be unused...
  void* p = a.allocate(99 * MiB);
  EXPECT_EQ(p, big);
  EXPECT_EQ(segment_of(a, addr(big)), (std::vector<BlockShape>{{0, 100 * MiB, true}}));
  a.free(p);
  // ...but not when more would be.
  void* q = a.allocate(90 * MiB);
  EXPECT_NE(q, big);
  EXPECT_EQ(a.stats().reserved_bytes.current, static_cast<int64_t>(200 * MiB));
  a.free(q);
  a.free(small);
  expect_consistent(a);

  // "no-split": every large segment is sized to its request, never split.
  SimulatedDevice dev2(GiB);
  CachingAllocator b(dev2, AllocatorConfig::policy("no-split"));
  void* r = b.allocate(3 * MiB);
  EXPECT_EQ(segment_of(b, addr(r)), (std::vector<BlockShape>{{0, 4 * MiB, true}}));
  b.free(r);
  void* t = b.allocate(MiB + 512);  // 4 MiB block would leave more than 2 MiB unused
  EXPECT_NE(t, r);
  b.free(t);
  expect_consistent(b);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirStream) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p1 = a.allocate(4 * KiB, on(1));
  a.free(p1);
  void* p0 = a.allocate(4 * KiB, on(0));
  EXPECT_EQ(a.stats().segments.current, 2);
  EXPECT_NE(p0, p1);
  EXPECT_EQ(a.allocate(4 * KiB, on(1)), p1);
  expect_consistent(a);
}

TEST(CachingAllocator, CrossStreamReuseWaitsForEvents) {
  SimulatedDevice dev(GiB, /*backed=*/false, /*auto_complete=*/false);
  CachingAllocator a(dev);
  void* p = a.allocate(4 * KiB, on(0));
  a.record_stream(p, on(1));
  a.record_stream(p, on(2));
  a.record_stream(p, on(0));  // its own stream: nothing to wait for
  a.free(p);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.active_bytes.current, static_cast<int64_t>(4 * KiB));  // pending
  Snapshot snap = a.snapshot();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_TRUE(snap.segments[0].blocks[0].pending);
  expect_consistent(a);

  void* q = a.allocate(4 * KiB, on(0));
  EXPECT_NE(q, p);
  dev.complete(on(1));  // stream 2's work is still queued
  void* r = a.allocate(4 * KiB, on(0));
  EXPECT_NE(r, p);
  EXPECT_NE(r, q);
  dev.complete(on(2));
  void* t = a.allocate(4 * KiB, on(0));
  EXPECT_EQ(t, p);
  EXPECT_EQ(a.stats().active_bytes.current, a.stats().allocated_bytes.current);
  for (void* x : {q, r, t}) a.free(x);
  expect_consistent(a);

  // empty_cache reclaims completed pending frees too.
  void* u = a.allocate(4 * KiB, on(0));
  a.record_stream(u, on(3));
  a.free(u);
  a.empty_cache();
  EXPECT_EQ(a.stats().segments.current, 1);  // still pending: the segment stays
  dev.complete();
  a.empty_cache();
  EXPECT_EQ(a.stats().segments.current, 0);
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
}

TEST(CachingAllocator, OutOfMemoryReportsTheState) {
  SimulatedDevice dev(8 * MiB);
  CachingAllocator a(dev);
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i) ptrs.push_back(a.allocate(MiB));  // four 2 MiB segments, full
  MemoryStats before = a.stats();
  std::string msg = error_of<OutOfMemoryError>([&] { a.allocate(MiB); });
  EXPECT_CONTAINS(msg, "[caching allocator] out of memory");
  EXPECT_CONTAINS(msg, "tried to allocate 1 MiB (1048576 bytes");
  EXPECT_CONTAINS(msg, "0 B free of 8 MiB total");
  EXPECT_CONTAINS(msg, "8 MiB reserved");
  EXPECT_CONTAINS(msg, "8 MiB allocated");
  EXPECT_CONTAINS(msg, "largest free block 0 B");
  EXPECT_CONTAINS(msg, "fragmentation 0.00");
  EXPECT_CONTAINS(msg, "Hint: reduce the batch size");
  EXPECT_CONTAINS(msg, "simulated device");
  MemoryStats after = a.stats();
  EXPECT_EQ(after.num_ooms, 1);
  EXPECT_EQ(after.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(after.allocations.current, 8);
  expect_consistent(a);
  // The allocator keeps working: free one and the same request succeeds.
  a.free(ptrs.back());
  ptrs.back() = a.allocate(MiB);
  for (void* p : ptrs) a.free(p);
  expect_consistent(a);
}

TEST(CachingAllocator, OutOfMemoryHintsAtFragmentation) {
  SimulatedDevice dev(8 * MiB);
  CachingAllocator a(dev);
  // Four 2 MiB segments, each half allocated: 4 MiB free, but no block above 1 MiB.
  std::vector<void*> keep, drop;
  for (int i = 0; i < 8; ++i) (i % 2 ? drop : keep).push_back(a.allocate(MiB));
  for (void* p : drop) a.free(p);
  std::string msg = error_of<OutOfMemoryError>([&] { a.allocate(2 * MiB); });
  EXPECT_CONTAINS(msg, "largest free block 1 MiB");
  EXPECT_CONTAINS(msg, "fragmentation 0.75");
  EXPECT_CONTAINS(msg, "max_split_size");
  for (void* p : keep) a.free(p);
  expect_consistent(a);
}

TEST(CachingAllocator, OutOfMemoryRetriesAfterReleasingTheCache) {
  SimulatedDevice dev(32 * MiB);
  CachingAllocator a(dev);
  std::vector<void*> ptrs;
  for (int i = 0; i < 24; ++i) ptrs.push_back(a.allocate(MiB));  // twelve small segments
  for (void* p : ptrs) a.free(p);
  EXPECT_EQ(dev.free_bytes(), 8 * MiB);
  // A 20 MiB large segment does not fit next to the cached 24 MiB: the cache is released and the
  // segment retried.
  void* big = a.allocate(3 * MiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_frees, 12);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(s.segments.current, 1);
  a.free(big);
  expect_consistent(a);
}

TEST(CachingAllocator, TooLargeRequestIsAValueError) {
  SimulatedDevice dev(64 * MiB);
  CachingAllocator a(dev);
  void* p = a.allocate(KiB);
  std::string msg = error_of<ValueError>([&] { a.allocate(64 * MiB + 1); });
  EXPECT_CONTAINS(msg, "cannot allocate 67108865 bytes");
  EXPECT_CONTAINS(msg, "capacity of simulated device (64 MiB) (67108864 bytes)");
  EXPECT_EQ(a.stats().num_ooms, 0);
  // The whole capacity is a valid request (it fails for lack of room, not as a ValueError).
  EXPECT_EQ(error_of<OutOfMemoryError>([&] { a.allocate(64 * MiB); }).find("out of memory") !=
                std::string::npos,
            true);
  a.free(p);
  void* all = a.allocate(64 * MiB);  // with the small segment released by the retry
  EXPECT_EQ(a.stats().num_alloc_retries, 2);
  a.free(all);
  expect_consistent(a);
}

TEST(CachingAllocator, BadFreesAreValueErrorsAndChangeNothing) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(4 * KiB);
  void* q = a.allocate(8 * KiB);
  void* r = a.allocate(4 * KiB, on(1));
  a.record_stream(r, on(2));
  MemoryStats before = a.stats();
  int local = 0;
  std::string msg = error_of<ValueError>([&] { a.free(&local); });
  EXPECT_CONTAINS(msg, pointer_text(&local));
  EXPECT_CONTAINS(msg, "not allocated by this caching allocator");
  char* inside = static_cast<char*>(q) + 512;
  msg = error_of<ValueError>([&] { a.free(inside); });
  EXPECT_CONTAINS(msg, pointer_text(inside));
  EXPECT_CONTAINS(msg, "not its start");
  a.free(p);
  msg = error_of<ValueError>([&] { a.free(p); });
  EXPECT_CONTAINS(msg, pointer_text(p));
  EXPECT_CONTAINS(msg, "double free");
  // A double free of a block merged into a neighbour is still recognised.
  a.free(q);
  msg = error_of<ValueError>([&] { a.free(q); });
  EXPECT_CONTAINS(msg, "double free");
  // Not yet reusable (pending) blocks too.
  SimulatedDevice dev2(GiB, false, /*auto_complete=*/false);
  CachingAllocator b(dev2);
  void* x = b.allocate(KiB);
  b.record_stream(x, on(1));
  b.free(x);
  msg = error_of<ValueError>([&] { b.free(x); });
  EXPECT_CONTAINS(msg, "double free");
  EXPECT_CONTAINS(msg, "waiting for events");
  msg = error_of<ValueError>([&] { a.record_stream(&local, on(1)); });
  EXPECT_CONTAINS(msg, pointer_text(&local));
  // A segment returned to the device: its addresses are foreign now.
  a.free(r);
  a.empty_cache();
  msg = error_of<ValueError>([&] { a.free(r); });
  EXPECT_CONTAINS(msg, "not allocated by this caching allocator");
  EXPECT_EQ(a.stats().allocations.current, 0);
  EXPECT_EQ(before.allocations.current, 3);
  expect_consistent(a);
  void* again = a.allocate(4 * KiB);
  a.free(again);
  expect_consistent(a);
}

TEST(CachingAllocator, GarbageCollectionReleasesTheOldestCachedSegments) {
  auto run = [](double gc) {
    SimulatedDevice dev(100 * MiB);
    AllocatorConfig config;
    config.gc_threshold = gc;
    CachingAllocator a(dev, config);
    void* p12 = a.allocate(12 * MiB);
    void* p14 = a.allocate(14 * MiB);
    void* p16 = a.allocate(16 * MiB);
    a.free(p12);  // oldest
    a.free(p16);
    a.free(p14);
    void* p20 = a.allocate(20 * MiB);  // 42 + 20 MiB would pass 50 MiB
    std::vector<size_t> sizes;
    for (const SegmentInfo& seg : a.snapshot().segments) sizes.push_back(seg.size);
    std::sort(sizes.begin(), sizes.end());
    a.free(p20);
    expect_consistent(a);
    return sizes;
  };
  EXPECT_EQ(run(0.5), (std::vector<size_t>{14 * MiB, 16 * MiB, 20 * MiB}));
  EXPECT_EQ(run(0.0), (std::vector<size_t>{12 * MiB, 14 * MiB, 16 * MiB, 20 * MiB}));
  // 45 MiB: releasing 12 MiB is not enough, 12 and 16 are.
  EXPECT_EQ(run(0.45), (std::vector<size_t>{14 * MiB, 20 * MiB}));
  EXPECT_EQ(run(0.2), (std::vector<size_t>{20 * MiB}));  // everything cached goes
}

TEST(CachingAllocator, EmptyCacheReturnsFreeSegments) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* s1 = a.allocate(4 * KiB);
  void* s2 = a.allocate(MiB);
  void* s2b = a.allocate(MiB - 4 * KiB);  // the first small segment is full
  void* s3 = a.allocate(4 * KiB);         // second small segment
  void* l1 = a.allocate(30 * MiB);
  void* l2 = a.allocate(5 * MiB);
  a.free(s3);
  a.free(l1);
  a.free(s1);
  EXPECT_EQ(a.stats().segments.current, 4);
  a.empty_cache();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.segments.current, 2);  // the first small segment (s2) and the 20 MiB one (l2)
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(22 * MiB));
  expect_consistent(a);
  a.free(s2);
  a.free(s2b);
  a.free(l2);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
  EXPECT_EQ(dev.malloc_calls(), dev.free_calls());
  expect_consistent(a);
}

TEST(CachingAllocator, NoCachePolicyReturnsSegmentsOnFree) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, AllocatorConfig::policy("no-cache"));
  void* p = a.allocate(4 * KiB);
  void* q = a.allocate(4 * KiB);
  a.free(p);
  EXPECT_EQ(a.stats().segments.current, 1);  // q still lives in it
  a.free(q);
  EXPECT_EQ(a.stats().segments.current, 0);
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
  expect_consistent(a);
}

TEST(CachingAllocator, StatsPeaksAndReset) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(KiB);
  a.free(p);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(3 * MiB + KiB));
  EXPECT_EQ(s.allocated_bytes.allocated, static_cast<int64_t>(3 * MiB + KiB));
  EXPECT_EQ(s.allocated_bytes.freed, static_cast<int64_t>(3 * MiB));
  EXPECT_EQ(s.allocations.peak, 2);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(22 * MiB));
  EXPECT_EQ(s.num_device_mallocs, 2);
  EXPECT_EQ(s.largest_free_block, 20 * MiB);
  a.reset_peak_stats();
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.peak, static_cast<int64_t>(KiB));
  EXPECT_EQ(s.allocations.peak, 1);
  EXPECT_EQ(s.allocated_bytes.allocated, static_cast<int64_t>(3 * MiB + KiB));  // kept
  // Free bytes in segments: 22 MiB - 1 KiB, the largest piece 20 MiB.
  double free_bytes = 22.0 * MiB - KiB;
  EXPECT_NEAR(s.fragmentation(), 1.0 - 20.0 * MiB / free_bytes, 1e-12);
  a.free(q);
  EXPECT_EQ(MemoryStats{}.fragmentation(), 0.0);
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(CachingAllocator, HistoryRecordsEventsInARing) {
  SimulatedDevice dev(GiB);
  AllocatorConfig config;
  config.history_capacity = 4;
  int64_t t0 = steady_now_ns();
  CachingAllocator a(dev, config);
  int op = 0;
  a.set_context_provider([&op] { return "op" + std::to_string(op); });
  op = 1;
  void* p = a.allocate(KiB);
  op = 2;
  void* q = a.allocate(KiB);
  a.free(p);
  Snapshot s = a.snapshot();
  ASSERT_EQ(s.history.size(), 4u);
  EXPECT_EQ(s.history[0].kind, TraceEvent::Kind::SegmentAlloc);
  EXPECT_EQ(s.history[1].kind, TraceEvent::Kind::Alloc);
  EXPECT_EQ(s.history[1].context, "op1");
  EXPECT_EQ(s.history[1].address, addr(p));
  EXPECT_EQ(s.history[1].size, KiB);
  EXPECT_EQ(s.history[2].context, "op2");
  EXPECT_EQ(s.history[3].kind, TraceEvent::Kind::Free);
  EXPECT_EQ(s.history[3].context, "op1");
  // Steady-clock times, in order, between the allocator's construction and the snapshot (with a
  // microsecond of slack for the mapping of Note [history timestamps]).
  int64_t t1 = steady_now_ns();
  for (size_t i = 0; i < s.history.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(s.history[i].time_ns, s.history[i - 1].time_ns);
    }
    EXPECT_GE(s.history[i].time_ns, t0 - 1000);
    EXPECT_LE(s.history[i].time_ns, t1 + 1000);
  }
  EXPECT_EQ(s.segments[0].blocks[1].context, "op2");  // q
  a.free(q);
  a.empty_cache();
  s = a.snapshot();
  ASSERT_EQ(s.history.size(), 4u);  // the oldest two fell out
  EXPECT_EQ(s.history[0].kind, TraceEvent::Kind::Alloc);
  EXPECT_EQ(s.history[0].context, "op2");
  EXPECT_EQ(s.history[2].kind, TraceEvent::Kind::Free);
  EXPECT_EQ(s.history[3].kind, TraceEvent::Kind::SegmentFree);
  EXPECT_STREQ(trace_event_kind_name(TraceEvent::Kind::SegmentFree), "segment_free");

  SimulatedDevice dev2(8 * MiB);
  config.history_capacity = 0;
  CachingAllocator b(dev2, config);
  b.free(b.allocate(KiB));
  EXPECT_THROW(b.allocate(8 * MiB + 1), ValueError);
  EXPECT_TRUE(b.snapshot().history.empty());
}

TEST(CachingAllocator, ContextProviderThatThrowsChangesNothing) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(KiB);
  a.set_context_provider([]() -> std::string { throw ValueError("no context"); });
  EXPECT_THROW(a.allocate(KiB), ValueError);
  EXPECT_EQ(a.stats().allocations.current, 1);
  expect_consistent(a);
  a.set_context_provider({});
  void* q = a.allocate(KiB);
  a.free(p);
  a.free(q);
  expect_consistent(a);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  SimulatedDevice dev(GiB);
  {
    CachingAllocator a(dev);
    a.allocate(KiB);
    a.allocate(30 * MiB);
    a.free(a.allocate(3 * MiB));
    ::testing::internal::CaptureStderr();
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(err, "destroyed while 2 block(s) are still in use");
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
  {
    CachingAllocator a(dev);
    a.free(a.allocate(KiB));
    ::testing::internal::CaptureStderr();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
}

TEST(CachingAllocator, OomIsRecordedInTheHistory) {
  SimulatedDevice dev(4 * MiB);
  CachingAllocator a(dev);
  void* p = a.allocate(3 * MiB);
  EXPECT_THROW(a.allocate(3 * MiB), OutOfMemoryError);
  Snapshot s = a.snapshot();
  ASSERT_FALSE(s.history.empty());
  EXPECT_EQ(s.history.back().kind, TraceEvent::Kind::Oom);
  EXPECT_EQ(s.history.back().size, 3 * MiB);
  a.free(p);
}

TEST(CachingAllocator, PoliciesAndConfig) {
  std::vector<std::string> names = AllocatorConfig::policies();
  EXPECT_EQ(names.size(), 8u);
  for (const std::string& n : names) {
    AllocatorConfig c = AllocatorConfig::policy(n);
    EXPECT_CONTAINS(c.describe(), "policy=" + n);
    c.validate();
  }
  EXPECT_EQ(AllocatorConfig::policy("no-split").max_split_size, 0u);
  EXPECT_EQ(AllocatorConfig::policy("max-split-64m").max_split_size, 64 * MiB);
  EXPECT_EQ(AllocatorConfig::policy("gc-0.8").gc_threshold, 0.8);
  EXPECT_FALSE(AllocatorConfig::policy("no-cache").cache);
  EXPECT_EQ(AllocatorConfig::policy("small-segments").large_segment, 2 * MiB);
  std::string msg = error_of<ValueError>([] { AllocatorConfig::policy("fast"); });
  EXPECT_CONTAINS(msg, "unknown allocator policy 'fast'");
  EXPECT_CONTAINS(msg,
                  "default, expandable, expandable-share, gc-0.8, max-split-64m, no-cache, "
                  "no-split, small-segments");
  EXPECT_TRUE(AllocatorConfig::policy("expandable").expandable);
  EXPECT_FALSE(AllocatorConfig::policy("default").expandable);
  AllocatorConfig custom;
  custom.large_round = 1000;
  SimulatedDevice dev(GiB);
  msg = error_of<ValueError>([&] { CachingAllocator a(dev, custom); });
  EXPECT_CONTAINS(msg, "large_round must be a positive multiple of 512 bytes but got 1000");
  custom = {};
  custom.gc_threshold = 1.5;
  EXPECT_THROW(custom.validate(), ValueError);
  custom = {};
  custom.max_split_size = 32 * MiB;
  EXPECT_EQ(custom.describe().find("policy="), std::string::npos);
  EXPECT_CONTAINS(custom.describe(), "max_split_size=32 MiB");
}

TEST(CachingAllocator, SmallSegmentsPolicy) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev, AllocatorConfig::policy("small-segments"));
  void* p = a.allocate(MiB + 512);
  void* q = a.allocate(3 * MiB);
  EXPECT_EQ(segment_of(a, addr(p)), (std::vector<BlockShape>{{0, 2 * MiB, true}}));
  EXPECT_EQ(segment_of(a, addr(q)), (std::vector<BlockShape>{{0, 4 * MiB, true}}));
  a.free(p);
  a.free(q);
  expect_consistent(a);
}

TEST(SimulatedDevice, AccountsCapacityAndEvents) {
  SimulatedDevice dev(4 * MiB, /*backed=*/true, /*auto_complete=*/false);
  EXPECT_EQ(dev.capacity(), 4 * MiB);
  void* p = dev.malloc(3 * MiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(addr(p) % kRoundBytes, 0u);
  static_cast<char*>(p)[3 * MiB - 1] = 1;  // backed: real memory
  EXPECT_EQ(dev.free_bytes(), MiB);
  EXPECT_EQ(dev.malloc(2 * MiB), nullptr);
  EXPECT_THROW(dev.free(static_cast<char*>(p) + 512, 3 * MiB), ValueError);
  dev.free(p, 3 * MiB);
  EXPECT_EQ(dev.free_bytes(), 4 * MiB);
  EXPECT_EQ(dev.malloc_calls(), 2);
  EXPECT_EQ(dev.free_calls(), 1);

  EventId e1 = dev.record_event(on(1));
  EventId e2 = dev.record_event(on(2));
  EventId e3 = dev.record_event(on(1));
  EXPECT_FALSE(dev.query(e1));
  dev.complete(on(1));
  EXPECT_TRUE(dev.query(e1));
  EXPECT_TRUE(dev.query(e3));
  EXPECT_FALSE(dev.query(e2));
  EventId e4 = dev.record_event(on(1));
  EXPECT_FALSE(dev.query(e4));
  dev.complete();
  EXPECT_TRUE(dev.query(e2));
  EXPECT_TRUE(dev.query(e4));
  EXPECT_THROW(dev.query(99), ValueError);

  SimulatedDevice fake(size_t{512} << 30);  // 512 GiB of never-touched addresses
  void* a = fake.malloc(size_t{300} << 30);
  void* b = fake.malloc(size_t{100} << 30);
  EXPECT_EQ(addr(b), addr(a) + (size_t{300} << 30));
  EXPECT_TRUE(fake.query(fake.record_event(on(0))));  // auto_complete
  fake.free(a, size_t{300} << 30);
  fake.free(b, size_t{100} << 30);
}

}  // namespace
}  // namespace loom::memory
