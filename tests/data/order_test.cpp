// Sample order: the keyed bijection, the rank partition (every sample once, independent of the
// world size), exact resume with another world size, determinism, block locality and O(shards)
// memory.
#include "loom/data/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "test_errors.h"

namespace loom::data {
namespace {

using loom::testing::error_of;

std::vector<uint64_t> permutation(uint64_t n, uint64_t key) {
  const Bijection bij(n, key);
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = bij(i);
  return out;
}

std::vector<int64_t> epoch_order(const SampleOrder& order, int64_t epoch, int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) out[static_cast<size_t>(p)] = order.at(epoch, p);
  return out;
}

TEST(Bijection, IsPermutation) {
  const uint64_t sizes[] = {0, 1, 2, 3, 5, 7, 8, 9, 31, 32, 33, 1000, 4096, 4097, 65537};
  const uint64_t keys[] = {0, 1, 42, 0xDEADBEEFull, ~uint64_t{0}};
  for (const uint64_t n : sizes) {
    for (const uint64_t key : keys) {
      const Bijection bij(n, key);
      EXPECT_EQ(bij.size(), n);
      std::vector<bool> seen(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t v = bij(i);
        ASSERT_LT(v, n) << "n=" << n << " key=" << key << " i=" << i;
        ASSERT_FALSE(seen[v]) << "n=" << n << " key=" << key << ": " << v << " visited twice";
        seen[v] = true;
      }
    }
  }
}

TEST(Bijection, KeysGiveDifferentPermutations) {
  for (const uint64_t n : {8ull, 33ull, 1000ull, 4097ull}) {
    std::set<std::vector<uint64_t>> distinct;
    for (uint64_t key = 0; key < 20; ++key) distinct.insert(permutation(n, key));
    EXPECT_EQ(distinct.size(), 20u) << "n=" << n;
  }
  // Not the identity, and the same key gives the same permutation.
  EXPECT_NE(permutation(1000, 7), permutation(1000, 8));
  EXPECT_EQ(permutation(1000, 7), permutation(1000, 7));
  std::vector<uint64_t> identity(1000);
  for (uint64_t i = 0; i < 1000; ++i) identity[i] = i;
  EXPECT_NE(permutation(1000, 7), identity);
}

TEST(Bijection, HugeDomains) {
  for (const uint64_t n : {uint64_t{1} << 40, (uint64_t{1} << 63) + 12345, ~uint64_t{0}}) {
    const Bijection bij(n, 99);
    std::set<uint64_t> values;
    for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{2}, n / 3, n / 2, n - 2, n - 1}) {
      const uint64_t v = bij(i);
      EXPECT_LT(v, n);
      values.insert(v);
    }
    EXPECT_EQ(values.size(), 7u) << "n=" << n;
  }
}

struct Layout {
  const char* name;
  std::vector<int64_t> sizes;
};

std::vector<Layout> layouts() {
  std::vector<int64_t> many;
  for (int i = 0; i < 60; ++i) many.push_back((i * 7) % 6);  // 0..5 samples, some empty shards
  return {{"one", {100}}, {"uneven", {7, 100, 1, 33}}, {"many_small", many}};
}

struct Config {
  ShuffleMode mode;
  int64_t block_size;
};

std::vector<Config> configs() {
  return {{ShuffleMode::None, 1 << 18}, {ShuffleMode::Global, 1 << 18},
          {ShuffleMode::Block, 1},      {ShuffleMode::Block, 16},
          {ShuffleMode::Block, 37},     {ShuffleMode::Block, 1 << 18}};
}

