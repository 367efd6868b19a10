// `pack` (loom/data/pack.h): tar shards, directories of files and IDX files into shard datasets,
// read back with ShardReader and compared with the bytes that went in; and every malformed source.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/tar_bytes.h"
#include "loom/data/pack.h"
#include "loom/data/shard.h"
#include "loom/datasets.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using loom::testing::error_of;
using loom::testing::pattern_bytes;
using loom::testing::sh;
using loom::testing::tar_end;
using loom::testing::tar_entry;
using loom::testing::tar_header;
using loom::testing::TarHeader;
using loom::testing::TempDir;
using loom::testing::write_file;

// One sample of a WebDataset-style source: key -> extension -> bytes.
using Samples = std::vector<std::pair<std::string, std::map<std::string, std::string>>>;

Samples make_samples(int n, const std::string& prefix, int seed) {
  Samples s;
  for (int i = 0; i < n; ++i) {
    char number[16];
    std::snprintf(number, sizeof(number), "%06d", i);
    s.push_back({prefix + number,
                 {{"cls", std::to_string((i * 7 + seed) % 10) + "\n"},
                  {"jpg", pattern_bytes(100 + 37 * i, seed * 1000 + i)},
                  {"json", "{\"i\": " + std::to_string(i) + "}"}}});
  }
  return s;
}

// Writes the samples as files under dir/src and tars them with GNU tar in `format`.
void gnu_tar(const TempDir& dir, const Samples& samples, const std::string& format,
             const std::string& tar) {
  std::string list;
  for (const auto& [key, exts] : samples) {
    for (const auto& [ext, data] : exts) {
      write_file(dir / ("src/" + key + "." + ext), data);
      list += " '" + key + "." + ext + "'";
    }
  }
  fs::create_directories(fs::path(tar).parent_path());
  sh("cd '" + dir.path() + "/src' && tar --format=" + format + " -cf '" + tar + "'" + list);
}

// Reads the dataset back and checks it holds exactly `samples`: __key__, then the extensions in
// sorted order with cls as an integer.
void expect_dataset(const std::string& out, const Samples& samples) {
  ShardReader reader(out);
  const Schema& schema = reader.schema();
  ASSERT_EQ(schema.columns.size(), 4u);
  EXPECT_EQ(schema.columns[0].name, "__key__");
  EXPECT_EQ(schema.columns[0].type, ColumnType::String);
  EXPECT_EQ(schema.columns[1].name, "cls");
  EXPECT_EQ(schema.columns[1].type, ColumnType::Int);
  EXPECT_EQ(schema.columns[2].name, "jpg");
  EXPECT_EQ(schema.columns[2].type, ColumnType::Bytes);
  EXPECT_EQ(schema.columns[3].name, "json");
  EXPECT_EQ(schema.columns[3].type, ColumnType::Bytes);
  ASSERT_EQ(reader.size(), static_cast<int64_t>(samples.size()));
  std::string buffer, scratch;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& [key, exts] = samples[i];
    SampleView v = reader.read(static_cast<int64_t>(i), buffer, scratch);
    EXPECT_EQ(v.bytes(0), key) << "sample " << i;
    EXPECT_EQ(v.integer(1), std::stoll(exts.at("cls"))) << "sample " << i;
    EXPECT_EQ(v.bytes(2), exts.at("jpg")) << "sample " << i;
    EXPECT_EQ(v.bytes(3), exts.at("json")) << "sample " << i;
  }
}

class PackGnuTar : public ::testing::TestWithParam<const char*> {};

TEST_P(PackGnuTar, RoundTrips) {
  TempDir dir;
  const std::string format = GetParam();
  Samples samples = make_samples(25, "", 1);
  if (format != "ustar") {
    // Keys in a directory path over 100 characters: 'L' headers (gnu) or pax paths.
    for (auto& s : make_samples(3, std::string(130, 'd') + "/", 2)) samples.push_back(s);
  }
  gnu_tar(dir, samples, format, dir / "x.tar");
  const PackResult r = pack(dir / "x.tar", dir / "out");
  EXPECT_EQ(r.kind, "tar");
  EXPECT_EQ(r.samples, static_cast<int64_t>(samples.size()));
  EXPECT_EQ(r.shards, 1);
  EXPECT_EQ(r.bytes, fs::file_size(dir / "out/shard-00000.lsh"));
  expect_dataset(dir / "out", samples);
}

