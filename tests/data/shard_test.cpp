// The shard format on good input: CRC32C, round trips of every column type (with and without
// zstd, across several shards), alignment, the index, locate/decode, verify, and the writer's
// argument checks.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "data/shard_test_util.h"
#include "loom/data/shard.h"
#include "loom/error.h"
#include "loom/json.h"
#include "test_errors.h"

namespace loom::data {
namespace {

using loom::testing::error_of;
using testing::make_samples;
using testing::read_bytes;
using testing::read_header;
using testing::TempDir;
using testing::write_dataset;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::string zeros(32, '\0'), ones(32, '\xFF'), up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113FDB5Cu);
}

TEST(Crc32c, IncrementalEqualsWhole) {
  std::mt19937_64 rng(7);
  std::string data(1000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {  // every alignment of the first byte
    const char* p = data.data() + start;
    const size_t n = data.size() - start;
    const uint32_t whole = crc32c(p, n);
    for (size_t cut = 0; cut <= n; cut += (cut < 20 ? 1 : 37)) {
      EXPECT_EQ(crc32c(p + cut, n - cut, crc32c(p, cut)), whole) << start << " " << cut;
    }
  }
}

class ShardRoundTrip : public ::testing::TestWithParam<int> {};  // zstd level

TEST_P(ShardRoundTrip, EveryColumnTypeAcrossShards) {
  TempDir dir;
  const auto samples = make_samples(300, 11);
  ShardWriterOptions opt;
  opt.shard_bytes = 24 << 10;
  opt.zstd_level = GetParam();
  opt.source = "unit test";
  ASSERT_EQ(write_dataset(dir.path(), samples, opt), 300);

  ShardReader r(dir.path());
  EXPECT_EQ(r.size(), 300);
  EXPECT_EQ(r.compressed(), GetParam() > 0);
  EXPECT_TRUE(r.schema() == testing::test_schema());
  ASSERT_GE(r.shards().size(), 3u);
  int64_t first = 0;
  for (const ShardInfo& s : r.shards()) {
    EXPECT_EQ(s.first, first);
    EXPECT_GT(s.samples, 0);
    first += s.samples;
  }
  std::string buffer, scratch;
  for (int64_t i = 0; i < r.size(); ++i) {
    SampleView v = r.read(i, buffer, scratch);
    ASSERT_EQ(testing::mismatch(v, samples[i]), "") << "sample " << i;
  }
  // Random access in any order.
  for (int64_t i : {299, 0, 150, 1, 298}) {
    ASSERT_EQ(testing::mismatch(r.read(i, buffer, scratch), samples[i]), "") << i;
  }
  r.verify();
}

INSTANTIATE_TEST_SUITE_P(Compression, ShardRoundTrip, ::testing::Values(0, 3));

TEST(Shard, LocateDecodeEqualsRead) {
  TempDir dir;
  const auto samples = make_samples(60, 3);
  ShardWriterOptions opt;
  opt.shard_bytes = 16 << 10;
  opt.zstd_level = 1;
  write_dataset(dir.path(), samples, opt);
  ShardReader r(dir.path());
  std::string buffer, scratch, stored, scratch2;
  for (int64_t i = 0; i < r.size(); ++i) {
    SampleLocation loc = r.locate(i);
    EXPECT_EQ(r.shards()[loc.shard].first + loc.local, i);
    ASSERT_GE(loc.fd, 0);
    stored.resize(loc.bytes);
    ASSERT_EQ(::pread(loc.fd, stored.data(), loc.bytes, static_cast<off_t>(loc.offset)),
              static_cast<ssize_t>(loc.bytes));
    EXPECT_EQ(crc32c(stored.data(), stored.size()), loc.crc32c);
    SampleView a = r.decode(loc, stored.data(), scratch2);
    SampleView b = r.read(i, buffer, scratch);
    ASSERT_EQ(a.columns(), b.columns());
    for (size_t c = 0; c < a.columns(); ++c) EXPECT_EQ(a.bytes(c), b.bytes(c)) << i << " " << c;
    EXPECT_EQ(testing::mismatch(a, samples[i]), "");
  }
  EXPECT_THROW(r.locate(-1), IndexError);
  EXPECT_THROW(r.locate(r.size()), IndexError);
}

TEST(Shard, Alignment) {
  for (size_t align : {size_t{8}, size_t{64}, size_t{512}}) {
    TempDir dir;
    ShardWriterOptions opt;
    opt.shard_bytes = 20 << 10;
    opt.sample_align = align;
    write_dataset(dir.path(), make_samples(80, 5), opt);
    ShardReader r(dir.path());
    ASSERT_GE(r.shards().size(), 2u);
    for (size_t s = 0; s < r.shards().size(); ++s) {
      const std::string path = r.shard_path(static_cast<int>(s));
      const auto h = read_header(path);
      const uint64_t size = std::filesystem::file_size(path);
      EXPECT_EQ(h.version, kShardVersion);
      EXPECT_EQ(h.table_offset % kShardAlign, 0u) << path;
      EXPECT_EQ(h.data_offset % kShardAlign, 0u) << path;
      EXPECT_EQ(size % kShardAlign, 0u) << path;
      EXPECT_EQ(h.file_size, size);
      EXPECT_EQ(h.samples, static_cast<uint64_t>(r.shards()[s].samples));
      EXPECT_EQ(h.reserved, 0u);
      EXPECT_LE(h.data_offset, h.table_offset);
      EXPECT_LE(h.table_offset + 16 * h.samples, size);
      EXPECT_LE(size, opt.shard_bytes)
          << "a shard with more than one sample stays under shard_bytes";
    }
    for (int64_t i = 0; i < r.size(); ++i) {
      SampleLocation loc = r.locate(i);
      EXPECT_EQ(loc.offset % align, 0u) << "sample " << i << " align " << align;
    }
  }
}

TEST(Shard, IndexContents) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.shard_bytes = 16 << 10;
  opt.zstd_level = 2;
  opt.source = "fashion-mnist train";
  write_dataset(dir.path(), make_samples(50, 9), opt);
  Json index = Json::parse(read_bytes(dir / "index.json"), "index.json");
  EXPECT_EQ(index.at("format").as_string(), "loom-shards");
  EXPECT_EQ(index.at("version").as_int(), 1);
  EXPECT_EQ(index.at("samples").as_int(), 50);
  EXPECT_EQ(index.at("compression").as_string(), "zstd");
  EXPECT_EQ(index.at("source").as_string(), "fashion-mnist train");
  EXPECT_EQ(index.at("schema"), testing::test_schema().to_json());
  const Json& shards = index.at("shards");
  ASSERT_GE(shards.size(), 2u);
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const Json& s = shards.at(i);
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05zu.lsh", i);
    EXPECT_EQ(s.at("file").as_string(), name);
    const std::string bytes = read_bytes(dir / name);
    EXPECT_EQ(s.at("bytes").as_int(), static_cast<int64_t>(bytes.size()));
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08x", crc32c(bytes.data(), bytes.size()));
    EXPECT_EQ(s.at("crc32c").as_string(), crc) << name;
    total += s.at("samples").as_int();
  }
  EXPECT_EQ(total, 50);
  // Nothing else is left in the directory: no temporaries.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, shards.size() + 1);
}

