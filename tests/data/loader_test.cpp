// The loader: coverage and order for many world sizes and worker counts, exact resume across world
// sizes, error propagation, early exit, I/O engines and transforms.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "loom/cuda.h"
#include "loom/data/loader.h"
#include "loom/data/shard.h"
#include "loom/error.h"
#include "temp_dir.h"
#include "test_errors.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

// A dataset whose sample i holds id = i (Int), a uint8 [4, 4] image with pixel (y, x) = i + 4y + x,
// and a float32 [3] vector (i, 2i, 3i). Several shards of uneven sizes (a new shard every ~1 KiB).
struct TestData {
  loom::testing::TempDir tmp{"loom-loader"};
  std::string dir = tmp.path();
  int64_t n;
  TestData(int64_t samples, int zstd = 0, size_t shard_bytes = 2048) : n(samples) {
    Schema schema;
    schema.columns.push_back(Column{"id", ColumnType::Int, DType::Int64, {}});
    schema.columns.push_back(Column{"img", ColumnType::Tensor, DType::UInt8, {4, 4}});
    schema.columns.push_back(Column{"vec", ColumnType::Tensor, DType::Float32, {3}});
    ShardWriterOptions o;
    o.shard_bytes = shard_bytes;
    o.zstd_level = zstd;
    ShardWriter w(dir, schema, o);
    for (int64_t i = 0; i < n; ++i) {
      uint8_t img[16];
      for (int k = 0; k < 16; ++k) img[k] = static_cast<uint8_t>(i + k);
      float v[3] = {static_cast<float>(i), static_cast<float>(2 * i), static_cast<float>(3 * i)};
      w.add({Value::of_int(i), Value::of_tensor(DType::UInt8, {4, 4}, img),
             Value::of_tensor(DType::Float32, {3}, v)});
    }
    w.finish();
  }
  std::shared_ptr<const ShardReader> open() const { return std::make_shared<ShardReader>(dir); }
};

// Checks that every row of `b` holds the sample its id says, and returns the ids.
std::vector<int64_t> check_rows(const Batch& b) {
  const Tensor& id = b["id"];
  const Tensor& img = b["img"];
  const Tensor& vec = b["vec"];
  EXPECT_EQ(id.size(0), b.size());
  for (int64_t r = 0; r < b.size(); ++r) {
    const int64_t i = b.ids[static_cast<size_t>(r)];
    EXPECT_EQ(id.data_ptr<int64_t>()[r], i);
    EXPECT_EQ(img.data_ptr<uint8_t>()[r * 16 + 5], static_cast<uint8_t>(i + 5));
    EXPECT_EQ(vec.data_ptr<float>()[r * 3 + 2], static_cast<float>(3 * i));
  }
  return b.ids;
}

// The sequence of global ids rank `rank` of `world` reads in `epoch`, from position `start`.
std::vector<int64_t> rank_sequence(std::shared_ptr<const ShardReader> ds, LoaderOptions o,
                                   int64_t epoch) {
  Loader l(ds, o);
  l.set_epoch(epoch);
  std::vector<int64_t> out;
  while (auto b = l.next()) {
    auto ids = check_rows(*b);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

// Interleaves rank sequences back into global position order (rank r holds positions r + kW).
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& ranks) {
  std::vector<int64_t> g;
  const size_t w = ranks.size();
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (size_t r = 0; r < w; ++r) {
      if (k < ranks[r].size()) {
        g.push_back(ranks[r][k]);
        any = true;
      }
    }
    if (!any) break;
  }
  return g;
}

TEST(Loader, EveryWorldAndWorkerCountSeesEachSampleOnceInOneOrder) {
  TestData data(203);
  auto ds = data.open();
  ASSERT_GT(ds->shards().size(), 3u);
  for (PadPolicy pad : {PadPolicy::Pad, PadPolicy::Drop}) {
    std::vector<int64_t> reference;
    for (int world = 1; world <= 8; ++world) {
      for (int workers : {0, 1, 3}) {
        std::vector<std::vector<int64_t>> ranks;
        for (int r = 0; r < world; ++r) {
          LoaderOptions o;
          o.batch_size = 5;
          o.world = world;
          o.rank = r;
          o.workers = workers;
          o.order.seed = 42;
          o.order.block_size = 64;
          o.order.pad = pad;
          ranks.push_back(rank_sequence(ds, o, 3));
        }
        std::vector<int64_t> g = interleave(ranks);
        const int64_t n = data.n;
        const int64_t expect =
            pad == PadPolicy::Pad ? (n + world - 1) / world * world : n / world * world;
        ASSERT_EQ(static_cast<int64_t>(g.size()), expect)
            << "world " << world << " workers " << workers;
        // The first min(n, size) positions are distinct samples, and the same sequence for every
        // world size and worker count; padding repeats the order from its start.
        std::vector<int64_t> head(g.begin(), g.begin() + std::min<int64_t>(n, expect));
        std::vector<int64_t> sorted = head;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        for (int64_t p = n; p < expect; ++p)
          EXPECT_EQ(g[static_cast<size_t>(p)], g[static_cast<size_t>(p - n)]);
        if (reference.empty()) {
          // world 1 under Pad sees all n samples
          reference = head;
          if (pad == PadPolicy::Pad) {
            ASSERT_EQ(static_cast<int64_t>(sorted.size()), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
          }
        }
        ASSERT_TRUE(std::equal(head.begin(), head.end(), reference.begin()))
            << "world " << world << " workers " << workers << " changed the order";
      }
    }
  }
}

TEST(Loader, EpochsAndSeedsGiveDifferentOrders) {
  TestData data(100);
  auto ds = data.open();
  LoaderOptions o;
  o.batch_size = 10;
  o.order.block_size = 1000;
  auto e0 = rank_sequence(ds, o, 0), e1 = rank_sequence(ds, o, 1), e0b = rank_sequence(ds, o, 0);
  o.order.seed = 7;
  auto s7 = rank_sequence(ds, o, 0);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, s7);
}