INSTANTIATE_TEST_SUITE_P(Pack, PackGnuTar, ::testing::Values("ustar", "gnu", "pax"));

TEST(PackTar, DirectoryOfTarsInNameOrderWithZstdAndSmallShards) {
  TempDir dir;
  const Samples first = make_samples(40, "a", 3);
  const Samples second = make_samples(30, "b", 4);
  gnu_tar(dir, second, "gnu", dir / "tars/shard-1.tar");
  fs::remove_all(dir / "src");
  gnu_tar(dir, first, "gnu", dir / "tars/shard-0.tar");
  PackOptions options;
  options.writer.zstd_level = 3;
  options.writer.shard_bytes = 2048;
  std::vector<int64_t> seen;
  options.progress = [&](int64_t samples, uint64_t written, uint64_t read, uint64_t total) {
    EXPECT_LE(read, total);
    seen.push_back(samples);
  };
  const PackResult r = pack(dir / "tars", dir / "out", options);
  EXPECT_EQ(r.kind, "tar");
  EXPECT_EQ(r.samples, 70);
  EXPECT_GT(r.shards, 1);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 70);
  ShardReader reader(dir / "out");
  EXPECT_TRUE(reader.compressed());
  EXPECT_EQ(static_cast<int>(reader.shards().size()), r.shards);
  Samples all = first;
  all.insert(all.end(), second.begin(), second.end());
  expect_dataset(dir / "out", all);
}

TEST(PackTar, DotSlashPrefixAndDirectoriesAreIgnored) {
  TempDir dir;
  const Samples samples = make_samples(5, "sub/", 5);
  gnu_tar(dir, samples, "ustar", dir / "unused.tar");
  fs::remove(dir / "unused.tar");
  sh("cd '" + dir.path() + "/src' && tar --format=ustar --sort=name -cf ../x.tar ./sub");
  pack(dir / "x.tar", dir / "out");
  expect_dataset(dir / "out", samples);
}

TEST(PackTar, LabelAndIndexAreIntegersOthersBytes) {
  TempDir dir;
  std::string bytes = tar_entry("k1.index", " 12 \n") + tar_entry("k1.label", "-3") +
                      tar_entry("k1.txt", "one") + tar_entry("k2.index", "+4") +
                      tar_entry("k2.label", "0") + tar_entry("k2.txt", "");
  bytes += tar_end(bytes.size());
  write_file(dir / "x.tar", bytes);
  pack(dir / "x.tar", dir / "out");
  ShardReader reader(dir / "out");
  ASSERT_EQ(reader.schema().columns.size(), 4u);
  EXPECT_EQ(reader.schema().columns[1].type, ColumnType::Int);
  EXPECT_EQ(reader.schema().columns[2].type, ColumnType::Int);
  EXPECT_EQ(reader.schema().columns[3].type, ColumnType::Bytes);
  std::string buffer, scratch;
  SampleView v = reader.read(0, buffer, scratch);
  EXPECT_EQ(v.bytes(0), "k1");
  EXPECT_EQ(v.integer(1), 12);
  EXPECT_EQ(v.integer(2), -3);
  EXPECT_EQ(v.bytes(3), "one");
  v = reader.read(1, buffer, scratch);
  EXPECT_EQ(v.bytes(0), "k2");
  EXPECT_EQ(v.integer(1), 4);
  EXPECT_EQ(v.integer(2), 0);
  EXPECT_EQ(v.bytes(3), "");
}

// ---- malformed tar sources: each names the tar file, the member and the byte offset ----

std::string pack_error(const TempDir& dir, std::string bytes, bool end = true) {
  if (end) bytes += tar_end(bytes.size());
  write_file(dir / "bad.tar", bytes);
  return error_of<DataError>([&] { pack(dir / "bad.tar", dir / "out"); });
}