TEST(Shard, VerifyReportsProgress) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.shard_bytes = 16 << 10;
  write_dataset(dir.path(), make_samples(40, 2), opt);
  ShardReader r(dir.path());
  struct Seen {
    uint64_t done = 0, total = 0;
    int calls = 0;
  } seen;
  r.verify(
      [](uint64_t done, uint64_t total, void* ctx) {
        auto* s = static_cast<Seen*>(ctx);
        EXPECT_GE(done, s->done);
        s->done = done;
        s->total = total;
        ++s->calls;
      },
      &seen);
  uint64_t total = 0;
  for (const auto& s : r.shards()) total += s.bytes;
  EXPECT_EQ(seen.total, total);
  EXPECT_EQ(seen.done, total);
  EXPECT_GE(seen.calls, 2);
}

TEST(Shard, ConcurrentReadsLoadTablesOnce) {
  TempDir dir;
  const auto samples = make_samples(200, 4);
  ShardWriterOptions opt;
  opt.shard_bytes = 16 << 10;
  write_dataset(dir.path(), samples, opt);
  ShardReader r(dir.path());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string buffer, scratch;
      for (int64_t k = 0; k < r.size(); ++k) {
        const int64_t i = (k * 7 + t * 13) % r.size();
        if (!testing::mismatch(r.read(i, buffer, scratch), samples[i]).empty()) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Shard, EmptyDataset) {
  TempDir dir;
  ShardWriter w(dir.path(), testing::test_schema());
  EXPECT_EQ(w.finish(), 0);
  ShardReader r(dir.path());
  EXPECT_EQ(r.size(), 0);
  EXPECT_TRUE(r.shards().empty());
  r.verify();
  EXPECT_THROW(r.locate(0), IndexError);
}

TEST(Shard, SingleHugeSampleGetsItsOwnShard) {
  TempDir dir;
  Schema s;
  s.columns.push_back(testing::plain_column("data", ColumnType::Bytes));
  ShardWriterOptions opt;
  opt.shard_bytes = 8192;
  ShardWriter w(dir.path(), s, opt);
  std::string big(50000, 'x'), small(10, 'y');
  w.add({Value::of_bytes(small)});
  w.add({Value::of_bytes(big)});
  w.add({Value::of_bytes(small)});
  EXPECT_GT(w.bytes_written(), 50000u);
  w.finish();
  ShardReader r(dir.path());
  ASSERT_EQ(r.shards().size(), 3u);
  std::string buffer, scratch;
  EXPECT_EQ(r.read(1, buffer, scratch).bytes(0), big);
  EXPECT_EQ(r.read(2, buffer, scratch).bytes(0), small);
  r.verify();
}

TEST(Shard, WriterWithoutFinishLeavesNothing) {
  TempDir dir;
  {
    ShardWriterOptions opt;
    opt.shard_bytes = 8192;
    ShardWriter w(dir / "ds", testing::test_schema(), opt);
    for (const auto& s : make_samples(30, 1)) w.add(testing::values_of(s));
    EXPECT_EQ(w.samples(), 30);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir / "ds"));
}

