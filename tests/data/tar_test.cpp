// The streaming tar reader (src/data/tar_reader.h): archives written by GNU tar in each format,
// hand-built ones for the corners GNU tar does not write, and every malformed case.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "data/tar_bytes.h"
#include "data/tar_reader.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::data {
namespace {

using loom::testing::error_of;
using loom::testing::pattern_bytes;
using loom::testing::sh;
using loom::testing::tar_end;
using loom::testing::tar_entry;
using loom::testing::tar_header;
using loom::testing::TarHeader;
using loom::testing::TempDir;
using loom::testing::write_file;

using Members = std::vector<std::pair<std::string, std::string>>;

// Every regular member's name and data.
Members read_all(const std::string& path) {
  TarReader reader(path);
  Members out;
  TarMember m;
  while (reader.next(&m)) {
    std::string data;
    reader.read_data(&data);
    EXPECT_EQ(data.size(), m.size);
    out.emplace_back(m.name, std::move(data));
  }
  return out;
}

std::string tar_error(const std::string& bytes, const TempDir& dir,
                      const std::string& name = "bad.tar") {
  const std::string path = dir / name;
  write_file(path, bytes);
  return error_of<DataError>([&] { read_all(path); });
}

// GNU tar in each of its formats: files, a nested directory, an empty file, a long name.
class TarGnuFormats : public ::testing::TestWithParam<const char*> {};

TEST_P(TarGnuFormats, ReadsWhatGnuTarWrites) {
  TempDir dir;
  const std::string format = GetParam();
  Members want = {{"a.txt", "hello\n"},
                  {"empty.bin", ""},
                  {"sub/deeper/b.bin", pattern_bytes(70000, 1)},
                  {"sub/c.bin", pattern_bytes(512, 2)}};
  if (format != "ustar") {
    // > 100 characters: a 'L' header for gnu, a pax 'x' path for pax.
    want.emplace_back(std::string("sub/") + std::string(120, 'x') + ".dat", pattern_bytes(1000, 3));
  } else {
    // ustar splits a long path into prefix and name.
    want.emplace_back(std::string(60, 'p') + "/" + std::string(60, 'q') + ".dat",
                      pattern_bytes(10, 4));
  }
  for (const auto& [name, data] : want) write_file(dir / ("src/" + name), data);
  std::sort(want.begin(), want.end());
  std::string list;
  for (const auto& [name, data] : want) list += " '" + name + "'";
  sh("cd '" + dir.path() + "/src' && tar --format=" + format + " -cf ../x.tar" + list);
  EXPECT_EQ(read_all(dir / "x.tar"), want);

  // With the directories as members too (they are skipped), and a "./" prefix.
  sh("cd '" + dir.path() + "/src' && tar --format=" + format + " -cf ../y.tar .");
  Members got = read_all(dir / "y.tar");
  std::sort(got.begin(), got.end());
  Members want_dot;
  for (const auto& [name, data] : want) want_dot.emplace_back("./" + name, data);
  EXPECT_EQ(got, want_dot);
}

INSTANTIATE_TEST_SUITE_P(Tar, TarGnuFormats, ::testing::Values("ustar", "gnu", "pax"));

TEST(TarReader, SkipsDataThatIsNotRead) {
  TempDir dir;
  const std::string path = dir / "x.tar";
  std::string bytes = tar_entry("a.bin", pattern_bytes(300000, 1)) + tar_entry("b.txt", "bee");
  bytes += tar_end(bytes.size());
  write_file(path, bytes);
  TarReader reader(path);
  TarMember m;
  ASSERT_TRUE(reader.next(&m));
  EXPECT_EQ(m.name, "a.bin");
  EXPECT_EQ(m.header_offset, 0u);
  EXPECT_EQ(m.data_offset, 512u);
  ASSERT_TRUE(reader.next(&m));
  EXPECT_EQ(m.name, "b.txt");
  EXPECT_EQ(m.header_offset, 512u + 300032u);
  std::string data;
  reader.read_data(&data);
  EXPECT_EQ(data, "bee");
  EXPECT_FALSE(reader.next(&m));
  EXPECT_FALSE(reader.next(&m));
  EXPECT_EQ(reader.offset(), bytes.size());
}

TEST(TarReader, ReadsFromAPipe) {
  // A FIFO is not seekable: skipping and truncation checks go through reads.
  TempDir dir;
  const std::string path = dir / "pipe.tar";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string bytes =
      tar_entry("a.bin", pattern_bytes(500000, 5)) + tar_entry("b.bin", pattern_bytes(777, 6));
  bytes += tar_end(bytes.size());
  std::thread writer([&] {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  });
  TarReader reader(path);
  EXPECT_EQ(reader.file_size(), 0u);
  TarMember m;
  ASSERT_TRUE(reader.next(&m));  // a.bin, skipped unread
  ASSERT_TRUE(reader.next(&m));
  std::string data;
  reader.read_data(&data);
  EXPECT_EQ(data, pattern_bytes(777, 6));
  EXPECT_FALSE(reader.next(&m));
  writer.join();
}

TEST(TarReader, Base256SizeAndSignedChecksum) {
  TempDir dir;
  TarHeader h;
  h.name = "big\xE9.bin";  // a byte >= 0x80 makes the signed and unsigned sums differ
  h.size = 1234;
  h.base256_size = true;
  h.signed_checksum = true;
  const std::string data = pattern_bytes(1234, 9);
  std::string bytes = tar_header(h) + data + loom::testing::tar_padding(data.size());
  bytes += tar_end(bytes.size());
  write_file(dir / "x.tar", bytes);
  EXPECT_EQ(read_all(dir / "x.tar"), (Members{{h.name, data}}));
}

// "LEN KEY=VALUE\n" with LEN counting the whole record.
std::string pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

TEST(TarReader, PaxHeadersOverridePathAndSize) {
  TempDir dir;
  const std::string long_name = "dir/" + std::string(200, 'n') + ".bin";
  const std::string data = pattern_bytes(600, 7);
  // 'x': path and size (the ustar header says 0 bytes); 'g': a global path nobody overrides.
  const std::string x =
      pax_record("path", long_name) + pax_record("size", "600") + pax_record("mtime", "1.5");
  TarHeader xh{"PaxHeaders/x", x.size(), 'x'};
  std::string bytes = tar_header(xh) + x + loom::testing::tar_padding(x.size());
  TarHeader fh{"short", 0, '0'};
  bytes += tar_header(fh) + data + loom::testing::tar_padding(data.size());
  const std::string g = pax_record("comment", "global");
  TarHeader gh{"GlobalHead", g.size(), 'g'};
  bytes += tar_header(gh) + g + loom::testing::tar_padding(g.size());
  bytes += tar_entry("after.txt", "ok");
  bytes += tar_end(bytes.size());
  write_file(dir / "x.tar", bytes);
  EXPECT_EQ(read_all(dir / "x.tar"), (Members{{long_name, data}, {"after.txt", "ok"}}));

  TarReader reader(dir / "x.tar");
  TarMember m;
  ASSERT_TRUE(reader.next(&m));
  EXPECT_EQ(m.header_offset, 0u);  // the member starts at its pax header
  EXPECT_EQ(m.data_offset, 1536u);
}

TEST(TarReader, VolumeLabelIsSkippedSparseIsRefused) {
  TempDir dir;
  std::string bytes = tar_header(TarHeader{"my volume", 0, 'V'}) + tar_entry("a.txt", "aaa");
  bytes += tar_end(bytes.size());
  write_file(dir / "x.tar", bytes);
  EXPECT_EQ(read_all(dir / "x.tar"), (Members{{"a.txt", "aaa"}}));

  const std::string x =
      pax_record("GNU.sparse.major", "1") + pax_record("GNU.sparse.name", "s.bin");
  bytes = tar_entry("a.txt", "aaa") + tar_header(TarHeader{"PaxHeaders/s", x.size(), 'x'}) + x +
          loom::testing::tar_padding(x.size()) + tar_entry("GNUSparseFile.0/s.bin", "map");
  bytes += tar_end(bytes.size());
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "member 'GNUSparseFile.0/s.bin' at byte offset 1024");
  EXPECT_CONTAINS(msg, "sparse members");
}

