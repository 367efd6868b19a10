// The caching allocator's statistics against an independent model over random workloads, several
// threads at once, and a quick timing of the hot path.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "memory/allocator_test_util.h"

namespace loom::memory {
namespace {

using namespace loom::memory::testing;

size_t rounded(size_t bytes) {
  return (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

// Mostly small requests, some medium and a few large ones, as a training step makes.
size_t random_size(std::mt19937_64& rng, bool small_only) {
  int kind = static_cast<int>(rng() % 100);
  if (small_only || kind < 70) return 1 + rng() % (64 * KiB);
  if (kind < 90) return 1 + rng() % MiB;
  if (kind < 98) return MiB + 1 + rng() % (9 * MiB);
  return 10 * MiB + rng() % (30 * MiB);
}

// A shadow of the live allocations (LiveBlocks): their bytes, requested and allocated as the
// allocator accounted them per block, their peaks, no two overlapping, and tags intact.
void run_random_workload(bool small_only, uint64_t seed) {
  SimulatedDevice dev(4 * GiB, /*backed=*/true, /*auto_complete=*/false);
  CachingAllocator a(dev);
  std::mt19937_64 rng(seed);
  LiveBlocks live;
  for (int op = 0; op < 10000; ++op) {
    bool do_alloc = live.empty() || rng() % 100 < 52;
    if (do_alloc) {
      size_t bytes = random_size(rng, small_only);
      StreamId stream = static_cast<StreamId>(rng() % 3);
      int64_t before = a.stats().allocated_bytes.current;
      void* p = a.allocate(bytes, on(stream));
      ASSERT_NE(p, nullptr);
      size_t block = static_cast<size_t>(a.stats().allocated_bytes.current - before);
      // Blocks are the rounded request, exactly in the small pool; a large-pool block may keep a
      // remainder of at most small_size that was not worth splitting off.
      if (rounded(bytes) <= MiB) {
        ASSERT_EQ(block, rounded(bytes));
      } else {
        ASSERT_GE(block, rounded(bytes));
        ASSERT_LE(block, rounded(bytes) + MiB);
      }
      ASSERT_TRUE(live.add(p, bytes, block, rng));
      if (rng() % 10 == 0) a.record_stream(p, on(static_cast<StreamId>(rng() % 3)));
    } else {
      LiveBlocks::Block taken{};
      void* p = live.take_random(rng, &taken);
      ASSERT_NE(p, nullptr);
      int64_t before = a.stats().allocated_bytes.current;
      a.free(p);
      ASSERT_EQ(before - a.stats().allocated_bytes.current, static_cast<int64_t>(taken.block));
    }
    if (rng() % 50 == 0) dev.complete(on(static_cast<StreamId>(rng() % 3)));
    if (rng() % 2000 == 0) a.empty_cache();
    MemoryStats s = a.stats();
    ASSERT_EQ(s.requested_bytes.current, live.requested) << "op " << op;
    ASSERT_EQ(s.requested_bytes.peak, live.requested_peak) << "op " << op;
    ASSERT_EQ(s.allocated_bytes.current, live.allocated) << "op " << op;
    ASSERT_EQ(s.allocated_bytes.peak, live.allocated_peak) << "op " << op;
    ASSERT_EQ(s.allocations.current, live.count) << "op " << op;
    ASSERT_EQ(s.allocations.peak, live.count_peak) << "op " << op;
    ASSERT_GE(s.active_bytes.current, s.allocated_bytes.current);
    ASSERT_GE(s.reserved_bytes.current, s.active_bytes.current);
    if (op % 500 == 0) {
      expect_consistent(a);
      if (::testing::Test::HasFailure()) return;
    }
  }
  expect_consistent(a);
  expect_drains_to_empty(a, dev, live.pointers());
  EXPECT_GT(a.stats().num_device_mallocs, 0);
}

TEST(CachingAllocatorStats, MatchReferenceModelSmallRequests) {
  run_random_workload(true, 1);
}

TEST(CachingAllocatorStats, MatchReferenceModelMixedRequests) {
  run_random_workload(false, 2);
}

TEST(CachingAllocatorStats, MatchReferenceModelUnderPolicies) {
  // Every policy keeps the invariants (a shorter run each).
  for (const std::string& policy : AllocatorConfig::policies()) {
    SCOPED_TRACE(policy);
    SimulatedDevice dev(GiB);
    CachingAllocator a(dev, AllocatorConfig::policy(policy));
    std::mt19937_64 rng(7);
    std::vector<std::pair<void*, size_t>> live;
    int64_t requested = 0;
    for (int op = 0; op < 3000; ++op) {
      if (live.empty() || rng() % 100 < 55) {
        size_t bytes = random_size(rng, false);
        live.emplace_back(a.allocate(bytes, on(static_cast<StreamId>(rng() % 2))), bytes);
        requested += static_cast<int64_t>(bytes);
      } else {
        size_t i = rng() % live.size();
        a.free(live[i].first);
        requested -= static_cast<int64_t>(live[i].second);
        live[i] = live.back();
        live.pop_back();
      }
      ASSERT_EQ(a.stats().requested_bytes.current, requested);
      if (op % 300 == 0) expect_consistent(a);
    }
    for (auto& [p, n] : live) a.free(p);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes.current, 0);
    expect_consistent(a);
  }
}

TEST(CachingAllocatorStats, ThreadsAllocateAndFreeConcurrently) {
  SimulatedDevice dev(8 * GiB);
  CachingAllocator a(dev);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<void*> mine;
      for (int op = 0; op < 20000; ++op) {
        if (mine.empty() || rng() % 2 == 0) {
          mine.push_back(a.allocate(random_size(rng, false), on(t % 2)));
        } else {
          size_t i = rng() % mine.size();
          a.free(mine[i]);
          mine[i] = mine.back();
          mine.pop_back();
        }
        if (op % 5000 == 0) (void)a.stats();
      }
      for (void* p : mine) a.free(p);
    });
  }
  for (auto& th : threads) th.join();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  EXPECT_EQ(s.allocations.current, 0);
  EXPECT_EQ(s.active_bytes.current, 0);
  EXPECT_EQ(s.allocations.allocated, s.allocations.freed);
  expect_consistent(a);
  a.empty_cache();
  EXPECT_EQ(dev.free_bytes(), dev.capacity());
}

// Not a benchmark (see `loom bench mem`): a quick look at the hot path, printed for the record.
TEST(CachingAllocatorStats, CachedSmallBlockIsFast) {
  SimulatedDevice dev(GiB);
  for (size_t history : {size_t{0}, size_t{100000}}) {
    AllocatorConfig config;
    config.history_capacity = history;
    CachingAllocator a(dev, config);
    a.free(a.allocate(4 * KiB));
    constexpr int kIters = 200000;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) a.free(a.allocate(4 * KiB));
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        kIters;
    std::cout << "[ timing   ] allocate+free of a cached 4 KiB block, history " << history << ": "
              << ns << " ns\n";
    EXPECT_EQ(a.stats().num_device_mallocs, 1);
  }
}

}  // namespace
}  // namespace loom::memory
