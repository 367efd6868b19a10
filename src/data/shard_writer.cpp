// ShardWriter: streams records into shard files and writes the index last. See Note [shard layout]
// and Note [record layout] (loom/data/shard.h).
//
// A shard is written in one sequential pass: the records from data_offset on (each padded to
// sample_align), then the table, then the header and schema at offset 0 once the counts are known.
// The whole-file CRC is the CRC of everything after the header region, hashed as it streams out,
// combined with the header region's CRC at the end (crc32c_combine), so nothing is read back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "data/shard_internal.h"
#include "loom/data/shard.h"
#include "loom/error.h"
#include "loom/io.h"

namespace loom::data {

using detail::align_up;

namespace {

constexpr size_t kFlushBytes = size_t{1} << 20;

std::string column_names(const Schema& s) {
  std::string names;
  for (size_t i = 0; i < s.columns.size(); ++i) names += (i ? ", " : "") + s.columns[i].name;
  return names;
}

std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

void check_schema(const Schema& schema, const std::string& dir) {
  LOOM_CHECK(!schema.columns.empty() && schema.columns.size() <= detail::kMaxColumns,
             "[data.shard] cannot write ", dir, ": a schema needs 1 to ", detail::kMaxColumns,
             " columns but has ", schema.columns.size());
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const Column& c = schema.columns[i];
    LOOM_CHECK(!c.name.empty(), "[data.shard] cannot write ", dir, ": column ", i,
               " has an empty name");
    for (size_t k = 0; k < i; ++k) {
      LOOM_CHECK(schema.columns[k].name != c.name, "[data.shard] cannot write ", dir,
                 ": two columns are called \"", c.name, "\"");
    }
    LOOM_CHECK(static_cast<size_t>(c.type) <= static_cast<size_t>(ColumnType::String),
               "[data.shard] cannot write ", dir, ": column \"", c.name, "\" has an invalid type ",
               static_cast<int>(c.type));
    if (c.type != ColumnType::Tensor) continue;
    LOOM_CHECK(static_cast<int>(c.dtype) >= 0 && static_cast<int>(c.dtype) < kNumDTypes,
               "[data.shard] cannot write ", dir, ": column \"", c.name, "\" has an invalid dtype");
    LOOM_CHECK(!c.any_rank || c.shape.empty(), "[data.shard] cannot write ", dir, ": column \"",
               c.name, "\" has any_rank set and a shape ", sizes_text(c.shape),
               "; use one or the other");
    LOOM_CHECK(c.shape.size() <= detail::kMaxTensorRank, "[data.shard] cannot write ", dir,
               ": column \"", c.name, "\" has ", c.shape.size(), " dimensions, more than ",
               detail::kMaxTensorRank);
    for (int64_t s : c.shape) {
      LOOM_CHECK(s >= -1, "[data.shard] cannot write ", dir, ": column \"", c.name, "\" has shape ",
                 detail::shape_text(c), "; sizes must be >= 0, or -1 for a varying dimension");
    }
  }
}

}  // namespace

struct ShardWriter::Impl {
  std::string dir;
  Schema schema;
  ShardWriterOptions options;
  std::string schema_text;
  uint64_t data_offset = 0;
  ZSTD_CCtx* cctx = nullptr;

  std::vector<ShardInfo> closed;  // still under their temporary names until finish()
  int64_t samples = 0;
  uint64_t closed_bytes = 0;
  bool finished = false;

  // The shard being written.
  int fd = -1;
  std::string tmp_path;
  uint64_t pos = 0;         // file offset where the next byte goes
  uint64_t flushed_to = 0;  // `pending` starts here
  std::string pending;      // bytes not yet written
  uint32_t body_crc = 0;    // of [data_offset, pos)
  std::string table;
  int64_t shard_samples = 0;

  std::string record;
  std::string compressed;

  std::string final_path(size_t shard) const {
    return dir + "/" + detail::shard_file_name(static_cast<int>(shard));
  }

  [[noreturn]] void io_fail(const std::string& what, int err) const {
    LOOM_THROW(DataError, "[data.shard] cannot write ", what, ": ", std::strerror(err));
  }

  void pwrite_all(const void* data, size_t n, uint64_t offset) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        io_fail(tmp_path + " at byte offset " + std::to_string(offset), errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
  }

  void flush() {
    if (pending.empty()) return;
    pwrite_all(pending.data(), pending.size(), flushed_to);
    flushed_to += pending.size();
    pending.clear();
  }

  void append(const void* data, size_t n) {
    body_crc = crc32c(data, n, body_crc);
    pending.append(static_cast<const char*>(data), n);
    pos += n;
    if (pending.size() >= kFlushBytes) flush();
  }