// Consume k batches with (world, workers), save the state, resume with (world2, workers2) and the
// same global batch; the global sequence must equal the uninterrupted one.
TEST(Loader, ResumeAtRandomPointsAcrossWorldSizesReproducesTheSequence) {
  TestData data(157, /*zstd=*/3);
  auto ds = data.open();
  const int64_t global_batch = 12;
  LoaderOptions base;
  base.order.seed = 9;
  base.order.block_size = 50;
  auto opts = [&](int world, int rank, int workers) {
    LoaderOptions o = base;
    o.world = world;
    o.rank = rank;
    o.workers = workers;
    o.prefetch = 3;
    o.batch_size = global_batch / world;
    return o;
  };
  const int64_t epoch = 2;
  std::vector<int64_t> uninterrupted = rank_sequence(ds, opts(1, 0, 0), epoch);
  std::mt19937 rng(1234);
  const int worlds[] = {1, 2, 3, 4, 6};
  for (int trial = 0; trial < 12; ++trial) {
    const int w1 = worlds[rng() % 5], w2 = worlds[rng() % 5];
    const int k1 = static_cast<int>(rng() % 3), k2 = static_cast<int>(rng() % 3);
    const int64_t steps = static_cast<int64_t>(rng() % 14);
    // Part 1: every rank takes `steps` batches (workers prefetch more than that meanwhile).
    std::vector<std::vector<int64_t>> part1(static_cast<size_t>(w1));
    LoaderState state;
    for (int r = 0; r < w1; ++r) {
      Loader l(ds, opts(w1, r, k1));
      l.set_epoch(epoch);
      for (int64_t s = 0; s < steps; ++s) {
        auto b = l.next();
        if (!b) break;
        auto ids = check_rows(*b);
        part1[static_cast<size_t>(r)].insert(part1[static_cast<size_t>(r)].end(), ids.begin(),
                                             ids.end());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let workers run ahead
      LoaderState s = l.state();
      if (r == 0) state = s;
      EXPECT_EQ(s.consumed, state.consumed) << "ranks disagree on the resume point";
    }
    // Part 2 with another world size and worker count, from the JSON form of the state.
    LoaderState loaded = LoaderState::from_json(Json::parse(state.to_json().dump(), "state"));
    std::vector<std::vector<int64_t>> part2(static_cast<size_t>(w2));
    for (int r = 0; r < w2; ++r) {
      Loader l(ds, opts(w2, r, k2));
      l.load_state(loaded);
      while (auto b = l.next()) {
        auto ids = check_rows(*b);
        part2[static_cast<size_t>(r)].insert(part2[static_cast<size_t>(r)].end(), ids.begin(),
                                             ids.end());
      }
    }
    std::vector<int64_t> g = interleave(part1), tail = interleave(part2);
    g.insert(g.end(), tail.begin(), tail.end());
    // Padding differs with the world size; compare the real samples.
    g.resize(std::min(g.size(), static_cast<size_t>(data.n)));
    ASSERT_EQ(g, uninterrupted) << "trial " << trial << ": world " << w1 << "x" << k1 << " -> "
                                << w2 << "x" << k2 << " after " << steps << " steps (consumed "
                                << state.consumed << ")";
  }
}

TEST(Loader, StateIsCheckedAgainstTheConfiguration) {
  TestData data(40);
  auto ds = data.open();
  LoaderOptions o;
  o.batch_size = 4;
  Loader a(ds, o);
  a.next();
  LoaderState s = a.state();
  EXPECT_EQ(s.consumed, 4);
  o.batch_size = 8;  // another global batch
  Loader b(ds, o);
  EXPECT_THROW(b.load_state(s), ValueError);
  o.batch_size = 4;
  o.order.seed = 1;
  Loader c(ds, o);
  EXPECT_THROW(c.load_state(s), ValueError);
  EXPECT_THROW(LoaderState::from_json(Json::parse("{\"epoch\": 1}", "state")), DataError);
}

// A state past the end of the epoch was clamped to the end (so a resumed run silently skipped the
// rest of the epoch); it is an error naming the position and the epoch's size.
TEST(Loader, StatePastTheEndOfTheEpochIsRefused) {
  TestData data(40);
  auto ds = data.open();
  LoaderOptions o;
  o.batch_size = 4;
  Loader a(ds, o);
  LoaderState s = a.state();
  s.consumed = 40;  // the end itself is a valid place to stand
  a.load_state(s);
  EXPECT_FALSE(a.next().has_value());
  s.consumed = 2000;
  const std::string m = loom::testing::error_of<ValueError>([&] { a.load_state(s); });
  EXPECT_NE(
      m.find("consumed = 2000 is past the end of epoch 0, which has 40 positions for 1 rank(s)"),
      std::string::npos)
      << m;
}

TEST(Loader, BreakingOutEarlyAndKeepingBatchesNeverDeadlocks) {
  TestData data(300);
  auto ds = data.open();
  std::vector<Batch> kept;
  for (int round = 0; round < 20; ++round) {
    LoaderOptions o;
    o.batch_size = 7;
    o.workers = 3;
    o.prefetch = 1;
    Loader l(ds, o);
    auto b = l.next();
    ASSERT_TRUE(b);
    if (round % 5 == 0) kept.push_back(std::move(*b));
    if (round % 2) l.set_epoch(1);  // restart with workers mid-flight
  }
  // A consumer that keeps every batch alive: the pool grows instead of blocking.
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  o.prefetch = 1;
  Loader l(ds, o);
  while (auto b = l.next()) kept.push_back(std::move(*b));
  EXPECT_GE(l.metrics().pool.allocated, 30);
  // Batches outlive their loaders and keep their data.
  for (const Batch& b : kept) check_rows(b);
}

TEST(Loader, BuffersAreReusedWhenTheConsumerDropsBatches) {
  TestData data(500);
  auto ds = data.open();
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.prefetch = 2;
  Loader l(ds, o);
  int64_t batches = 0;
  while (auto b = l.next()) {
    check_rows(*b);
    ++batches;
  }
  LoaderMetrics m = l.metrics();
  EXPECT_EQ(m.batches, batches);
  EXPECT_EQ(m.samples, 500);
  EXPECT_LE(m.pool.allocated, 2 * 2 + 3);
  EXPECT_GT(m.pool.reused, batches / 2);
  EXPECT_GT(m.bytes_read, 0u);
}

TEST(Loader, CorruptSampleReachesTheConsumerWithShardAndSample) {
  TestData data(120);
  auto ds0 = data.open();
  // Flip one byte in the record of sample 77.
  SampleLocation loc = ds0->locate(77);
  const std::string path = ds0->shard_path(loc.shard);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(loc.offset + loc.bytes / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(loc.offset + loc.bytes / 2));
    f.write(&c, 1);
  }
  for (int workers : {0, 1, 3}) {
    auto ds = data.open();
    LoaderOptions o;
    o.batch_size = 6;
    o.workers = workers;
    o.order.shuffle = ShuffleMode::None;  // sample 77 is in batch 12
    Loader l(ds, o);
    int64_t good = 0;
    try {
      while (auto b = l.next()) {
        check_rows(*b);
        ++good;
      }
      FAIL() << "the corrupt sample was not detected";
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_EQ(good, 12) << m;
      EXPECT_NE(m.find(fs::path(path).filename().string()), std::string::npos) << m;
      EXPECT_NE(m.find("sample 77"), std::string::npos) << m;
      EXPECT_NE(m.find(std::to_string(loc.offset)), std::string::npos) << m;
    }
  }
}