// The tar reader's own errors (tar_test.cpp checks each of them) reach pack() unchanged, and pack()
// leaves no dataset behind.
TEST(PackTarErrors, ReaderErrorsStopThePack) {
  TempDir dir;
  std::string bad_checksum = tar_entry("a.cls", "1") + tar_entry("b.cls", "2");
  bad_checksum[1024 + 2] ^= 0x20;  // the name of the second member: 'b.cls' -> 'b.Cls'
  std::string garbage = tar_entry("a.txt", "x");
  garbage += tar_end(garbage.size()) + "trailing junk";
  const struct {
    std::string bytes;
    bool end;
    const char* where;
    const char* what;
  } cases[] = {
      {bad_checksum, true, "member 'b.Cls' at byte offset 1024", "bad header checksum"},
      {tar_entry("a.bin", "x") + tar_entry("b.bin", pattern_bytes(4000, 1)).substr(0, 2000), false,
       "member 'b.bin' at byte offset 1024", "truncated member data"},
      {tar_entry("a.txt", "x") + tar_header(TarHeader{"b.txt", 0, '2', "a.txt"}), true,
       "member 'b.txt' at byte offset 1024", "symbolic link"},
      {garbage, false, "at byte offset 10240, after member 'a.txt'", "end-of-archive"},
  };
  for (const auto& c : cases) {
    const std::string msg = pack_error(dir, c.bytes, c.end);
    EXPECT_CONTAINS(msg, dir / "bad.tar");
    EXPECT_CONTAINS(msg, c.where);
    EXPECT_CONTAINS(msg, c.what);
    EXPECT_FALSE(fs::exists(dir / "out/index.json")) << c.what;
  }
}

TEST(PackTarErrors, NonContiguousKey) {
  TempDir dir;
  const std::string bytes =
      tar_entry("a.cls", "1") + tar_entry("b.cls", "2") + tar_entry("a.txt", "x");
  const std::string msg = pack_error(dir, bytes);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "member 'a.txt' at byte offset 2048");
  EXPECT_CONTAINS(msg, "already read from byte offset 0");
  EXPECT_CONTAINS(msg, "contiguous");
}

TEST(PackTarErrors, KeyRepeatedInALaterTar) {
  TempDir dir;
  std::string one = tar_entry("a.cls", "1");
  one += tar_end(one.size());
  std::string two = tar_entry("b.cls", "2") + tar_entry("a.cls", "3");
  two += tar_end(two.size());
  write_file(dir / "tars/0.tar", one);
  write_file(dir / "tars/1.tar", two);
  const std::string msg = error_of<DataError>([&] { pack(dir / "tars", dir / "out"); });
  EXPECT_CONTAINS(msg, dir / "tars/1.tar: member 'a.cls' at byte offset 1024");
  EXPECT_CONTAINS(msg, "already read from byte offset 0 of " + (dir / "tars/0.tar"));
}

TEST(PackTarErrors, MissingExtension) {
  TempDir dir;
  const std::string bytes = tar_entry("a.cls", "1") + tar_entry("a.txt", "x") +
                            tar_entry("b.cls", "2") + tar_entry("c.cls", "3") +
                            tar_entry("c.txt", "z");
  const std::string msg = pack_error(dir, bytes);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "member 'b.cls' at byte offset 2048");
  EXPECT_CONTAINS(msg, "sample 'b' has no '.txt' member");
}

TEST(PackTarErrors, ExtraExtension) {
  TempDir dir;
  const std::string bytes =
      tar_entry("a.cls", "1") + tar_entry("b.cls", "2") + tar_entry("b.png", "p");
  const std::string msg = pack_error(dir, bytes);
  EXPECT_CONTAINS(msg, "member 'b.png' at byte offset 2048");
  EXPECT_CONTAINS(msg, "sample 'b' has an extra '.png' member");
}