TEST(Shard, RewriteReplacesOldShards) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.shard_bytes = 20 << 10;
  write_dataset(dir.path(), make_samples(60, 1), opt);
  const size_t before = ShardReader(dir.path()).shards().size();
  ASSERT_GE(before, 3u);
  const auto fewer = make_samples(5, 2);
  write_dataset(dir.path(), fewer, opt);
  ShardReader r(dir.path());
  EXPECT_LT(r.shards().size(), before);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += !e.path().empty();
  EXPECT_EQ(files, r.shards().size() + 1) << "stale shards of the first dataset are removed";
  char stale[32];
  std::snprintf(stale, sizeof(stale), "shard-%05zu.lsh", r.shards().size());
  EXPECT_FALSE(std::filesystem::exists(dir / stale));
  EXPECT_EQ(r.size(), 5);
  std::string buffer, scratch;
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(testing::mismatch(r.read(i, buffer, scratch), fewer[i]), "");
  r.verify();
}

TEST(Schema, JsonRoundTripAndLookup) {
  const Schema s = testing::test_schema();
  EXPECT_TRUE(Schema::from_json(s.to_json(), "test") == s);
  EXPECT_EQ(s.index_of("feat"), 4u);
  const std::string msg = error_of<ValueError>([&] { s.index_of("nope"); });
  EXPECT_CONTAINS(msg, "nope");
  EXPECT_CONTAINS(msg, "key, label, blob, image, feat, var, half, scalar");
  Schema other = s;
  other.columns[4].shape = {-1, 4};
  EXPECT_FALSE(other == s);
  EXPECT_STREQ(column_type_name(ColumnType::Tensor), "tensor");
  EXPECT_THROW(Schema::from_json(Json::parse("{\"columns\": [{\"name\": \"a\"}]}", "t"), "t"),
               DataError);
  EXPECT_THROW(Schema::from_json(Json::parse("{\"columns\": []}", "t"), "t"), DataError);
}