  void pad_to(uint64_t boundary) {
    static const char zeros[4096] = {};
    uint64_t n = align_up(pos, boundary) - pos;
    while (n > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof(zeros)));
      append(zeros, k);
      n -= k;
    }
  }

  void open_shard() {
    tmp_path = final_path(closed.size()) + ".tmp";
    fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) io_fail(tmp_path, errno);
    pos = flushed_to = data_offset;
    body_crc = 0;
    table.clear();
    shard_samples = 0;
  }

  // The file size the current shard would have with one more record of `stored` bytes.
  uint64_t projected_size(uint64_t stored) const {
    uint64_t end = align_up(pos, options.sample_align) + stored;
    uint64_t table_end = align_up(end, kShardAlign) +
                         detail::kTableEntryBytes * static_cast<uint64_t>(shard_samples + 1);
    return align_up(table_end, kShardAlign);
  }

  void close_shard() {
    pad_to(kShardAlign);
    const uint64_t table_offset = pos;
    const uint32_t table_crc = crc32c(table.data(), table.size());
    append(table.data(), table.size());
    pad_to(kShardAlign);
    flush();
    const uint64_t file_size = pos;

    std::string head(data_offset, '\0');
    auto* h = reinterpret_cast<unsigned char*>(head.data());
    std::memcpy(h, detail::kShardMagic, sizeof(detail::kShardMagic));
    detail::store_u32(h + detail::kOffVersion, kShardVersion);
    detail::store_u32(h + detail::kOffFlags, options.zstd_level > 0 ? detail::kFlagZstd : 0);
    detail::store_u64(h + detail::kOffSamples, static_cast<uint64_t>(shard_samples));
    detail::store_u64(h + detail::kOffTableOffset, table_offset);
    detail::store_u64(h + detail::kOffDataOffset, data_offset);
    detail::store_u64(h + detail::kOffFileSize, file_size);
    detail::store_u32(h + detail::kOffSchemaBytes, static_cast<uint32_t>(schema_text.size()));
    detail::store_u32(h + detail::kOffTableCrc, table_crc);
    std::memcpy(h + detail::kHeaderBytes, schema_text.data(), schema_text.size());
    detail::store_u32(h + detail::kOffHeaderCrc,
                      detail::header_crc(h, schema_text.data(), schema_text.size()));
    pwrite_all(head.data(), head.size(), 0);
    const uint32_t file_crc =
        detail::crc32c_combine(crc32c(head.data(), head.size()), body_crc, file_size - data_offset);

    if (::fsync(fd) != 0) io_fail(tmp_path + " (fsync)", errno);
    int f = fd;
    fd = -1;
    if (::close(f) != 0) io_fail(tmp_path + " (close)", errno);

    ShardInfo info;
    info.file = detail::shard_file_name(static_cast<int>(closed.size()));
    info.samples = shard_samples;
    info.bytes = file_size;
    info.crc32c = file_crc;
    info.first = samples - shard_samples;
    closed.push_back(info);
    closed_bytes += file_size;
  }

  // Note [record layout]: the u32 sizes, then the payloads, each padded to 8 bytes.
  void build_record(const std::vector<Value>& values) {
    const size_t C = schema.columns.size();
    const uint64_t prefix = detail::record_prefix_bytes(C);
    uint64_t total = prefix;
    std::vector<uint64_t> sizes(C);
    for (size_t i = 0; i < C; ++i) {
      const Value& v = values[i];
      const Column& c = schema.columns[i];
      uint64_t n = 0;
      switch (v.type) {
        case ColumnType::Bytes:
        case ColumnType::String:
          n = v.bytes.size();
          break;
        case ColumnType::Int:
          n = 8;
          break;
        case ColumnType::Tensor:
          n = check_tensor(v, c);
          break;
      }
      LOOM_CHECK(n <= UINT32_MAX, "[data.shard] sample ", samples, " column \"", c.name,
                 "\": the value has ", n, " bytes, more than a record can hold (", UINT32_MAX, ")");
      sizes[i] = n;
      total += align_up(n, 8);
    }
    LOOM_CHECK(total <= UINT32_MAX, "[data.shard] sample ", samples, " is ", total,
               " bytes, more than a record can hold (", UINT32_MAX, ")");
    record.assign(total, '\0');
    char* r = record.data();
    for (size_t i = 0; i < C; ++i) detail::store_u32(r + 4 * i, static_cast<uint32_t>(sizes[i]));
    uint64_t at = prefix;
    for (size_t i = 0; i < C; ++i) {
      const Value& v = values[i];
      char* p = r + at;
      switch (v.type) {
        case ColumnType::Bytes:
        case ColumnType::String:
          if (!v.bytes.empty()) std::memcpy(p, v.bytes.data(), v.bytes.size());
          break;
        case ColumnType::Int:
          detail::store_u64(p, static_cast<uint64_t>(v.integer));
          break;
        case ColumnType::Tensor: {
          detail::store_u32(p, static_cast<uint32_t>(v.sizes.size()));
          for (size_t d = 0; d < v.sizes.size(); ++d)
            detail::store_u64(p + 8 + 8 * d, static_cast<uint64_t>(v.sizes[d]));
          const size_t head = 8 + 8 * v.sizes.size();
          if (sizes[i] > head) std::memcpy(p + head, v.data, sizes[i] - head);
          break;
        }
      }
      at += align_up(sizes[i], 8);
    }
  }

  // Checks a tensor value against its column; returns its payload size.
  uint64_t check_tensor(const Value& v, const Column& c) const {
    auto where = [&] {
      return ::loom::detail::str_cat("[data.shard] sample ", samples, " column \"", c.name,
                                     "\" (tensor ", dtype_name(c.dtype), " ", detail::shape_text(c),
                                     "): ");
    };
    LOOM_CHECK(v.dtype == c.dtype, where(), "got dtype ", dtype_name(v.dtype));
    LOOM_CHECK(v.sizes.size() <= detail::kMaxTensorRank, where(), "got ", v.sizes.size(),
               " dimensions, more than ", detail::kMaxTensorRank);
    LOOM_CHECK(c.any_rank || v.sizes.size() == c.shape.size(), where(), "got shape ",
               sizes_text(v.sizes));
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < v.sizes.size(); ++d) {
      LOOM_CHECK(v.sizes[d] >= 0, where(), "got shape ", sizes_text(v.sizes),
                 " with a negative size");
      LOOM_CHECK(c.any_rank || c.shape[d] == -1 || c.shape[d] == v.sizes[d], where(), "got shape ",
                 sizes_text(v.sizes));
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(v.sizes[d]), &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t{element_size(v.dtype)}, &nbytes);
    LOOM_CHECK(!overflow && nbytes <= UINT32_MAX, where(), "shape ", sizes_text(v.sizes),
               " is too large for a record");
    LOOM_CHECK(nbytes == 0 || v.data != nullptr, where(), "the data pointer is null");
    return 8 + 8 * v.sizes.size() + nbytes;
  }

  void check_values(const std::vector<Value>& values) const {
    LOOM_CHECK(values.size() == schema.columns.size(), "[data.shard] sample ", samples, " has ",
               values.size(), " values but the schema has ", schema.columns.size(), " columns (",
               column_names(schema), ")");
    for (size_t i = 0; i < values.size(); ++i) {
      const Column& c = schema.columns[i];
      LOOM_CHECK(values[i].type == c.type, "[data.shard] sample ", samples, " column \"", c.name,
                 "\": expected a ", column_type_name(c.type), " value but got a ",
                 column_type_name(values[i].type), " value");
    }
  }

  void remove_temporaries() noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (!tmp_path.empty()) ::unlink(tmp_path.c_str());
    for (size_t i = 0; i < closed.size(); ++i) ::unlink((final_path(i) + ".tmp").c_str());
  }
};