TEST(PackTarErrors, DuplicateExtensionInOneSample) {
  TempDir dir;
  const std::string bytes = tar_entry("a.cls", "1") + tar_entry("a.cls", "2");
  const std::string msg = pack_error(dir, bytes);
  EXPECT_CONTAINS(msg, "member 'a.cls' at byte offset 1024");
  EXPECT_CONTAINS(msg, "two '.cls' members");
}

TEST(PackTarErrors, NonIntegerCls) {
  TempDir dir;
  const std::string bytes =
      tar_entry("a.cls", "1") + tar_entry("b.cls", "cat\n") + tar_entry("c.cls", "3");
  const std::string msg = pack_error(dir, bytes);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "member 'b.cls' at byte offset 1024");
  EXPECT_CONTAINS(msg, "must hold a decimal integer but holds 'cat?'");
}

TEST(PackTarErrors, NameWithoutExtension) {
  TempDir dir;
  const std::string msg = pack_error(dir, tar_entry("README", "hi"));
  EXPECT_CONTAINS(msg, "member 'README' at byte offset 0");
  EXPECT_CONTAINS(msg, "cannot split the name");
}

TEST(PackTarErrors, EmptyArchive) {
  TempDir dir;
  const std::string msg = pack_error(dir, "");
  EXPECT_CONTAINS(msg, "no regular file members");
}

// ---- directories of files ----

TEST(PackFiles, NestedDirectoriesSortedSymlinksSkipped) {
  TempDir dir;
  const std::map<std::string, std::string> files = {
      {"b.txt", "bee"},
      {"a/z.bin", pattern_bytes(5000, 1)},
      {"a/b/c/deep.bin", pattern_bytes(70000, 2)},
      {"empty", ""},
      {"a.b/x", "dotted dir"},
  };
  for (const auto& [rel, data] : files) write_file(dir / ("src/" + rel), data);
  ASSERT_EQ(::symlink((dir / "src/b.txt").c_str(), (dir / "src/link.txt").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "src/a").c_str(), (dir / "src/linkdir").c_str()), 0);
  const PackResult r = pack(dir / "src", dir / "out");
  EXPECT_EQ(r.kind, "files");
  EXPECT_EQ(r.samples, 5);
  ShardReader reader(dir / "out");
  ASSERT_EQ(reader.schema().columns.size(), 2u);
  EXPECT_EQ(reader.schema().columns[0].name, "path");
  EXPECT_EQ(reader.schema().columns[0].type, ColumnType::String);
  EXPECT_EQ(reader.schema().columns[1].name, "data");
  EXPECT_EQ(reader.schema().columns[1].type, ColumnType::Bytes);
  ASSERT_EQ(reader.size(), 5);
  std::string buffer, scratch;
  int64_t i = 0;
  for (const auto& [rel, data] : files) {  // std::map: sorted by relative path, as pack sorts
    SampleView v = reader.read(i++, buffer, scratch);
    EXPECT_EQ(v.bytes(0), rel);
    EXPECT_EQ(v.bytes(1), data) << rel;
  }
}

TEST(PackFiles, ZstdAndManyShards) {
  TempDir dir;
  std::vector<std::string> data;
  for (int i = 0; i < 60; ++i) {
    // Compressible: a repeated pattern.
    std::string s;
    while (s.size() < 3000) s += "sample " + std::to_string(i) + " ";
    data.push_back(s);
    char name[32];
    std::snprintf(name, sizeof(name), "f%03d.txt", i);
    write_file(dir / (std::string("src/") + name), s);
  }
  PackOptions plain;
  plain.writer.shard_bytes = 16 << 10;
  const PackResult a = pack(dir / "src", dir / "plain", plain);
  PackOptions packed = plain;
  packed.writer.zstd_level = 5;
  const PackResult b = pack(dir / "src", dir / "zstd", packed);
  EXPECT_GT(a.shards, 3);
  EXPECT_LT(b.bytes, a.bytes);
  for (const char* out : {"plain", "zstd"}) {
    ShardReader reader(dir / out);
    EXPECT_EQ(reader.compressed(), std::string(out) == "zstd");
    ASSERT_EQ(reader.size(), 60);
    std::string buffer, scratch;
    for (int i = 0; i < 60; ++i)
      EXPECT_EQ(reader.read(i, buffer, scratch).bytes(1), data[i]) << out << " " << i;
  }
}