TEST(ShardWriter, ValueMismatchesAreValueErrors) {
  TempDir dir;
  ShardWriter w(dir.path(), testing::test_schema());
  const auto samples = make_samples(2, 1);
  w.add(testing::values_of(samples[0]));  // sample 0 is fine

  auto values = testing::values_of(samples[1]);
  values.pop_back();
  std::string msg = error_of<ValueError>([&] { w.add(values); });
  EXPECT_CONTAINS(msg, "sample 1");
  EXPECT_CONTAINS(msg, "7 values");

  values = testing::values_of(samples[1]);
  values[1] = Value::of_string("nine");
  msg = error_of<ValueError>([&] { w.add(values); });
  EXPECT_CONTAINS(msg, "sample 1 column \"label\"");
  EXPECT_CONTAINS(msg, "expected a int value but got a string value");

  std::vector<float> data(20);
  values = testing::values_of(samples[1]);
  values[3] = Value::of_tensor(DType::Float32, {4, 5}, data.data());
  msg = error_of<ValueError>([&] { w.add(values); });
  EXPECT_CONTAINS(msg, "column \"image\"");
  EXPECT_CONTAINS(msg, "float32");

  values[3] = Value::of_tensor(DType::UInt8, {5, 4}, data.data());
  msg = error_of<ValueError>([&] { w.add(values); });
  EXPECT_CONTAINS(msg, "sample 1 column \"image\"");
  EXPECT_CONTAINS(msg, "[5, 4]");

  values[3] = Value::of_tensor(DType::UInt8, {4, 5}, nullptr);
  EXPECT_CONTAINS(error_of<ValueError>([&] { w.add(values); }), "null");

  values = testing::values_of(samples[1]);
  values[4] = Value::of_tensor(DType::Float32, {-2, 3}, data.data());
  EXPECT_CONTAINS(error_of<ValueError>([&] { w.add(values); }), "column \"feat\"");

  values = testing::values_of(samples[1]);
  values[7] = Value::of_tensor(DType::Float64, {1}, data.data());
  EXPECT_CONTAINS(error_of<ValueError>([&] { w.add(values); }), "column \"scalar\"");

  // The failures left the writer usable.
  w.add(testing::values_of(samples[1]));
  EXPECT_EQ(w.finish(), 2);
  EXPECT_THROW(w.add(testing::values_of(samples[1])), ValueError);
}

TEST(ShardWriter, BadOptionsAndSchemas) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.sample_align = 48;
  EXPECT_CONTAINS(
      error_of<ValueError>([&] { ShardWriter(dir.path(), testing::test_schema(), opt); }),
      "sample_align");
  opt = {};
  opt.zstd_level = 25;
  EXPECT_CONTAINS(
      error_of<ValueError>([&] { ShardWriter(dir.path(), testing::test_schema(), opt); }),
      "zstd_level");
  Schema dup;
  dup.columns.push_back(testing::plain_column("a", ColumnType::Int));
  dup.columns.push_back(testing::plain_column("a", ColumnType::Bytes));
  EXPECT_CONTAINS(error_of<ValueError>([&] { ShardWriter(dir.path(), dup); }), "\"a\"");
  EXPECT_THROW(ShardWriter(dir.path(), Schema{}), ValueError);
}

}  // namespace
}  // namespace loom::data