ShardWriter::ShardWriter(std::string dir, Schema schema, ShardWriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  LOOM_CHECK(!dir.empty(), "[data.shard] the dataset directory is an empty path");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  check_schema(schema, dir);
  const size_t a = options.sample_align;
  LOOM_CHECK(a >= 8 && a <= kShardAlign && (a & (a - 1)) == 0, "[data.shard] cannot write ", dir,
             ": sample_align must be a power of two from 8 to ", kShardAlign, " but got ", a);
  LOOM_CHECK(options.zstd_level >= 0 && options.zstd_level <= 19, "[data.shard] cannot write ", dir,
             ": zstd_level must be 0 (no compression) or 1 to 19 but got ", options.zstd_level);
  LOOM_CHECK(options.shard_bytes > 0, "[data.shard] cannot write ", dir,
             ": shard_bytes must be positive");
  w.schema_text = schema.to_json().dump();
  LOOM_CHECK(w.schema_text.size() <= detail::kMaxSchemaBytes, "[data.shard] cannot write ", dir,
             ": the schema is ", w.schema_text.size(), " bytes of JSON, more than ",
             detail::kMaxSchemaBytes);
  w.data_offset = align_up(detail::kHeaderBytes + w.schema_text.size(), kShardAlign);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) LOOM_THROW(DataError, "[data.shard] cannot create directory ", dir, ": ", ec.message());
  if (options.zstd_level > 0) {
    w.cctx = ZSTD_createCCtx();
    LOOM_CHECK_AS(OutOfMemoryError, w.cctx != nullptr, "[data.shard] ZSTD_createCCtx failed");
  }
  w.dir = std::move(dir);
  w.schema = std::move(schema);
  w.options = std::move(options);
}

