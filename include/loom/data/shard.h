// Shards (data layer): loom's indexed sample format, its writer and its reader.
//
// A dataset is a directory with an index (`index.json`) and shard files (`shard-00000.lsh`, ...) of
// about `ShardWriterOptions::shard_bytes` each. A sample is a record of typed columns (raw bytes, a
// tensor with dtype and shape, an integer, a string); every shard has a per-sample offset table, so
// any sample is one positioned read away, and a CRC32C per sample, so a flipped bit is found before
// the sample is used. Samples may be zstd-compressed one by one.
//
// Note [shard layout] (all integers little-endian; kShardAlign = 4096):
//   [0, 64)              header: "LOOMSHRD", u32 version (1), u32 flags (bit 0: zstd),
//                        u64 samples, u64 table_offset, u64 data_offset, u64 file_size,
//                        u32 schema_bytes, u32 table_crc32c, u32 header_crc32c (of bytes [0, 64)
//                        with this field zeroed, then the schema), u32 reserved (0)
//   [64, 64+schema)      the schema as JSON (Schema::to_json)
//   [data_offset, table_offset)
//                        the records in sample order, each starting at a multiple of `sample_align`
//                        (default 64), none overlapping
//   [table_offset, ...)  samples x {u64 offset, u32 stored_bytes, u32 crc32c}: where each record
//   lies
//                        (absolute file offset), its size on disk and the CRC32C of those bytes
// The table follows the records so that a shard is written in one sequential pass (only the header
// is filled in at the end); zero bytes pad the gaps. table_offset and data_offset are multiples of
// kShardAlign, and so is file_size: a reader may read the table or a run of records with
// O_DIRECT / io_uring / cuFile straight into an aligned buffer (the records lie inside the aligned
// range) with no bounce copy.
//
// Note [record layout] (the bytes after zstd decompression when the shard is compressed):
//   u32 payload_bytes[columns], padded to a multiple of 8, then each column's payload padded to a
//   multiple of 8 (so tensor data is 8-byte aligned when the record is). Payloads:
//     Bytes, String: the bytes;  Int: an i64;
//     Tensor: u32 ndim, u32 0, i64 sizes[ndim], then the elements (row-major, little-endian).
//
// The index (`index.json`): {"format": "loom-shards", "version": 1, "schema": {...}, "samples": N,
// "compression": "none"|"zstd", "source": "...", "shards": [{"file", "samples", "bytes", "crc32c"},
// ...], "zstd_level": L, "sample_align": A} where crc32c (8 hex digits) covers the whole shard
// file; readers ignore keys they do not know. A schema is {"columns": [{"name",
// "type": "bytes"|"tensor"|"int"|"string", and for tensors "dtype": "float32" and "shape": [28, 28]
// (-1 for a varying dimension) or null (any shape)}, ...]}.
//
// Errors: every problem with files or their contents throws DataError naming the file and, where it
// applies, the sample (index within the shard and in the dataset) and the byte offset. Bad
// arguments throw ValueError.
//
// Thread-safety: ShardWriter is single-threaded. ShardReader is safe to use from many threads at
// once after construction (shard tables load lazily under a lock, then are read-only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/crc32c.h"
#include "loom/dtype.h"
#include "loom/export.h"
#include "loom/json.h"

namespace loom::data {

constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardAlign = 4096;

// CRC32C of shard bytes: loom/crc32c.h (base layer).
using loom::crc32c;

enum class ColumnType : uint8_t { Bytes, Tensor, Int, String };
LOOM_API const char* column_type_name(ColumnType t);

struct Column {
  std::string name;
  ColumnType type = ColumnType::Bytes;
  DType dtype = DType::UInt8;  // Tensor columns only
  // Tensor columns only: the shape every sample must have; -1 marks a dimension that varies. Empty
  // with `any_rank` set: any shape.
  std::vector<int64_t> shape;
  bool any_rank = false;
};

struct LOOM_API Schema {
  std::vector<Column> columns;
  // Index of the column called `name`; ValueError listing the columns when there is none.
  size_t index_of(std::string_view name) const;
  Json to_json() const;
  // DataError naming `source` when the JSON is not a valid schema.
  static Schema from_json(const Json& j, const std::string& source);
  bool operator==(const Schema& o) const;
};

// One value of a sample being written. Tensor data is copied when the sample is added.
struct Value {
  ColumnType type = ColumnType::Bytes;
  std::string_view bytes;      // Bytes, String
  int64_t integer = 0;         // Int
  DType dtype = DType::UInt8;  // Tensor
  std::vector<int64_t> sizes;  // Tensor
  const void* data = nullptr;  // Tensor: sizes' product x itemsize bytes, row-major