TEST(Order, RanksTogetherSeeEachSampleOnce) {
  for (const Layout& layout : layouts()) {
    for (const Config& cfg : configs()) {
      for (const PadPolicy pad : {PadPolicy::Pad, PadPolicy::Drop}) {
        OrderOptions opt;
        opt.seed = 1234;
        opt.shuffle = cfg.mode;
        opt.block_size = cfg.block_size;
        opt.pad = pad;
        const SampleOrder order(layout.sizes, opt);
        const int64_t n = order.samples();
        SCOPED_TRACE(std::string(layout.name) + " " + order.describe());
        for (int64_t epoch : {0, 1, 5}) {
          // The first N positions are a permutation of the samples.
          const auto base = epoch_order(order, epoch, n);
          std::vector<int64_t> sorted = base;
          std::sort(sorted.begin(), sorted.end());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
          if (cfg.mode == ShuffleMode::None) {
            EXPECT_EQ(base, sorted);
          }

          for (int world = 1; world <= 8; ++world) {
            SCOPED_TRACE("world " + std::to_string(world) + " epoch " + std::to_string(epoch));
            const int64_t size = order.epoch_size(world);
            ASSERT_EQ(size % world, 0);
            if (pad == PadPolicy::Pad) {
              ASSERT_GE(size, n);
              ASSERT_LT(size, n + world);
            } else {
              ASSERT_LE(size, n);
              ASSERT_GT(size, n - world);
            }
            // Interleave the ranks' sequences back into positions.
            std::vector<int64_t> merged(static_cast<size_t>(size), -1);
            int64_t total = 0;
            for (int rank = 0; rank < world; ++rank) {
              const int64_t count = order.rank_size(world, rank);
              EXPECT_EQ(count, size / world);
              total += count;
              for (int64_t i = 0; i < count; ++i)
                merged[static_cast<size_t>(rank + i * world)] =
                    order.rank_at(epoch, world, rank, i);
            }
            ASSERT_EQ(total, size);
            std::vector<int64_t> seen(static_cast<size_t>(n), 0);
            for (int64_t p = 0; p < size; ++p) {
              const int64_t id = merged[static_cast<size_t>(p)];
              ASSERT_EQ(id, order.at(epoch, p)) << "position " << p;
              ASSERT_GE(id, 0);
              ASSERT_LT(id, n);
              ++seen[static_cast<size_t>(id)];
              // Pad positions repeat the order from its start; the order does not depend on W.
              if (p < n) {
                ASSERT_EQ(id, base[static_cast<size_t>(p)]);
              } else {
                ASSERT_EQ(id, base[static_cast<size_t>(p % n)]);
              }
            }
            if (pad == PadPolicy::Drop) {
              // Exactly the first `size` positions' samples, each once.
              for (int64_t p = 0; p < n; ++p)
                ASSERT_EQ(seen[static_cast<size_t>(base[static_cast<size_t>(p)])],
                          p < size ? 1 : 0);
            } else {
              // Every sample at least once; the extra copies are exactly the pad positions'
              // samples.
              std::vector<int64_t> extra(static_cast<size_t>(n), 0);
              for (int64_t p = n; p < size; ++p)
                ++extra[static_cast<size_t>(merged[static_cast<size_t>(p)])];
              for (int64_t id = 0; id < n; ++id)
                ASSERT_EQ(seen[static_cast<size_t>(id)], 1 + extra[static_cast<size_t>(id)]);
            }
          }
        }
      }
    }
  }
}

TEST(Order, ResumeWithAnotherWorldSizeContinuesTheSequence) {
  std::mt19937_64 rng(7);
  for (const Layout& layout : layouts()) {
    for (const Config& cfg : configs()) {
      for (const PadPolicy pad : {PadPolicy::Pad, PadPolicy::Drop}) {
        OrderOptions opt;
        opt.seed = 99;
        opt.shuffle = cfg.mode;
        opt.block_size = cfg.block_size;
        opt.pad = pad;
        const SampleOrder order(layout.sizes, opt);
        SCOPED_TRACE(std::string(layout.name) + " " + order.describe());
        for (int trial = 0; trial < 12; ++trial) {
          const int before = 1 + static_cast<int>(rng() % 8);
          const int after = 1 + static_cast<int>(rng() % 8);
          const int64_t epoch = static_cast<int64_t>(rng() % 4);
          // The uninterrupted run with `before` ranks; the interrupted one stops after `consumed`
          // positions (a multiple of a global batch or not) and resumes with `after` ranks.
          const int64_t end_before = order.epoch_size(before);
          const int64_t consumed =
              static_cast<int64_t>(rng() % static_cast<uint64_t>(end_before + 1));
          const int64_t end_after = order.epoch_size(after);
          if (consumed > end_after) continue;  // Drop with more ranks: nothing left to resume
          std::vector<int64_t> resumed(static_cast<size_t>(end_after - consumed), -1);
          for (int rank = 0; rank < after; ++rank) {
            const int64_t count = order.rank_size(after, rank, consumed);
            for (int64_t i = 0; i < count; ++i)
              resumed[static_cast<size_t>(rank + i * after)] =
                  order.rank_at(epoch, after, rank, i, consumed);
          }
          // The uninterrupted run's remainder, position by position, read through its own ranks.
          const int64_t common = std::min(end_before, end_after);
          for (int64_t p = consumed; p < common; ++p) {
            const int rank = static_cast<int>(p % before);
            const int64_t i = p / before;
            ASSERT_EQ(resumed[static_cast<size_t>(p - consumed)],
                      order.rank_at(epoch, before, rank, i))
                << "position " << p << " resumed at " << consumed << " from world " << before
                << " to " << after;
          }
          for (int64_t p = consumed; p < end_after; ++p)
            ASSERT_EQ(resumed[static_cast<size_t>(p - consumed)], order.at(epoch, p));
        }
      }
    }
  }
}