ShardWriter::~ShardWriter() {
  if (!impl_->finished) impl_->remove_temporaries();
  if (impl_->cctx != nullptr) ZSTD_freeCCtx(impl_->cctx);
}

void ShardWriter::add(const std::vector<Value>& values) {
  Impl& w = *impl_;
  LOOM_CHECK(!w.finished, "[data.shard] cannot add to ", w.dir, ": finish() was called");
  w.check_values(values);
  w.build_record(values);

  const std::string* stored = &w.record;
  if (w.cctx != nullptr) {
    w.compressed.resize(ZSTD_compressBound(w.record.size()));
    size_t n = ZSTD_compressCCtx(w.cctx, w.compressed.data(), w.compressed.size(), w.record.data(),
                                 w.record.size(), w.options.zstd_level);
    if (ZSTD_isError(n))
      LOOM_THROW(DataError, "[data.shard] zstd could not compress sample ", w.samples, " for ",
                 w.dir, ": ", ZSTD_getErrorName(n));
    LOOM_CHECK(n <= UINT32_MAX, "[data.shard] sample ", w.samples, " compresses to ", n,
               " bytes, more than a record can hold");
    w.compressed.resize(n);
    stored = &w.compressed;
  }

  if (w.fd >= 0 && w.shard_samples > 0 && w.projected_size(stored->size()) > w.options.shard_bytes)
    w.close_shard();
  if (w.fd < 0) w.open_shard();

  w.pad_to(w.options.sample_align);
  unsigned char entry[detail::kTableEntryBytes];
  detail::store_u64(entry, w.pos);
  detail::store_u32(entry + 8, static_cast<uint32_t>(stored->size()));
  detail::store_u32(entry + 12, crc32c(stored->data(), stored->size()));
  w.table.append(reinterpret_cast<const char*>(entry), sizeof(entry));
  w.append(stored->data(), stored->size());
  ++w.shard_samples;
  ++w.samples;
}

int64_t ShardWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) return w.samples;
  if (w.fd >= 0) w.close_shard();

  // From the first rename on, an old index would describe files that are being replaced: remove it
  // so that a crash here leaves no index rather than a wrong one.
  const std::string index_path = w.dir + "/" + detail::kIndexName;
  if (::unlink(index_path.c_str()) != 0 && errno != ENOENT)
    w.io_fail(index_path + " (removing the old index)", errno);
  for (size_t i = 0; i < w.closed.size(); ++i) {
    const std::string path = w.final_path(i);
    if (::rename((path + ".tmp").c_str(), path.c_str()) != 0)
      w.io_fail(path + " (renaming " + path + ".tmp)", errno);
  }
  w.tmp_path.clear();

  Json shards = Json::array();
  for (const ShardInfo& s : w.closed) {
    shards.push_back(Json::object({{"file", s.file},
                                   {"samples", s.samples},
                                   {"bytes", s.bytes},
                                   {"crc32c", detail::crc_hex(s.crc32c)}}));
  }
  Json index = Json::object({{"format", detail::kIndexFormat},
                             {"version", kShardVersion},
                             {"source", w.options.source},
                             {"schema", w.schema.to_json()},
                             {"samples", w.samples},
                             {"compression", w.options.zstd_level > 0 ? "zstd" : "none"},
                             {"zstd_level", w.options.zstd_level},
                             {"sample_align", w.options.sample_align},
                             {"shards", std::move(shards)}});
  // atomic_write_file fsyncs the directory, which also makes the renames above durable.
  io::atomic_write_file(index_path, index.dump(2) + "\n");
  w.finished = true;

  // Shards of an earlier, larger dataset in the same directory are no longer named by the index.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(w.dir, ec)) {
    const std::string name = entry.path().filename().string();
    int number = -1;
    char tail = 0;
    if (std::sscanf(name.c_str(), "shard-%d.ls%c", &number, &tail) == 2 && tail == 'h' &&
        name == detail::shard_file_name(number) && number >= static_cast<int>(w.closed.size()))
      ::unlink(entry.path().c_str());
  }
  return w.samples;
}

int64_t ShardWriter::samples() const {
  return impl_->samples;
}

size_t ShardWriter::bytes_written() const {
  return impl_->closed_bytes + (impl_->fd >= 0 ? impl_->pos : 0);
}

const Schema& ShardWriter::schema() const {
  return impl_->schema;
}

}  // namespace loom::data