TEST(TarReader, BadChecksum) {
  TempDir dir;
  std::string bytes = tar_entry("a.txt", "aaa") + tar_entry("b.txt", "bbb");
  bytes[1024 + 130] ^= 0x01;  // b.txt's size field
  bytes += tar_end(bytes.size());
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "member 'b.txt' at byte offset 1024");
  EXPECT_CONTAINS(msg, "bad header checksum");
}

TEST(TarReader, NotATarFile) {
  TempDir dir;
  const std::string msg = tar_error(std::string(2048, 'z'), dir);
  EXPECT_CONTAINS(msg, "at byte offset 0");
  EXPECT_CONTAINS(msg, "bad header checksum");
}

TEST(TarReader, TruncatedHeader) {
  TempDir dir;
  std::string bytes = tar_entry("a.txt", "aaa") + tar_entry("b.txt", "bbb").substr(0, 300);
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "at byte offset 1024, after member 'a.txt'");
  EXPECT_CONTAINS(msg, "truncated header");
}

TEST(TarReader, TruncatedMemberData) {
  TempDir dir;
  const std::string bytes =
      tar_entry("a.txt", "aaa") + tar_entry("b.bin", pattern_bytes(5000, 1)).substr(0, 3000);
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "member 'b.bin' at byte offset 1024");
  EXPECT_CONTAINS(msg, "truncated member data");
}