TEST(Order, EpochsAndSeedsChangeTheOrder) {
  const std::vector<int64_t> sizes = {300, 200, 7, 493};
  for (const ShuffleMode mode : {ShuffleMode::Block, ShuffleMode::Global}) {
    OrderOptions opt;
    opt.shuffle = mode;
    opt.block_size = 128;
    opt.seed = 1;
    const SampleOrder a(sizes, opt);
    const SampleOrder a2(sizes, opt);
    opt.seed = 2;
    const SampleOrder b(sizes, opt);
    const int64_t n = a.samples();
    EXPECT_EQ(epoch_order(a, 0, n), epoch_order(a2, 0, n));
    EXPECT_EQ(epoch_order(a, 3, n), epoch_order(a2, 3, n));
    EXPECT_NE(epoch_order(a, 0, n), epoch_order(a, 1, n));
    EXPECT_NE(epoch_order(a, 0, n), epoch_order(b, 0, n));
    EXPECT_NE(epoch_order(a, 1, n), epoch_order(b, 1, n));
    // Going back to an earlier epoch (the cache holds one) gives the same order again.
    const auto first = epoch_order(a, 0, n);
    (void)epoch_order(a, 1, n);
    EXPECT_EQ(epoch_order(a, 0, n), first);
  }
  // Block mode also permutes the shards themselves: the first sample's shard varies over epochs.
  OrderOptions opt;
  opt.block_size = 4;
  const SampleOrder order(std::vector<int64_t>(20, 10), opt);
  std::set<int64_t> first_shards;
  for (int64_t epoch = 0; epoch < 20; ++epoch) first_shards.insert(order.at(epoch, 0) / 10);
  EXPECT_GE(first_shards.size(), 8u);
}

TEST(Order, FillEqualsAt) {
  std::mt19937_64 rng(3);
  for (const Config& cfg : configs()) {
    for (const PadPolicy pad : {PadPolicy::Pad, PadPolicy::Drop}) {
      OrderOptions opt;
      opt.seed = 5;
      opt.shuffle = cfg.mode;
      opt.block_size = cfg.block_size;
      opt.pad = pad;
      const SampleOrder order({7, 100, 1, 33, 0, 50}, opt);
      const int64_t n = order.samples();
      for (int trial = 0; trial < 50; ++trial) {
        const int64_t epoch = static_cast<int64_t>(rng() % 3);
        const int64_t stride = 1 + static_cast<int64_t>(rng() % 9);
        const int64_t limit = pad == PadPolicy::Pad ? n + 8 : n;  // include pad positions
        const int64_t first = static_cast<int64_t>(rng() % static_cast<uint64_t>(limit));
        const int64_t count = (limit - 1 - first) / stride + 1;
        std::vector<int64_t> out(static_cast<size_t>(count));
        order.fill(epoch, first, stride, count, out.data());
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(out[static_cast<size_t>(i)], order.at(epoch, first + i * stride));
      }
      order.fill(0, 0, 1, 0, nullptr);  // nothing to do
    }
  }
}

