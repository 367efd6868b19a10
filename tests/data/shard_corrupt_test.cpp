// The shard format on bad input: every corruption is a DataError naming the shard file, the sample
// and the byte offset where they apply; a fuzz loop of random mutations never crashes the reader.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "data/shard_test_util.h"
#include "loom/data/shard.h"
#include "loom/error.h"
#include "loom/json.h"
#include "test_errors.h"

namespace loom::data {
namespace {

using loom::testing::error_of;
using testing::flip_byte;
using testing::make_samples;
using testing::read_bytes;
using testing::read_header;
using testing::TempDir;
using testing::write_bytes;
using testing::write_dataset;

// A dataset of 40 samples in several shards.
class CorruptShard : public ::testing::TestWithParam<int> {  // zstd level
 protected:
  void SetUp() override {
    samples_ = make_samples(40, 21);
    ShardWriterOptions opt;
    opt.shard_bytes = 12 << 10;
    opt.zstd_level = GetParam();
    write_dataset(dir_.path(), samples_, opt);
    ShardReader r(dir_.path());
    ASSERT_GE(r.shards().size(), 3u);
    shard1_ = r.shards()[1];
  }
  std::string path(const std::string& file) const { return dir_ / file; }
  std::string index_text() const { return read_bytes(dir_ / "index.json"); }
  // Replaces the first occurrence of `from` in index.json.
  void edit_index(const std::string& from, const std::string& to) {
    std::string text = index_text();
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_bytes(dir_ / "index.json", text);
  }
  std::string read_error(int64_t id, ShardReaderOptions opt = {}) const {
    return error_of<DataError>([&] {
      ShardReader r(dir_.path(), opt);
      std::string buffer, scratch;
      r.read(id, buffer, scratch);
    });
  }
  std::string verify_error(ShardReaderOptions opt = {}) const {
    return error_of<DataError>([&] { ShardReader(dir_.path(), opt).verify(); });
  }
  std::string open_error() const {
    return error_of<DataError>([&] { ShardReader r(dir_.path()); });
  }

  TempDir dir_;
  std::vector<testing::TestSample> samples_;
  ShardInfo shard1_;
};

TEST_P(CorruptShard, FlippedRecordByte) {
  const int64_t id = shard1_.first + 2;
  SampleLocation loc = ShardReader(dir_.path()).locate(id);
  flip_byte(path(shard1_.file), loc.offset + loc.bytes / 2);
  const std::string where = "sample 2 (dataset sample " + std::to_string(id) + ") at byte offset " +
                            std::to_string(loc.offset);
  for (const std::string& msg : {read_error(id), verify_error()}) {
    EXPECT_CONTAINS(msg, "[data.shard]");
    EXPECT_CONTAINS(msg, path(shard1_.file));
    EXPECT_CONTAINS(msg, where);
    EXPECT_CONTAINS(msg, "CRC32C");
  }
  // The other samples still read.
  ShardReader r(dir_.path());
  std::string buffer, scratch;
  EXPECT_EQ(testing::mismatch(r.read(id - 1, buffer, scratch), samples_[id - 1]), "");
  EXPECT_EQ(testing::mismatch(r.read(id + 1, buffer, scratch), samples_[id + 1]), "");
}

TEST_P(CorruptShard, FlippedTableByte) {
  const auto h = read_header(path(shard1_.file));
  flip_byte(path(shard1_.file), h.table_offset + 16 + 9);
  for (const std::string& msg : {read_error(shard1_.first), verify_error()}) {
    EXPECT_CONTAINS(msg, path(shard1_.file));
    EXPECT_CONTAINS(msg, "sample table at byte offset " + std::to_string(h.table_offset));
  }
  // Shard 0 is untouched.
  ShardReader r(dir_.path());
  std::string buffer, scratch;
  EXPECT_EQ(testing::mismatch(r.read(0, buffer, scratch), samples_[0]), "");
}

TEST_P(CorruptShard, FlippedHeaderByte) {
  flip_byte(path(shard1_.file), 20, 0x01);  // inside the sample count
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, "fails its CRC32C");
  EXPECT_CONTAINS(msg, "byte offset");
}

TEST_P(CorruptShard, FlippedSchemaByte) {
  flip_byte(path(shard1_.file), 64 + 12, 0x20);
  EXPECT_CONTAINS(open_error(), path(shard1_.file));
}

TEST_P(CorruptShard, FlippedPaddingByteFoundByVerify) {
  const auto h = read_header(path(shard1_.file));
  flip_byte(path(shard1_.file), h.data_offset - 1);  // zero padding after the schema
  ShardReader r(dir_.path());
  std::string buffer, scratch;
  for (int64_t i = 0; i < r.size(); ++i)
    ASSERT_EQ(testing::mismatch(r.read(i, buffer, scratch), samples_[i]), "") << i;
  const std::string msg = verify_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, "whole-file CRC32C");
}

