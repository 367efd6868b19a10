#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "loom/io.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/loom_io_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Runs a stdlib-only Python script; returns its exit status (-1 when no Python is installed).
int run_python(const TempDir& dir, const std::string& script, const std::string& args) {
  std::string python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c pass >/dev/null 2>&1").c_str()) != 0) return -1;
  std::ofstream(dir / "script.py") << script;
  std::string cmd = python + " " + (dir / "script.py") + " " + args + " 2>&1";
  return std::system(cmd.c_str());
}

template <class T>
Tensor vec(std::vector<T> v, IntArrayRef shape) {
  return from_vector(v, shape);
}

std::string message_of(const std::function<void()>& f) {
  return testing::error_of<DataError>(f);
}

void expect_same(const TensorMap& want, const TensorMap& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].first, got[i].first);
    const Tensor& a = want[i].second;
    const Tensor& b = got[i].second;
    EXPECT_EQ(a.dtype(), b.dtype()) << want[i].first;
    EXPECT_EQ(a.sizes().vec(), b.sizes().vec()) << want[i].first;
    EXPECT_TRUE(b.is_contiguous());
    EXPECT_TRUE(equal(a, b)) << want[i].first << ": " << a << " vs " << b;
  }
}

TEST(Safetensors, RoundTripAllDTypesAndLayouts) {
  TempDir dir;
  TensorMap in;
  for (int d = 0; d < kNumDTypes; ++d) {
    DType dt = static_cast<DType>(d);
    Tensor base = sub(arange(0, 24, 1, kFloat64), 11).to(dt);
    in.emplace_back(std::string("c.") + dtype_name(dt), base.view({2, 3, 4}));
    in.emplace_back(std::string("t.") + dtype_name(dt), base.view({4, 6}).t());
    in.emplace_back(std::string("s.") + dtype_name(dt), base.slice(0, 3, 20, 4));
  }
  in.emplace_back("scalar", scalar_tensor(2.5, kFloat64));
  in.emplace_back("empty", zeros({0, 3}));
  in.emplace_back("expanded", from_vector<float>({1, 2}, {2, 1}).expand({2, 5}));
  in.emplace_back("random", rand({7, 3}));
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "é \"q\""}};
  save_safetensors(dir / "m.safetensors", in, meta);
  SafetensorsFile out = load_safetensors(dir / "m.safetensors");
  expect_same(in, out.tensors);
  EXPECT_EQ(out.metadata, meta);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"m.safetensors"});
}

// The tensors of the interoperability tests, built in loom; the scripts below build the same in
// Python.
TensorMap interop_tensors() {
  return {{"weight", vec<float>({0, 3, 1.5, 4, -2, 5}, {3, 2}).t()},  // non-contiguous
          {"ids", vec<int64_t>({-1, 0, int64_t{1} << 40, 7}, {4})},
          {"half", vec<Half>({1.0f, -0.5f, 65504.0f}, {3})},
          {"bf", vec<BFloat16>({1.0f, -2.0f}, {2})},
          {"mask", vec<bool>({true, false, false, true}, {2, 2})},
          {"i8", vec<int8_t>({-128, 127}, {2})},
          {"i16", vec<int16_t>({-300, 300}, {2, 1})},
          {"i32", vec<int32_t>({-70000, 70000}, {2})},
          {"none", vec<uint8_t>({}, {0})},
          {"u8", vec<uint8_t>({0, 255, 9}, {3})},
          {"d", vec<double>({0.1}, {})}};
}

const char* kPythonCommon = R"(import json, struct, sys
tensors = [("weight", "F32", [2, 3], struct.pack("<6f", 0, 1.5, -2, 3, 4, 5)),
  ("ids", "I64", [4], struct.pack("<4q", -1, 0, 1 << 40, 7)),
  ("half", "F16", [3], struct.pack("<3e", 1.0, -0.5, 65504.0)),
  ("bf", "BF16", [2], struct.pack("<2H", 0x3f80, 0xc000)),
  ("mask", "BOOL", [2, 2], bytes([1, 0, 0, 1])),
  ("i8", "I8", [2], struct.pack("<2b", -128, 127)),
  ("i16", "I16", [2, 1], struct.pack("<2h", -300, 300)),
  ("i32", "I32", [2], struct.pack("<2i", -70000, 70000)),
  ("none", "U8", [0], b""), ("u8", "U8", [3], bytes([0, 255, 9])),
  ("d", "F64", [], struct.pack("<d", 0.1))]
)";