TEST(Order, ConcurrentEpochsAgree) {
  OrderOptions opt;
  opt.block_size = 64;
  const SampleOrder order({500, 300, 1000, 12}, opt);
  const int64_t n = order.samples();
  std::vector<std::vector<int64_t>> expected;
  for (int64_t epoch = 0; epoch < 4; ++epoch) expected.push_back(epoch_order(order, epoch, n));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const int64_t epoch = (t + round) % 4;
        for (int64_t p = 0; p < n; p += 7)
          if (order.at(epoch, p) != expected[static_cast<size_t>(epoch)][static_cast<size_t>(p)])
            ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Order, BlockModeTouchesFewShards) {
  const int64_t shard = 1000, shards = 100, block = 4096;
  OrderOptions opt;
  opt.block_size = block;
  opt.seed = 11;
  const SampleOrder order(std::vector<int64_t>(shards, shard), opt);
  const int64_t n = order.samples();
  // A block (the unit a reader works through) touches at most block/shard + 2 shards.
  const int64_t block_bound = block / shard + 2;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t first = 0; first < n; first += block) {
      const int64_t count = std::min(block, n - first);
      EXPECT_LE(order.shards_touched(epoch, first, count), block_bound) << "block at " << first;
    }
    // A window straddling two blocks holds samples of both blocks' shards: at most twice that.
    for (int64_t first = 1000; first + block <= n; first += 2777)
      EXPECT_LE(order.shards_touched(epoch, first, block), 2 * block_bound)
          << "window at " << first;
  }
  // Global shuffling has no locality: a window of the same size touches most shards.
  opt.shuffle = ShuffleMode::Global;
  const SampleOrder global(std::vector<int64_t>(shards, shard), opt);
  EXPECT_GT(global.shards_touched(0, 0, block), 90);
  // And the block mode still mixes samples inside a block: not in file order.
  int64_t in_order = 0;
  for (int64_t p = 1; p < block; ++p) in_order += order.at(0, p) == order.at(0, p - 1) + 1;
  EXPECT_LT(in_order, block / 10);
}

TEST(Order, BillionSamplesWithoutPerSampleMemory) {
  const std::vector<int64_t> sizes(10000, 100000);  // 10^9 samples
  for (const ShuffleMode mode : {ShuffleMode::Block, ShuffleMode::Global}) {
    OrderOptions opt;
    opt.shuffle = mode;
    opt.seed = 2024;
    const SampleOrder order(sizes, opt);
    ASSERT_EQ(order.samples(), 1000000000);
    const auto start = std::chrono::steady_clock::now();
    std::set<int64_t> ids;
    const int64_t positions[] = {0, 1, 2, 262143, 262144, 123456789, 500000000, 999999999};
    for (const int64_t p : positions) {
      const int64_t id = order.at(3, p);
      EXPECT_GE(id, 0);
      EXPECT_LT(id, order.samples());
      ids.insert(id);
    }
    EXPECT_EQ(ids.size(), std::size(positions));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 1.0) << order.describe();
    EXPECT_EQ(order.epoch_size(7), 1000000001);  // 10^9 = 7 * 142857142 + 6
    EXPECT_EQ(order.rank_size(7, 0, 999999990), 2);
  }
}

TEST(Order, FirstSampleIsRoughlyUniformOverSeeds) {
  std::vector<int> count(10, 0);
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    OrderOptions opt;
    opt.shuffle = ShuffleMode::Global;
    opt.seed = seed;
    const SampleOrder order({10}, opt);
    ++count[static_cast<size_t>(order.at(0, 0))];
  }
  for (int id = 0; id < 10; ++id) {
    EXPECT_GE(count[static_cast<size_t>(id)], 150) << "id " << id;
    EXPECT_LE(count[static_cast<size_t>(id)], 250) << "id " << id;
  }
}

TEST(Order, EmptyDataset) {
  for (const PadPolicy pad : {PadPolicy::Pad, PadPolicy::Drop}) {
    OrderOptions opt;
    opt.pad = pad;
    const SampleOrder order({0, 0}, opt);
    EXPECT_EQ(order.samples(), 0);
    EXPECT_EQ(order.epoch_size(4), 0);
    EXPECT_EQ(order.rank_size(4, 3), 0);
    EXPECT_CONTAINS(error_of<IndexError>([&] { order.at(0, 0); }), "no samples");
    const SampleOrder none({}, opt);
    EXPECT_EQ(none.epoch_size(1), 0);
  }
}

TEST(Order, MoreRanksThanSamples) {
  OrderOptions opt;
  opt.shuffle = ShuffleMode::Global;
  const SampleOrder order({3}, opt);
  EXPECT_EQ(order.epoch_size(8), 8);
  // Pad wraps repeatedly: position p reads the sample at p mod 3.
  for (int rank = 0; rank < 8; ++rank) {
    ASSERT_EQ(order.rank_size(8, rank), 1);
    EXPECT_EQ(order.rank_at(0, 8, rank, 0), order.at(0, rank % 3));
  }
  opt.pad = PadPolicy::Drop;
  const SampleOrder drop({3}, opt);
  EXPECT_EQ(drop.epoch_size(8), 0);
  EXPECT_EQ(drop.rank_size(8, 0), 0);
}