TEST_P(CorruptShard, TruncatedShard) {
  const std::string file = path(shard1_.file);
  std::filesystem::resize_file(file, shard1_.bytes / 2);
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, std::to_string(shard1_.bytes / 2) + " bytes");

  // Without the size check the header still matches the index; the table, at the end, is gone.
  ShardReaderOptions lax;
  lax.check_sizes = false;
  msg = read_error(shard1_.first, lax);
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "byte offset");
  EXPECT_CONTAINS(msg, "truncated");
  EXPECT_CONTAINS(verify_error(lax), file);
}

TEST_P(CorruptShard, TruncatedInsideRecords) {
  // Keep the table readable but cut the records: move the table? Simplest: truncate a copy after
  // loading the table, which a reader holding the file open sees at once.
  ShardReaderOptions lax;
  lax.check_sizes = false;
  ShardReader r(dir_.path(), lax);
  const int64_t id = shard1_.first + shard1_.samples - 1;
  SampleLocation loc = r.locate(id);  // loads the table
  std::filesystem::resize_file(path(shard1_.file), loc.offset + 1);
  std::string buffer, scratch;
  const std::string msg = error_of<DataError>([&] { r.read(id, buffer, scratch); });
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, "sample " + std::to_string(shard1_.samples - 1) + " (dataset sample " +
                           std::to_string(id) + ") at byte offset " + std::to_string(loc.offset));
  EXPECT_CONTAINS(msg, "truncated");
}

TEST_P(CorruptShard, MissingIndex) {
  std::filesystem::remove(path("index.json"));
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, path("index.json"));
  EXPECT_CONTAINS(msg, "No such file");
}

TEST_P(CorruptShard, MissingShardFile) {
  std::filesystem::remove(path(shard1_.file));
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, "No such file");
}

TEST_P(CorruptShard, IndexSampleCountDisagrees) {
  edit_index("\"samples\": 40", "\"samples\": 41");
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, path("index.json"));
  EXPECT_CONTAINS(msg, "41");
}

TEST_P(CorruptShard, IndexShardSamplesDisagree) {
  // Move one sample from shard 1 to shard 0 in the index: the total still matches.
  const std::string s0 =
      "\"samples\": " + std::to_string(ShardReader(dir_.path()).shards()[0].samples);
  const std::string s1 = "\"samples\": " + std::to_string(shard1_.samples);
  std::string text = index_text();
  size_t shards_at = text.find("\"shards\"");
  size_t a = text.find(s0, shards_at);
  text.replace(a, s0.size(),
               "\"samples\": " + std::to_string(ShardReader(dir_.path()).shards()[0].samples + 1));
  size_t b = text.find(s1, a + s0.size() + 1);
  ASSERT_NE(b, std::string::npos);
  text.replace(b, s1.size(), "\"samples\": " + std::to_string(shard1_.samples - 1));
  write_bytes(path("index.json"), text);
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, "shard-00000.lsh");
  EXPECT_CONTAINS(msg, "samples");
}

TEST_P(CorruptShard, IndexSizeDisagrees) {
  std::string text = index_text();
  const std::string from = "\"bytes\": " + std::to_string(shard1_.bytes);
  const size_t at = text.find(from, text.find("\"" + shard1_.file + "\""));
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "\"bytes\": " + std::to_string(shard1_.bytes + 4096));
  write_bytes(path("index.json"), text);
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, std::to_string(shard1_.bytes + 4096));
}

TEST_P(CorruptShard, IndexCrcDisagrees) {
  char crc[16];
  std::snprintf(crc, sizeof(crc), "%08x", shard1_.crc32c);
  char other[16];
  std::snprintf(other, sizeof(other), "%08x", shard1_.crc32c ^ 1);
  edit_index(crc, other);
  ShardReader r(dir_.path());  // opening does not hash whole files
  const std::string msg = verify_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, other);
}

TEST_P(CorruptShard, UnknownVersion) {
  edit_index("\"version\": 1", "\"version\": 2");
  std::string msg = open_error();
  EXPECT_CONTAINS(msg, path("index.json"));
  EXPECT_CONTAINS(msg, "unknown format version 2");

  edit_index("\"version\": 2", "\"version\": 1");
  std::string bytes = read_bytes(path(shard1_.file));
  bytes[8] = 2;
  write_bytes(path(shard1_.file), bytes);
  msg = open_error();
  EXPECT_CONTAINS(msg, path(shard1_.file));
  EXPECT_CONTAINS(msg, "unknown format version 2 at byte offset 8");
}