TEST(Loader, IoEnginesGiveTheSameBatches) {
  TestData data(90);
  auto ds = data.open();
  std::vector<IoEngine> engines = {IoEngine::Pread, IoEngine::Mmap};
  if (uring_available()) engines.push_back(IoEngine::Uring);
  std::vector<int64_t> ref;
  for (IoEngine e : engines) {
    LoaderOptions o;
    o.batch_size = 16;
    o.workers = 2;
    o.io = e;
    auto seq = rank_sequence(ds, o, 0);
    if (ref.empty()) ref = seq;
    EXPECT_EQ(seq, ref) << io_engine_name(e);
  }
  if (!uring_available()) {
    LoaderOptions o;
    o.io = IoEngine::Uring;
    EXPECT_THROW(Loader(ds, o), NotImplementedError);
  }
}

TEST(Loader, ImageTransformNormalisesCropsAndFlipsReproducibly) {
  TestData data(64);
  auto ds = data.open();
  auto make = [&](ImageOptions io, int workers, int world, int rank) {
    LoaderOptions o;
    o.batch_size = 8 / world;
    o.world = world;
    o.rank = rank;
    o.workers = workers;
    o.fields = {image_column("img", io, "x"), copy_column("id")};
    return o;
  };
  // Plain normalisation: (v / 255 - 0.5) / 0.25.
  ImageOptions plain;
  plain.mean = {0.5};
  plain.std = {0.25};
  {
    Loader l(ds, make(plain, 0, 1, 0));
    auto b = l.next();
    const Tensor& x = (*b)["x"];
    ASSERT_EQ(x.sizes().vec(), (std::vector<int64_t>{8, 1, 4, 4}));
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t i = b->ids[static_cast<size_t>(r)];
      for (int k = 0; k < 16; ++k) {
        const double v = static_cast<double>(static_cast<uint8_t>(i + k));
        EXPECT_NEAR(x.data_ptr<float>()[r * 16 + k], (v / 255.0 - 0.5) / 0.25, 1e-5);
      }
    }
  }
  // Random crop with padding 1 and flips: each output must be the input shifted by some (dy, dx) in
  // [-1, 1]^2 and mirrored or not, padding reading as 0; and the same sample at the same position
  // gets the same augmentation whatever the worker count and world size.
  ImageOptions aug = plain;
  aug.crop_h = aug.crop_w = 4;
  aug.padding = 1;
  aug.random_crop = true;
  aug.flip_p = 0.5;
  std::map<int64_t, std::vector<float>> first;
  int flipped = 0, shifted = 0;
  for (auto [workers, world] : {std::pair{0, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
    for (int rank = 0; rank < world; ++rank) {
      Loader l(ds, make(aug, workers, world, rank));
      while (auto b = l.next()) {
        const Tensor& x = (*b)["x"];
        for (int64_t r = 0; r < b->size(); ++r) {
          const int64_t i = b->ids[static_cast<size_t>(r)];
          std::vector<float> got(x.data_ptr<float>() + r * 16, x.data_ptr<float>() + r * 16 + 16);
          auto [it, fresh] = first.emplace(i, got);
          EXPECT_EQ(it->second, got) << "sample " << i << " augmented differently";
          if (!fresh) continue;
          bool found = false;
          for (int dy = -1; dy <= 1 && !found; ++dy) {
            for (int dx = -1; dx <= 1 && !found; ++dx) {
              for (int flip = 0; flip < 2 && !found; ++flip) {
                bool ok = true;
                for (int y = 0; y < 4 && ok; ++y) {
                  for (int xx = 0; xx < 4 && ok; ++xx) {
                    const int sx = (flip ? 3 - xx : xx) + dx, sy = y + dy;
                    const double v =
                        (sy < 0 || sy > 3 || sx < 0 || sx > 3)
                            ? 0.0
                            : static_cast<double>(static_cast<uint8_t>(i + sy * 4 + sx));
                    ok = std::abs(got[static_cast<size_t>(y * 4 + xx)] - (v / 255.0 - 0.5) / 0.25) <
                         1e-5;
                  }
                }
                if (ok) {
                  found = true;
                  flipped += flip;
                  shifted += (dx != 0 || dy != 0);
                }
              }
            }
          }
          EXPECT_TRUE(found) << "sample " << i << " is not a crop/flip of its image";
        }
      }
    }
  }
  EXPECT_EQ(first.size(), 64u);
  EXPECT_GT(flipped, 10);  // p = 0.5 over 64 samples
  EXPECT_GT(shifted, 20);
}

TEST(Loader, DescribeAndBadOptions) {
  TestData data(10);
  auto ds = data.open();
  LoaderOptions o;
  o.workers = 2;
  Loader l(ds, o);
  const std::string d = l.describe();
  EXPECT_NE(d.find("10 samples"), std::string::npos) << d;
  EXPECT_NE(d.find("2 worker"), std::string::npos) << d;
  o.rank = 3;
  o.world = 2;
  EXPECT_THROW(Loader(ds, o), ValueError);
  LoaderOptions f;
  f.fields = {copy_column("nope")};
  EXPECT_THROW(Loader(ds, f), ValueError);
  // A CUDA device stage needs the backend (NotImplementedError without it) and the device
  // (ValueError naming it where none is visible); tests/cuda/cuda_data_test.cpp runs it on a GPU.
  if (!cuda::is_available()) {
    EXPECT_THROW(DeviceStage([] { return std::optional<Batch>(); }, Device(DeviceType::CUDA, 0)),
                 Error);
  }
}

}  // namespace
}  // namespace loom::data