TEST(PackFiles, OutputInsideSourceIsRefused) {
  TempDir dir;
  write_file(dir / "src/a.txt", "a");
  const std::string msg = error_of<ValueError>([&] { pack(dir / "src", dir / "src/out"); });
  EXPECT_CONTAINS(msg, "lies inside the source");
}

TEST(PackFiles, EmptyDirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir / "src/sub");
  const std::string msg = error_of<ValueError>([&] { pack(dir / "src", dir / "out"); });
  EXPECT_CONTAINS(msg, "holds no regular files");
}

TEST(PackSource, MissingOrUnknown) {
  TempDir dir;
  std::string msg = error_of<ValueError>([] { pack("/nonexistent/src", "/nonexistent/out"); });
  EXPECT_CONTAINS(msg, "source /nonexistent/src does not exist");
  write_file(dir / "a.zip", "PK");
  msg = error_of<ValueError>([&] { pack(dir / "a.zip", dir / "out"); });
  EXPECT_CONTAINS(msg, "is a file but not a .tar");
  write_file(dir / "a.tar.gz", "x");
  msg = error_of<ValueError>([&] { pack(dir / "a.tar.gz", dir / "out"); });
  EXPECT_CONTAINS(msg, "decompress it first");
}

// ---- IDX ----

std::string idx_file(unsigned char type, const std::vector<uint32_t>& dims,
                     const std::string& payload) {
  std::string s = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xFF);
  }
  return s + payload;
}

// Every image and label of the dataset equal the IDX files' (read independently with read_idx).
void expect_idx_dataset(const std::string& out, const std::string& images_path,
                        const std::string& labels_path) {
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  const int64_t n = images.size(0);
  ShardReader reader(out);
  ASSERT_EQ(reader.size(), n);
  ASSERT_EQ(reader.schema().columns.size(), 2u);
  EXPECT_EQ(reader.schema().columns[0].name, "image");
  EXPECT_EQ(reader.schema().columns[0].type, ColumnType::Tensor);
  EXPECT_EQ(reader.schema().columns[1].name, "label");
  EXPECT_EQ(reader.schema().columns[1].type, ColumnType::Int);
  const auto* want_images = static_cast<const uint8_t*>(images.data_ptr());
  const auto* want_labels = static_cast<const uint8_t*>(labels.data_ptr());
  std::string buffer, scratch;
  int mismatches = 0;
  for (int64_t i = 0; i < n && mismatches < 5; ++i) {
    SampleView v = reader.read(i, buffer, scratch);
    const SampleView::TensorRef t = v.tensor(0);
    EXPECT_EQ(t.dtype, DType::UInt8);
    EXPECT_EQ(t.sizes, (std::vector<int64_t>{28, 28}));
    const bool same_image = std::memcmp(t.data, want_images + i * 784, 784) == 0;
    const bool same_label = v.integer(1) == want_labels[i];
    if (!same_image || !same_label) {
      ++mismatches;
      ADD_FAILURE() << "sample " << i << ": image " << (same_image ? "equal" : "differs")
                    << ", label " << v.integer(1) << " vs " << int{want_labels[i]};
    }
  }
}