TEST_P(CorruptShard, SchemaMismatch) {
  edit_index("\"name\": \"blob\"", "\"name\": \"blub\"");
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, "shard-00000.lsh");
  EXPECT_CONTAINS(msg, "differs from the schema in " + path("index.json"));
}

TEST_P(CorruptShard, CompressionMismatch) {
  const bool zstd = GetParam() > 0;
  edit_index(zstd ? "\"compression\": \"zstd\"" : "\"compression\": \"none\"",
             zstd ? "\"compression\": \"none\"" : "\"compression\": \"zstd\"");
  EXPECT_CONTAINS(open_error(), "compression");
}

TEST_P(CorruptShard, BadIndexJson) {
  write_bytes(path("index.json"), "{\"format\": \"loom-shards\", \"version\": 1,, }");
  const std::string msg = open_error();
  EXPECT_CONTAINS(msg, path("index.json"));
  EXPECT_CONTAINS(msg, "byte offset");
  write_bytes(path("index.json"), "{\"format\": \"tfrecord\"}");
  EXPECT_CONTAINS(open_error(), "not a loom shard index");
  edit_index("tfrecord",
             "loom-shards\", \"version\": 1, \"shards\": [{\"file\": \"../x\"}], \"x\": \"");
  EXPECT_CONTAINS(open_error(), "\"schema\"");
}

TEST_P(CorruptShard, ShardPathEscapeRejected) {
  edit_index("\"file\": \"shard-00001.lsh\"", "\"file\": \"../shard-00001.lsh\"");
  EXPECT_CONTAINS(open_error(), "inside the dataset directory");
}

INSTANTIATE_TEST_SUITE_P(Compression, CorruptShard, ::testing::Values(0, 3));

// ---- Fuzz: random mutations must give a loom::Error or correct data, never a crash ----

struct Pristine {
  std::vector<std::pair<std::string, std::string>> files;  // name, bytes
};

Pristine snapshot(const std::string& dir) {
  Pristine p;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    p.files.emplace_back(e.path().filename().string(), read_bytes(e.path().string()));
  std::sort(p.files.begin(), p.files.end());
  return p;
}

void restore(const std::string& dir, const Pristine& p) {
  for (const auto& [name, bytes] : p.files) write_bytes(dir + "/" + name, bytes);
}

// Opens, reads every sample and verifies; returns how many samples read back correctly. Fails the
// test on a wrong value or an exception that is not a loom::Error.
int exercise(const std::string& dir, const std::vector<testing::TestSample>& samples,
             bool check_sizes, const std::string& what) {
  int good = 0;
  try {
    ShardReaderOptions opt;
    opt.check_sizes = check_sizes;
    ShardReader r(dir, opt);
    std::string buffer, scratch;
    for (int64_t i = 0; i < r.size(); ++i) {
      try {
        SampleView v = r.read(i, buffer, scratch);
        if (i < static_cast<int64_t>(samples.size())) {
          std::string bad = testing::mismatch(v, samples[i]);
          EXPECT_EQ(bad, "") << what << ": sample " << i << " read back wrong";
          if (bad.empty()) ++good;
        }
      } catch (const loom::Error&) {
      }
    }
    try {
      r.verify();
    } catch (const loom::Error&) {
    }
  } catch (const loom::Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
  return good;
}

// Recomputes the header and table CRCs of a mutated shard, so that the mutation reaches the
// structural checks behind them (layout, table entries, records).
void reseal(std::string& b) {
  if (b.size() < 64) return;
  const auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  const auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  const uint64_t samples = u64(16), table_offset = u64(24);
  if (table_offset <= b.size() && samples <= (b.size() - table_offset) / 16) {
    const uint32_t crc = crc32c(b.data() + table_offset, samples * 16);
    std::memcpy(b.data() + 52, &crc, 4);
  }
  const uint32_t schema_bytes = u32(48);
  if (64 + uint64_t{schema_bytes} <= b.size()) {
    std::string head = b.substr(0, 64);
    std::memset(head.data() + 56, 0, 4);
    const uint32_t crc = crc32c(b.data() + 64, schema_bytes, crc32c(head.data(), 64));
    std::memcpy(b.data() + 56, &crc, 4);
  }
}

TEST(ShardFuzz, RandomMutationsNeverCrash) {
  std::mt19937_64 rng(12345);
  for (int zstd : {0, 1}) {
    TempDir dir;
    const auto samples = make_samples(12, 99);
    ShardWriterOptions opt;
    opt.shard_bytes = 8 << 10;
    opt.zstd_level = zstd;
    write_dataset(dir.path(), samples, opt);
    const Pristine pristine = snapshot(dir.path());
    ASSERT_GE(pristine.files.size(), 3u);
    ASSERT_EQ(exercise(dir.path(), samples, true, "pristine"), 12);

    for (int iter = 0; iter < 1000; ++iter) {
      restore(dir.path(), pristine);
      const auto& [name, original] = pristine.files[rng() % pristine.files.size()];
      std::string bytes = original;
      const int mode = static_cast<int>(rng() % 5);
      if (mode == 0) {  // flip a few random bytes
        const int flips = 1 + static_cast<int>(rng() % 8);
        for (int k = 0; k < flips && !bytes.empty(); ++k)
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
      } else if (mode == 1) {  // truncate
        bytes.resize(bytes.empty() ? 0 : rng() % bytes.size());
      } else if (mode == 2) {  // garbage of random length
        bytes.resize(rng() % 9000);
        for (auto& c : bytes) c = static_cast<char>(rng());
      } else if (mode == 3) {  // flip bits within the header and schema, where checks are densest
        for (int k = 0; k < 3 && !bytes.empty(); ++k)
          bytes[rng() % std::min<size_t>(bytes.size(), 128)] ^=
              static_cast<char>(1u << (rng() % 8));
      } else if (name != "index.json") {  // mutate header fields or the table, then fix the CRCs
        const auto h = read_header(dir / name);
        for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
          const bool in_table = rng() % 2 == 0 && h.samples > 0;
          const size_t at = in_table ? h.table_offset + rng() % (h.samples * 16) : 8 + rng() % 48;
          bytes[at] ^= static_cast<char>(rng() % 3 == 0 ? 1 + rng() % 255 : 1u << (rng() % 8));
        }
        reseal(bytes);
      }
      write_bytes(dir / name, bytes);
      const std::string what =
          "iteration " + std::to_string(iter) + " mode " + std::to_string(mode) + " file " + name;
      exercise(dir.path(), samples, rng() % 2 == 0, what);
      if (HasFailure()) return;
    }
  }
}