TEST(TarReader, MissingEndOfArchive) {
  TempDir dir;
  const std::string msg = tar_error(tar_entry("a.txt", "aaa"), dir);
  EXPECT_CONTAINS(msg, "at byte offset 1024, after member 'a.txt'");
  EXPECT_CONTAINS(msg, "without its end-of-archive blocks");
}

TEST(TarReader, GarbageAfterTheEnd) {
  TempDir dir;
  std::string bytes = tar_entry("a.txt", "aaa");
  bytes += tar_end(bytes.size());
  bytes[1024 + 512 + 17] = 'G';  // inside the second zero block
  std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, dir / "bad.tar");
  EXPECT_CONTAINS(msg, "at byte offset 1553, after member 'a.txt'");
  EXPECT_CONTAINS(msg, "after the end-of-archive block at byte offset 1024");

  // A second archive appended with cat: its members would be lost silently.
  std::string two = tar_entry("a.txt", "aaa");
  two += tar_end(two.size());
  two += tar_entry("b.txt", "bbb") + tar_end(1024);
  msg = tar_error(two, dir);
  EXPECT_CONTAINS(msg, "non-zero bytes at byte offset 10240");
}

TEST(TarReader, LoneZeroBlockAtEndIsAccepted) {
  TempDir dir;
  std::string bytes = tar_entry("a.txt", "aaa") + std::string(512, '\0');
  write_file(dir / "x.tar", bytes);
  EXPECT_EQ(read_all(dir / "x.tar"), (Members{{"a.txt", "aaa"}}));
}

TEST(TarReader, LinksDevicesAndFifosAreRejected) {
  TempDir dir;
  const std::pair<char, const char*> cases[] = {{'1', "a hard link"},
                                                {'2', "a symbolic link"},
                                                {'3', "a character device"},
                                                {'4', "a block device"},
                                                {'6', "a FIFO"}};
  for (const auto& [type, kind] : cases) {
    TarHeader h{"odd", 0, type, "target"};
    std::string bytes = tar_entry("a.txt", "aaa") + tar_header(h);
    bytes += tar_end(bytes.size());
    const std::string msg = tar_error(bytes, dir);
    EXPECT_CONTAINS(msg, dir / "bad.tar");
    EXPECT_CONTAINS(msg, "member 'odd' at byte offset 1024");
    EXPECT_CONTAINS(msg, kind);
  }
}

TEST(TarReader, UnknownTypeflag) {
  TempDir dir;
  TarHeader h{"sparse", 0, 'S'};
  std::string bytes = tar_header(h);
  bytes += tar_end(bytes.size());
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "member 'sparse' at byte offset 0");
  EXPECT_CONTAINS(msg, "unknown or unsupported typeflag 'S'");
}

TEST(TarReader, AbsurdSizes) {
  TempDir dir;
  TarHeader h{"huge", uint64_t{1} << 60, '0'};
  h.base256_size = true;
  std::string bytes = tar_header(h);
  bytes += tar_end(bytes.size());
  std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "member 'huge' at byte offset 0");
  EXPECT_CONTAINS(msg, "absurd size");

  // Plausible but beyond the end of the file.
  TarHeader t{"long", uint64_t{1} << 30, '0'};
  bytes = tar_header(t) + tar_end(512);
  msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "member 'long' at byte offset 0");
  EXPECT_CONTAINS(msg, "truncated member data");

  // A long-name header claiming megabytes.
  TarHeader l{"././@LongLink", uint64_t{100} << 20, 'L'};
  bytes = tar_header(l) + tar_end(512);
  msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "absurd size");
}

TEST(TarReader, BadSizeField) {
  TempDir dir;
  std::string header = tar_header(TarHeader{"a.txt", 3, '0'});
  header[126] = '9';  // not octal; fix the checksum so that the size is what fails
  std::memset(&header[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  std::snprintf(&header[148], 8, "%06o", sum);
  std::string bytes = header + "aaa" + loom::testing::tar_padding(3);
  bytes += tar_end(bytes.size());
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "member 'a.txt' at byte offset 0");
  EXPECT_CONTAINS(msg, "bad size field");
}

TEST(TarReader, MalformedPaxRecord) {
  TempDir dir;
  const std::string x = "99 path=oops\n";
  std::string bytes = tar_header(TarHeader{"PaxHeaders/x", x.size(), 'x'}) + x +
                      loom::testing::tar_padding(x.size());
  bytes += tar_entry("a.txt", "aaa");
  bytes += tar_end(bytes.size());
  const std::string msg = tar_error(bytes, dir);
  EXPECT_CONTAINS(msg, "at byte offset 512");
  EXPECT_CONTAINS(msg, "malformed pax record");
}

TEST(TarReader, MissingFile) {
  const std::string msg = error_of<DataError>([] { TarReader r("/nonexistent/x.tar"); });
  EXPECT_CONTAINS(msg, "cannot open /nonexistent/x.tar");
}

}  // namespace
}  // namespace loom::data