  static Value of_bytes(std::string_view b) {
    Value x;
    x.bytes = b;
    return x;
  }
  static Value of_string(std::string_view s) {
    Value x;
    x.type = ColumnType::String;
    x.bytes = s;
    return x;
  }
  static Value of_int(int64_t v) {
    Value x;
    x.type = ColumnType::Int;
    x.integer = v;
    return x;
  }
  static Value of_tensor(DType dt, std::vector<int64_t> sizes, const void* data) {
    Value x;
    x.type = ColumnType::Tensor;
    x.dtype = dt;
    x.sizes = std::move(sizes);
    x.data = data;
    return x;
  }
};

struct ShardWriterOptions {
  size_t shard_bytes = size_t{64} << 20;  // a new shard starts when the next record would pass this
  int zstd_level = 0;                     // 0: no compression; 1..19: zstd level
  size_t sample_align = 64;               // power of two, 8..kShardAlign
  std::string source;                     // free text recorded in the index ("fashion-mnist train")
};

// Writes a dataset directory (created if missing; existing shard files and index are replaced).
// Shards are written to temporary names and renamed; the index is written last, atomically, so a
// crash never leaves an index that names incomplete shards.
class LOOM_API ShardWriter {
 public:
  ShardWriter(std::string dir, Schema schema, ShardWriterOptions options = {});
  ~ShardWriter();  // without finish(), removes the temporary files and writes no index
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one sample; `values` follow the schema's columns. ValueError naming the column and the
  // sample number when a value does not match its column (type, dtype, shape).
  void add(const std::vector<Value>& values);
  // Closes the last shard and writes the index. Returns the number of samples.
  int64_t finish();

  int64_t samples() const;
  size_t bytes_written() const;  // so far, all shards (for progress bars)
  const Schema& schema() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ShardInfo {
  std::string file;  // name inside the dataset directory
  int64_t samples = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;  // of the whole file
  int64_t first = 0;    // global index of its first sample
};

// A decoded sample: views into a record held by the caller's buffer (valid while it lives).
class LOOM_API SampleView {
 public:
  SampleView() = default;
  size_t columns() const { return payloads_.size(); }
  std::string_view bytes(size_t col) const;  // any column type: the raw payload
  int64_t integer(size_t col) const;         // Int columns
  // Tensor columns: dtype, sizes and a pointer to the elements.
  struct TensorRef {
    DType dtype;
    std::vector<int64_t> sizes;
    const void* data;
    int64_t numel() const;
  };
  TensorRef tensor(size_t col) const;

 private:
  friend class ShardReader;
  const Schema* schema_ = nullptr;
  std::vector<std::string_view> payloads_;
};

// Where a sample lies on disk: enough for any I/O engine (pread, mmap, io_uring) to fetch it.
struct SampleLocation {
  int shard = 0;        // index into ShardReader::shards()
  int64_t local = 0;    // index within the shard
  int fd = -1;          // open read-only descriptor of the shard file (owned by the reader)
  uint64_t offset = 0;  // absolute file offset of the stored record
  uint32_t bytes = 0;   // stored size
  uint32_t crc32c = 0;  // of the stored bytes
};

struct ShardReaderOptions {
  // Compare every shard file's size with the index at open (cheap). Whole-file hashes are checked
  // by verify().
  bool check_sizes = true;
};

class LOOM_API ShardReader {
 public:
  // Opens `dir`: reads and validates the index, opens every shard and checks its header against the
  // index (magic, version, sample count, schema, file size). Tables are read lazily.
  explicit ShardReader(const std::string& dir, ShardReaderOptions options = {});
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const std::string& dir() const;
  const Schema& schema() const;
  int64_t size() const;  // samples in the dataset
  const std::vector<ShardInfo>& shards() const;
  bool compressed() const;
  const Json& index() const;

  // Where global sample `id` lies (IndexError when out of range). Loads that shard's table on first
  // use (the table's CRC is checked then).
  SampleLocation locate(int64_t id) const;
  // Checks `stored` (the bytes read from `loc`) against its CRC, decompresses it into `scratch`
  // when the dataset is compressed, and parses the record. The view points into `stored` or
  // `scratch`. DataError naming the shard file, the sample and the byte offset on any mismatch.
  SampleView decode(const SampleLocation& loc, const void* stored, std::string& scratch) const;
  // locate + pread + decode, for simple callers; `buffer` holds the record afterwards.
  SampleView read(int64_t id, std::string& buffer, std::string& scratch) const;

  // Recomputes every shard's whole-file CRC32C and every sample's CRC; throws DataError on the
  // first mismatch. `progress` (may be null) is called with bytes checked so far.
  void verify(void (*progress)(uint64_t done, uint64_t total, void* ctx) = nullptr,
              void* ctx = nullptr) const;

  // The shard file's path (for error messages).
  std::string shard_path(int shard) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::data