TEST(Order, Errors) {
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_shuffle_mode("blok"); }), "'blok'");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_shuffle_mode("blok"); }), "block, global, none");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_pad_policy("trim"); }), "'trim'");
  EXPECT_CONTAINS(error_of<ValueError>([] { parse_pad_policy("trim"); }), "pad, drop");
  EXPECT_EQ(parse_shuffle_mode("global"), ShuffleMode::Global);
  EXPECT_EQ(parse_pad_policy("drop"), PadPolicy::Drop);
  for (const ShuffleMode m : {ShuffleMode::None, ShuffleMode::Block, ShuffleMode::Global})
    EXPECT_EQ(parse_shuffle_mode(shuffle_mode_name(m)), m);

  EXPECT_CONTAINS(error_of<ValueError>([] {
                    SampleOrder({5, -1}, {});
                  }),
                  "shard 1 has a negative size -1");
  OrderOptions opt;
  opt.block_size = 0;
  EXPECT_CONTAINS(error_of<ValueError>([&] { SampleOrder({5}, opt); }),
                  "block_size must be at least 1");

  const SampleOrder order({5, 5}, OrderOptions{.pad = PadPolicy::Drop});
  EXPECT_CONTAINS(error_of<IndexError>([&] { order.at(0, 10); }), "position 10 is out of range");
  EXPECT_CONTAINS(error_of<IndexError>([&] { order.at(0, 10); }), "epoch of 10 samples");
  EXPECT_CONTAINS(error_of<IndexError>([&] { order.at(0, -1); }), "position -1");
  EXPECT_CONTAINS(error_of<ValueError>([&] { order.at(-1, 0); }), "epoch must be non-negative");
  EXPECT_CONTAINS(error_of<ValueError>([&] { order.epoch_size(0); }),
                  "world size must be at least 1");
  EXPECT_CONTAINS(error_of<ValueError>([&] { order.rank_size(4, 4); }), "rank 4 is out of range");
  EXPECT_CONTAINS(error_of<IndexError>([&] { order.rank_at(0, 4, 1, 2); }), "index 2");
  int64_t out[4];
  EXPECT_CONTAINS(error_of<IndexError>([&] { order.fill(0, 8, 1, 4, out); }), "position 11");
  EXPECT_CONTAINS(error_of<ValueError>([&] { order.fill(0, 1, int64_t{1} << 62, 4, out); }),
                  "overflow");
}

TEST(Order, FingerprintAndDescribe) {
  const std::vector<int64_t> sizes = {100, 200, 50};
  OrderOptions opt;
  const uint64_t base = SampleOrder(sizes, opt).fingerprint();
  EXPECT_EQ(SampleOrder(sizes, opt).fingerprint(), base);
  EXPECT_NE(SampleOrder({100, 200, 51}, opt).fingerprint(), base);
  EXPECT_NE(SampleOrder({200, 100, 50}, opt).fingerprint(), base);
  EXPECT_NE(SampleOrder({100, 200, 50, 0}, opt).fingerprint(), base);
  auto changed = [&](auto edit) {
    OrderOptions o = opt;
    edit(o);
    return SampleOrder(sizes, o).fingerprint();
  };
  EXPECT_NE(changed([](OrderOptions& o) { o.seed = 1; }), base);
  EXPECT_NE(changed([](OrderOptions& o) { o.shuffle = ShuffleMode::Global; }), base);
  EXPECT_NE(changed([](OrderOptions& o) { o.block_size = 1000; }), base);
  EXPECT_NE(changed([](OrderOptions& o) { o.pad = PadPolicy::Drop; }), base);

  EXPECT_EQ(SampleOrder(sizes, opt).describe(),
            "block shuffle (block 262144 samples, 3 shards, seed 0, pad)");
  opt.shuffle = ShuffleMode::Global;
  opt.seed = 7;
  opt.pad = PadPolicy::Drop;
  EXPECT_EQ(SampleOrder(sizes, opt).describe(), "global shuffle (350 samples, seed 7, drop)");
  opt.shuffle = ShuffleMode::None;
  EXPECT_EQ(SampleOrder(sizes, opt).describe(), "file order (350 samples, 3 shards, drop)");
}

}  // namespace
}  // namespace loom::data