TEST(PackIdx, SyntheticTrainSplit) {
  TempDir dir;
  constexpr uint32_t kN = 7;
  write_file(dir / "idx/train-images-idx3-ubyte",
             idx_file(0x08, {kN, 28, 28}, pattern_bytes(kN * 784, 11)));
  std::string labels;
  for (uint32_t i = 0; i < kN; ++i) labels += static_cast<char>((i * 3) % 10);
  write_file(dir / "idx/train-labels-idx1-ubyte", idx_file(0x08, {kN}, labels));
  int calls = 0;
  PackOptions options;
  options.progress = [&](int64_t samples, uint64_t, uint64_t read, uint64_t total) {
    ++calls;
    EXPECT_LE(read, total);
  };
  const PackResult r = pack(dir / "idx", dir / "out", options);
  EXPECT_EQ(r.kind, "idx");
  EXPECT_EQ(r.samples, kN);
  EXPECT_GE(calls, 1);
  expect_idx_dataset(dir / "out", dir / "idx/train-images-idx3-ubyte",
                     dir / "idx/train-labels-idx1-ubyte");

  // The test split is not there: the loader's error names the missing file.
  options.split = "test";
  const std::string msg = error_of<DataError>([&] { pack(dir / "idx", dir / "out2", options); });
  EXPECT_CONTAINS(msg, "t10k-images-idx3-ubyte");
  options.split = "validation";
  EXPECT_CONTAINS(error_of<ValueError>([&] { pack(dir / "idx", dir / "out2", options); }),
                  "split must be 'train' or 'test' but got 'validation'");
}

// fashion_mnist_shards: packs once into the cache, reuses the shards while the source is the same,
// packs again when it changes; a missing dataset gets the install hint.
TEST(PackIdx, FashionMnistCachePacksOnceAndNoticesChanges) {
  TempDir dir;
  const std::string idx = dir / "idx";
  auto write_split = [&](uint32_t n, int seed) {
    write_file(idx + "/train-images-idx3-ubyte",
               idx_file(0x08, {n, 28, 28}, pattern_bytes(n * 784, seed)));
    std::string labels;
    for (uint32_t i = 0; i < n; ++i) labels += static_cast<char>((i * 7) % 10);
    write_file(idx + "/train-labels-idx1-ubyte", idx_file(0x08, {n}, labels));
  };
  write_split(5, 1);
  const std::string out = fashion_mnist_shards(idx, /*train=*/true, 0, dir / "cache");
  EXPECT_EQ(ShardReader(out).size(), 5);
  expect_idx_dataset(out, idx + "/train-images-idx3-ubyte", idx + "/train-labels-idx1-ubyte");
  const auto packed_at = fs::last_write_time(out + "/index.json");
  EXPECT_EQ(fashion_mnist_shards(idx, true, 0, dir / "cache"), out);
  EXPECT_EQ(fs::last_write_time(out + "/index.json"), packed_at);  // not packed again
  write_split(9, 2);                                               // another size: another identity
  EXPECT_EQ(fashion_mnist_shards(idx, true, 0, dir / "cache"), out);
  EXPECT_EQ(ShardReader(out).size(), 9);
  expect_idx_dataset(out, idx + "/train-images-idx3-ubyte", idx + "/train-labels-idx1-ubyte");
  const std::string msg = error_of<DataError>(
      [&] { fashion_mnist_shards(dir / "nothing-here", true, 0, dir / "cache"); });
  EXPECT_CONTAINS(msg, "apt install dataset-fashion-mnist");
}

TEST(PackIdx, RealFashionMnistTestSplit) {
  const std::string root = default_fashion_mnist_dir();
  auto find = [&](const std::string& stem) {
    for (const std::string& p : {root + "/" + stem + ".gz", root + "/" + stem}) {
      if (fs::exists(p)) return p;
    }
    return std::string();
  };
  const std::string images = find("t10k-images-idx3-ubyte");
  const std::string labels = find("t10k-labels-idx1-ubyte");
  if (images.empty() || labels.empty()) GTEST_SKIP() << "Fashion-MNIST not found in " << root;
  TempDir dir;
  PackOptions options;
  options.split = "test";
  std::vector<int64_t> reported = {0};
  options.progress = [&](int64_t samples, uint64_t, uint64_t, uint64_t) {
    reported.push_back(samples);
  };
  const PackResult r = pack(root, dir / "out", options);
  EXPECT_EQ(r.kind, "idx");
  EXPECT_EQ(r.samples, 10000);
  EXPECT_EQ(reported.back(), 10000);  // at the end, and at least every 1000 samples before it
  for (size_t i = 1; i < reported.size(); ++i) EXPECT_LE(reported[i] - reported[i - 1], 1000);
  expect_idx_dataset(dir / "out", images, labels);
}

}  // namespace
}  // namespace loom::data
