// Helpers shared by the shard tests: a temporary directory, raw file edits, the shard header's
// fields, and a small dataset of every column type whose values the tests can check.
#pragma once

#include "temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "loom/data/shard.h"

namespace loom::data::testing {

using loom::testing::TempDir;

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void flip_byte(const std::string& path, uint64_t offset, unsigned char mask = 0xFF) {
  std::string b = read_bytes(path);
  ASSERT_LT(offset, b.size()) << path;
  b[offset] = static_cast<char>(b[offset] ^ mask);
  write_bytes(path, b);
}

// The fixed-size fields of Note [shard layout].
struct RawHeader {
  uint32_t version, flags;
  uint64_t samples, table_offset, data_offset, file_size;
  uint32_t schema_bytes, table_crc, header_crc, reserved;
};

inline RawHeader read_header(const std::string& path) {
  std::string b = read_bytes(path);
  RawHeader h{};
  if (b.size() < 64) return h;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  h.version = u32(8);
  h.flags = u32(12);
  h.samples = u64(16);
  h.table_offset = u64(24);
  h.data_offset = u64(32);
  h.file_size = u64(40);
  h.schema_bytes = u32(48);
  h.table_crc = u32(52);
  h.header_crc = u32(56);
  h.reserved = u32(60);
  return h;
}

// One sample of the test schema, as plain values.
struct TestSample {
  std::string key;
  int64_t label = 0;
  std::string blob;
  std::vector<uint8_t> image;  // [4, 5]
  int64_t rows = 0;
  std::vector<float> feat;  // [rows, 3]
  std::vector<int64_t> var_sizes;
  std::vector<int64_t> var;    // any shape
  std::vector<uint16_t> half;  // [n] float16 bits
  std::vector<double> scalar;  // [] (one element)
};

inline Column plain_column(const std::string& name, ColumnType type) {
  Column c;
  c.name = name;
  c.type = type;
  return c;
}

inline Schema test_schema() {
  Schema s;
  s.columns.push_back(plain_column("key", ColumnType::String));
  s.columns.push_back(plain_column("label", ColumnType::Int));
  s.columns.push_back(plain_column("blob", ColumnType::Bytes));
  s.columns.push_back({"image", ColumnType::Tensor, DType::UInt8, {4, 5}, false});
  s.columns.push_back({"feat", ColumnType::Tensor, DType::Float32, {-1, 3}, false});
  s.columns.push_back({"var", ColumnType::Tensor, DType::Int64, {}, true});
  s.columns.push_back({"half", ColumnType::Tensor, DType::Float16, {-1}, false});
  s.columns.push_back({"scalar", ColumnType::Tensor, DType::Float64, {}, false});
  return s;
}

inline std::vector<TestSample> make_samples(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TestSample> out(n);
  for (int i = 0; i < n; ++i) {
    TestSample& s = out[i];
    s.key = (i % 7 == 3) ? std::string() : "sample-" + std::to_string(i);
    s.label = static_cast<int64_t>(rng()) >> (i % 40);
    if (i % 2) s.label = -s.label;
    const size_t blob_len = (i % 5 == 0) ? 0 : rng() % 700;
    for (size_t k = 0; k < blob_len; ++k) s.blob.push_back(static_cast<char>(k % 3 ? 'a' : rng()));
    s.image.resize(20);
    for (auto& v : s.image) v = static_cast<uint8_t>(rng());
    s.rows = static_cast<int64_t>(rng() % 6);  // sometimes 0: an empty tensor
    s.feat.resize(static_cast<size_t>(s.rows) * 3);
    for (auto& v : s.feat) v = static_cast<float>(rng() % 1000) / 7.0f;
    const int rank = static_cast<int>(rng() % 4);
    int64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      s.var_sizes.push_back(static_cast<int64_t>(rng() % 4));
      numel *= s.var_sizes.back();
    }
    s.var.resize(static_cast<size_t>(numel));
    for (auto& v : s.var) v = static_cast<int64_t>(rng());
    s.half.resize(rng() % 9);
    for (auto& v : s.half) v = static_cast<uint16_t>(rng());
    s.scalar = {static_cast<double>(i) * 0.25};
  }
  return out;
}

inline std::vector<Value> values_of(const TestSample& s) {
  return {Value::of_string(s.key),
          Value::of_int(s.label),
          Value::of_bytes(s.blob),
          Value::of_tensor(DType::UInt8, {4, 5}, s.image.data()),
          Value::of_tensor(DType::Float32, {s.rows, 3}, s.feat.data()),
          Value::of_tensor(DType::Int64, s.var_sizes, s.var.data()),
          Value::of_tensor(DType::Float16, {static_cast<int64_t>(s.half.size())}, s.half.data()),
          Value::of_tensor(DType::Float64, {}, s.scalar.data())};
}

inline int64_t write_dataset(const std::string& dir, const std::vector<TestSample>& samples,
                             ShardWriterOptions options) {
  ShardWriter w(dir, test_schema(), options);
  for (const TestSample& s : samples) w.add(values_of(s));
  return w.finish();
}

template <class T>
std::vector<T> elements(const SampleView::TensorRef& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * sizeof(T));
  return v;
}

// Checks a decoded sample against what was written; returns "" when they match.
inline std::string mismatch(const SampleView& v, const TestSample& s) {
  if (v.columns() != 8) return "column count";
  if (v.bytes(0) != s.key) return "key";
  if (v.integer(1) != s.label) return "label";
  if (v.bytes(2) != s.blob) return "blob";
  auto image = v.tensor(3);
  if (image.dtype != DType::UInt8 || image.sizes != std::vector<int64_t>{4, 5} ||
      elements<uint8_t>(image) != s.image)
    return "image";
  auto feat = v.tensor(4);
  if (feat.dtype != DType::Float32 || feat.sizes != std::vector<int64_t>{s.rows, 3} ||
      elements<float>(feat) != s.feat)
    return "feat";
  auto var = v.tensor(5);
  if (var.dtype != DType::Int64 || var.sizes != s.var_sizes || elements<int64_t>(var) != s.var)
    return "var";
  auto half = v.tensor(6);
  if (half.dtype != DType::Float16 ||
      half.sizes != std::vector<int64_t>{static_cast<int64_t>(s.half.size())} ||
      elements<uint16_t>(half) != s.half)
    return "half";
  auto scalar = v.tensor(7);
  if (scalar.dtype != DType::Float64 || !scalar.sizes.empty() ||
      elements<double>(scalar) != s.scalar)
    return "scalar";
  if (reinterpret_cast<uintptr_t>(feat.data) % 8 != 0) return "feat data not 8-byte aligned";
  return "";
}

}  // namespace loom::data::testing