TEST(Safetensors, ByteExactWithAnIndependentPythonWriter) {
  TempDir dir;
  std::string script = std::string(kPythonCommon) + R"(
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name, dtype, shape, data in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    offset += len(data)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))
)";
  int rc = run_python(dir, script, dir / "py.safetensors");
  if (rc == -1) GTEST_SKIP() << "no python3";
  ASSERT_EQ(rc, 0);
  save_safetensors(dir / "loom.safetensors", interop_tensors(), {{"format", "pt"}});
  EXPECT_EQ(read_file(dir / "loom.safetensors"), read_file(dir / "py.safetensors"));
  SafetensorsFile py = load_safetensors(dir / "py.safetensors");
  expect_same(interop_tensors(), py.tensors);
  EXPECT_EQ(py.metadata.at("format"), "pt");
}

TEST(Safetensors, PythonReadsWhatLoomWrites) {
  TempDir dir;
  std::string script = std::string(kPythonCommon) + R"(
blob = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
assert n % 8 == 0, n
header = json.loads(blob[8:8 + n].decode("utf-8"))
assert header.pop("__metadata__") == {"step": "12"}, "metadata"
data, expected_offset = blob[8 + n:], 0
assert list(header) == [t[0] for t in tensors], list(header)
for name, dtype, shape, raw in tensors:
    entry = header[name]
    begin, end = entry["data_offsets"]
    assert (entry["dtype"], entry["shape"], begin) == (dtype, shape, expected_offset), (name, entry)
    assert data[begin:end] == raw, (name, data[begin:end], raw)
    expected_offset = end
assert expected_offset == len(data), "trailing bytes"
print("python: ok")
)";
  save_safetensors(dir / "loom.safetensors", interop_tensors(), {{"step", "12"}});
  int rc = run_python(dir, script, dir / "loom.safetensors");
  if (rc == -1) GTEST_SKIP() << "no python3";
  EXPECT_EQ(rc, 0);
}

// Writes a file with a hand-made header (padded) and `data_bytes` bytes of data.
std::string write_raw(const TempDir& dir, const std::string& header, size_t data_bytes) {
  std::string text = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string blob(8, '\0');
  for (int i = 0; i < 8; ++i) blob[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
  blob += text + std::string(data_bytes, '\x01');
  std::string path = dir / "raw.safetensors";
  std::ofstream(path, std::ios::binary) << blob;
  return path;
}

TEST(Safetensors, CorruptHeadersNameFileTensorAndOffset) {
  TempDir dir;
  auto f32 = [](const std::string& name, int n, int b, int e) {
    return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) +
           "],\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  struct Case {
    std::string header;
    size_t data;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"{" + f32("w", 2, 0, 12) + "}", 12, {"tensor \"w\"", "need 8 bytes"}},
      {R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1, {"\"w\"", "F8_E4M3"}},
      {"{" + f32("w", 2, 0, 8) + "}", 4, {"\"w\"", "past the end", "file bytes 64 to 72"}},
      {"{" + f32("a", 2, 0, 8) + "," + f32("b", 2, 4, 12) + "}",
       12,
       {"\"b\"", "overlap tensor \"a\""}},
      {"{" + f32("a", 1, 0, 4) + "," + f32("b", 1, 8, 12) + "}", 12, {"\"b\"", "gap of 4 bytes"}},
      {"{" + f32("a", 1, 0, 4) + "}", 8, {"4 more bytes"}},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, {"\"w\"", "non-negative"}},
      {R"({"w":{"dtype":"F32","data_offsets":[0,0]}})", 0, {"\"w\"", "no \"shape\""}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", 4, {"\"w\"", "data_offsets"}},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4, 0]}})", 4, {"\"w\"", "end before"}},
      {R"({"w":{"dtype":"I8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
       0,
       {"\"w\"", "too large"}},
      {R"({"w":[1]})", 0, {"\"w\"", "is a JSON array"}},
      {R"({"__metadata__":{"k":1}})", 0, {"\"k\"", "expected a string"}},
      {"[1,2]", 0, {"header is a JSON array"}},
      {R"({"w":{"dtype":"F32",})", 0, {"not valid JSON", "at byte offset 28"}},
  };
  for (const Case& c : cases) {
    std::string path = write_raw(dir, c.header, c.data);
    std::string msg = message_of([&] { load_safetensors(path); });
    EXPECT_EQ(msg.rfind("[safetensors] " + path + ": ", 0), 0u) << msg;
    for (const std::string& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
  EXPECT_NE(message_of([&] { load_safetensors(dir / "missing"); }).find("No such file"),
            std::string::npos);
  std::ofstream(dir / "huge", std::ios::binary) << std::string("\xff\xff\xff\x0f\0\0\0\0{}", 10);
  EXPECT_NE(message_of([&] { load_safetensors(dir / "huge"); }).find("more than the limit"),
            std::string::npos);
}

TEST(Safetensors, TruncatedAndFlippedFilesThrowDataError) {
  TempDir dir;
  std::string path = dir / "m.safetensors";
  save_safetensors(
      path, {{"alpha", arange(0, 6, 1, kFloat32).view({2, 3})}, {"beta", arange(0, 4, 1, kInt64)}});
  const std::string good = read_file(path);
  const size_t data_start = good.size() - 24 - 32;
  for (size_t cut = 0; cut < good.size(); ++cut) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good.substr(0, cut);
    std::string msg = message_of([&] { load_safetensors(path); });
    EXPECT_EQ(msg.rfind("[safetensors] " + path + ": ", 0), 0u) << "cut " << cut << ": " << msg;
    if (cut >= data_start) {
      const char* name = cut < data_start + 24 ? "tensor \"alpha\"" : "tensor \"beta\"";
      EXPECT_NE(msg.find(name), std::string::npos) << "cut " << cut << ": " << msg;
    }
  }
  // Any single corrupted header byte either still parses to a consistent file or throws DataError.
  for (size_t i = 0; i < data_start; ++i) {
    for (unsigned char mask : {0x01, 0x20, 0x80}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
      std::string msg = message_of([&] { load_safetensors(path); });
      if (msg != "no exception") {
        EXPECT_EQ(msg.rfind("[safetensors] " + path + ": ", 0), 0u) << "byte " << i << ": " << msg;
      }
    }
  }
}