// Records whose CRC is made to match after mutation reach the record parser (and zstd) directly.
TEST(ShardFuzz, MutatedRecordsWithMatchingCrc) {
  std::mt19937_64 rng(777);
  for (int zstd : {0, 1}) {
    TempDir dir;
    const auto samples = make_samples(16, 5);
    ShardWriterOptions opt;
    opt.zstd_level = zstd;
    write_dataset(dir.path(), samples, opt);
    ShardReader r(dir.path());
    std::string buffer, scratch;
    int decoded = 0;
    for (int iter = 0; iter < 1500; ++iter) {
      const int64_t id = static_cast<int64_t>(rng() % samples.size());
      SampleLocation loc = r.locate(id);
      std::string stored(loc.bytes, '\0');
      ASSERT_EQ(::pread(loc.fd, stored.data(), loc.bytes, static_cast<off_t>(loc.offset)),
                static_cast<ssize_t>(loc.bytes));
      const int mode = static_cast<int>(rng() % 3);
      if (mode == 0) {
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
          stored[rng() % stored.size()] ^= static_cast<char>(1 + rng() % 255);
      } else if (mode == 1) {
        stored.resize(rng() % (stored.size() + 1));
      } else {
        stored.resize(rng() % 600);
        for (auto& c : stored) c = static_cast<char>(rng());
      }
      // A copy sized exactly, so that ASan sees any read past the end.
      std::unique_ptr<char[]> exact(new char[stored.size() + 1]);
      std::memcpy(exact.get(), stored.data(), stored.size());
      loc.bytes = static_cast<uint32_t>(stored.size());
      loc.crc32c = crc32c(exact.get(), stored.size());
      try {
        SampleView v = r.decode(loc, exact.get(), scratch);
        ++decoded;
        const char* lo = zstd ? scratch.data() : exact.get();
        const char* hi = lo + (zstd ? scratch.size() : stored.size());
        for (size_t c = 0; c < v.columns(); ++c) {
          std::string_view p = v.bytes(c);
          ASSERT_TRUE(p.empty() || (p.data() >= lo && p.data() + p.size() <= hi)) << iter;
          const Column& col = r.schema().columns[c];
          if (col.type == ColumnType::Int) (void)v.integer(c);
          if (col.type == ColumnType::Tensor) {
            auto t = v.tensor(c);
            const char* d = static_cast<const char*>(t.data);
            ASSERT_TRUE(d >= p.data() &&
                        d + t.numel() * static_cast<int64_t>(element_size(t.dtype)) <=
                            p.data() + p.size())
                << iter;
          }
        }
      } catch (const loom::Error&) {
      }
    }
    EXPECT_GT(decoded, 0) << "some mutations (inside byte payloads) decode";
  }
}

}  // namespace
}  // namespace loom::data