TEST(Safetensors, BadArgumentsAreValueErrorsAndLeaveTheOldFile) {
  TempDir dir;
  std::string path = dir / "m.safetensors";
  save_safetensors(path, {{"a", ones({2})}});
  const std::string old = read_file(path);
  EXPECT_THROW(save_safetensors(path, {{"a", ones({2})}, {"a", ones({3})}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", ones({2})}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"a", ones({2})}, {"m", empty({2}, kMeta)}}), ValueError);
  EXPECT_THROW(save_safetensors(path, {{"u", Tensor()}}), ValueError);
  EXPECT_EQ(read_file(path), old);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"m.safetensors"});
  std::string msg = message_of([&] {
    save_safetensors(dir / "no/such/dir/x", {{"a", ones({2})}});
  });
  EXPECT_NE(msg.find(dir / "no/such/dir/x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(AtomicWrite, ReplacesWholeFilesAndCleansUpOnFailure) {
  TempDir dir;
  std::string path = dir / "state.json";
  atomic_write_file(path, "old");
  atomic_write_file(path, std::string("new\0data", 8));
  EXPECT_EQ(read_file(path), std::string("new\0data", 8));

  // rename() over a directory fails after the data was written: the temporary must go.
  fs::create_directories(dir / "occupied/child");
  std::string msg = message_of([&] { atomic_write_file(dir / "occupied", "x"); });
  EXPECT_NE(msg.find(dir / "occupied"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;

  // A write that fails part way (file size limit): the old file stays whole, no temporary remains.
  struct rlimit saved;
  ::getrlimit(RLIMIT_FSIZE, &saved);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 1 << 16;
  ::setrlimit(RLIMIT_FSIZE, &small);
  std::string write_msg = message_of([&] { atomic_write_file(path, std::string(1 << 20, 'z')); });
  std::string save_msg = message_of([&] { save_safetensors(path, {{"big", zeros({1 << 18})}}); });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(write_msg.find("File too large"), std::string::npos) << write_msg;
  EXPECT_NE(save_msg.find(path), std::string::npos) << save_msg;
  EXPECT_EQ(read_file(path), std::string("new\0data", 8));
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"occupied", "state.json"}));
  EXPECT_NE(message_of([&] { read_file(dir / "nope"); }).find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace loom::io
