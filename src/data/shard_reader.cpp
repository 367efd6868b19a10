// ShardReader and SampleView: opens a dataset, checks every shard header against the index, and
// decodes records only after checking everything in them. See Note [shard layout] and Note [record
// layout] (loom/data/shard.h).
//
// Trust boundary: nothing read from disk is used before it is checked. A record is parsed only
// after its CRC matched, and the parser still checks every size against the record's length, so
// that a file crafted to pass the CRCs cannot make the reader touch memory outside the record
// either.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

#include "base/json_parse.h"
#include "data/shard_internal.h"
#include "loom/data/shard.h"
#include "loom/error.h"

namespace loom::data {

using detail::align_up;
using detail::load_u32;
using detail::load_u64;

namespace {

struct TableEntry {
  uint64_t offset;
  uint32_t bytes;
  uint32_t crc;
};

struct ShardFile {
  std::string path;
  int fd = -1;
  uint64_t samples = 0;
  uint64_t table_offset = 0;
  uint64_t data_offset = 0;
  uint64_t file_size = 0;
  uint32_t table_crc = 0;

  std::mutex mutex;
  std::atomic<bool> loaded{false};
  std::vector<TableEntry> table;  // written once under `mutex`, read-only after `loaded`

  ~ShardFile() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at offset; returns how many were there (fewer only at the end of the file).
size_t pread_full(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      LOOM_THROW(DataError, "[data.shard] cannot read ", path, " at byte offset ", offset + done,
                 ": ", std::strerror(errno));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

// One zstd decompression context per thread, reused across samples.
ZSTD_DCtx* thread_dctx() {
  struct Holder {
    ZSTD_DCtx* dctx = ZSTD_createDCtx();
    ~Holder() { ZSTD_freeDCtx(dctx); }
  };
  thread_local Holder holder;
  LOOM_CHECK_AS(OutOfMemoryError, holder.dctx != nullptr, "[data.shard] ZSTD_createDCtx failed");
  return holder.dctx;
}

std::string sizes_text(const int64_t* sizes, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

}  // namespace

struct ShardReader::Impl {
  std::string dir;
  std::string index_path;
  ShardReaderOptions options;
  Json index;
  Schema schema;
  int64_t size = 0;
  bool compressed = false;
  std::vector<ShardInfo> infos;
  std::vector<std::unique_ptr<ShardFile>> files;

  template <class... Args>
  [[noreturn]] void index_error(const Args&... why) const {
    LOOM_THROW(DataError, "[data.shard] ", index_path, ": ", why...);
  }

  // "[data.shard] DIR/shard-00001.lsh: sample 3 (dataset sample 103) at byte offset 8256: "
  std::string sample_where(int shard, int64_t local, uint64_t offset) const {
    return ::loom::detail::str_cat("[data.shard] ", files[shard]->path, ": sample ", local,
                                   " (dataset sample ", infos[shard].first + local,
                                   ") at byte offset ", offset, ": ");
  }

  void read_index();
  void open_shard(size_t i);
  void load_table(int shard) const;
  void parse_record(const SampleLocation& loc, const char* data, uint64_t size,
                    SampleView& view) const;
};

void ShardReader::Impl::read_index() {
  int fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    LOOM_THROW(DataError, "[data.shard] cannot open ", index_path, ": ", std::strerror(err),
               err == ENOENT ? "; is " + dir + " a shard dataset? (`loom data pack` makes one)"
                             : std::string());
  }
  std::string text;
  try {
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      LOOM_THROW(DataError, "[data.shard] ", index_path, " is not a regular file");
    text.resize(static_cast<size_t>(st.st_size));
    text.resize(pread_full(fd, text.data(), text.size(), 0, index_path));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);

  io::detail::JsonParseError err;
  if (!io::detail::parse_json(text, &index, &err))
    index_error("not valid JSON: ", err.reason, " at byte offset ", err.offset);
  if (!index.is_object()) index_error("expected a JSON object, got a JSON ", index.type_name());
  const Json* format = index.find("format");
  if (format == nullptr || !format->is_string() || format->as_string() != detail::kIndexFormat)
    index_error("\"format\" is ", format ? format->dump() : "missing", ", expected \"",
                detail::kIndexFormat, "\"; this is not a loom shard index");
  const Json* version = index.find("version");
  if (version == nullptr || !version->is_int())
    index_error("\"version\" is ", version ? version->dump() : "missing", ", expected an integer");
  if (version->as_int() != kShardVersion)
    index_error("unknown format version ", version->as_int(), " (this build reads version ",
                kShardVersion, ")");
  const Json* schema_json = index.find("schema");
  if (schema_json == nullptr) index_error("no \"schema\"");
  schema = Schema::from_json(*schema_json, index_path);
  const Json* samples = index.find("samples");
  if (samples == nullptr || !samples->is_int() || samples->as_int() < 0)
    index_error("\"samples\" is ", samples ? samples->dump() : "missing",
                ", expected a count >= 0");
  size = samples->as_int();
  const Json* compression = index.find("compression");
  if (compression == nullptr || !compression->is_string() ||
      (compression->as_string() != "none" && compression->as_string() != "zstd"))
    index_error("\"compression\" is ", compression ? compression->dump() : "missing",
                ", expected \"none\" or \"zstd\"");
  compressed = compression->as_string() == "zstd";

  const Json* shards = index.find("shards");
  if (shards == nullptr || !shards->is_array())
    index_error("\"shards\" is ", shards ? shards->type_name() : "missing", ", expected an array");
  int64_t first = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    const Json& s = shards->at(i);
    auto bad = [&](const char* what) { index_error("shard entry ", i, " ", s.dump(), ": ", what); };
    if (!s.is_object()) bad("expected an object");
    ShardInfo info;
    const Json* file = s.find("file");
    if (file == nullptr || !file->is_string() || file->as_string().empty() ||
        file->as_string().find('/') != std::string::npos || file->as_string() == "." ||
        file->as_string() == "..")
      bad("\"file\" must name a file inside the dataset directory");
    info.file = file->as_string();
    const Json* n = s.find("samples");
    if (n == nullptr || !n->is_int() || n->as_int() < 0) bad("\"samples\" must be a count >= 0");
    info.samples = n->as_int();
    const Json* bytes = s.find("bytes");
    if (bytes == nullptr || !bytes->is_int() || bytes->as_int() < 0)
      bad("\"bytes\" must be a size >= 0");
    info.bytes = static_cast<uint64_t>(bytes->as_int());
    const Json* crc = s.find("crc32c");
    if (crc == nullptr || !crc->is_string() ||
        !detail::parse_crc_hex(crc->as_string(), &info.crc32c))
      bad("\"crc32c\" must be 8 hex digits");
    info.first = first;
    if (__builtin_add_overflow(first, info.samples, &first)) bad("too many samples");
    infos.push_back(std::move(info));
  }
  if (first != size)
    index_error("the shards hold ", first, " samples together but \"samples\" says ", size);
}

void ShardReader::Impl::open_shard(size_t i) {
  const ShardInfo& info = infos[i];
  auto file = std::make_unique<ShardFile>();
  ShardFile& f = *file;
  f.path = dir + "/" + info.file;
  f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0)
    LOOM_THROW(DataError, "[data.shard] cannot open shard ", f.path, " (listed in ", index_path,
               "): ", std::strerror(errno));
  files.push_back(std::move(file));  // closes the descriptor if a check below throws

  auto fail = [&](const auto&... why) {
    LOOM_THROW(DataError, "[data.shard] ", f.path, ": ", why...);
  };
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail("cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("not a regular file");
  const uint64_t actual = static_cast<uint64_t>(st.st_size);
  if (options.check_sizes && actual != info.bytes)
    fail("the file has ", actual, " bytes but ", index_path, " says ", info.bytes,
         "; it was truncated or replaced");

  unsigned char h[detail::kHeaderBytes];
  const size_t got = pread_full(f.fd, h, sizeof(h), 0, f.path);
  if (got < sizeof(h))
    fail("the file has ", got, " bytes, fewer than the ", detail::kHeaderBytes,
         "-byte header; it is truncated or not a shard");
  if (std::memcmp(h, detail::kShardMagic, sizeof(detail::kShardMagic)) != 0)
    fail("bad magic at byte offset 0; not a loom shard file");
  const uint32_t version = load_u32(h + detail::kOffVersion);
  if (version != kShardVersion)
    fail("unknown format version ", version, " at byte offset ", detail::kOffVersion,
         " (this build reads version ", kShardVersion, ")");
  const uint32_t schema_bytes = load_u32(h + detail::kOffSchemaBytes);
  if (schema_bytes > detail::kMaxSchemaBytes)
    fail("the schema size at byte offset ", detail::kOffSchemaBytes, " is ", schema_bytes,
         " bytes, more than the limit of ", detail::kMaxSchemaBytes, "; the header is corrupt");
  std::string schema_text(schema_bytes, '\0');
  if (pread_full(f.fd, schema_text.data(), schema_bytes, detail::kHeaderBytes, f.path) !=
      schema_bytes)
    fail("the file ends inside the ", schema_bytes, "-byte schema at byte offset ",
         detail::kHeaderBytes, "; it is truncated");
  const uint32_t stored_crc = load_u32(h + detail::kOffHeaderCrc);
  const uint32_t computed = detail::header_crc(h, schema_text.data(), schema_text.size());
  if (stored_crc != computed)
    fail("the header (byte offsets 0 to ", detail::kHeaderBytes + schema_bytes,
         ") fails its CRC32C: computed ", detail::crc_hex(computed), ", stored ",
         detail::crc_hex(stored_crc), " at byte offset ", detail::kOffHeaderCrc,
         "; the shard is corrupt");

  const uint32_t flags = load_u32(h + detail::kOffFlags);
  if ((flags & ~detail::kFlagZstd) != 0)
    fail("unknown flags 0x", std::hex, flags, std::dec, " at byte offset ", detail::kOffFlags);
  if (((flags & detail::kFlagZstd) != 0) != compressed)
    fail("the header says compression ", (flags & detail::kFlagZstd) ? "zstd" : "none", " but ",
         index_path, " says ", compressed ? "zstd" : "none");
  f.samples = load_u64(h + detail::kOffSamples);
  f.table_offset = load_u64(h + detail::kOffTableOffset);
  f.data_offset = load_u64(h + detail::kOffDataOffset);
  f.file_size = load_u64(h + detail::kOffFileSize);
  f.table_crc = load_u32(h + detail::kOffTableCrc);
  if (f.samples != static_cast<uint64_t>(info.samples))
    fail("the header holds ", f.samples, " samples but ", index_path, " says ", info.samples);
  if (f.file_size != info.bytes)
    fail("the header says the file has ", f.file_size, " bytes but ", index_path, " says ",
         info.bytes);
  if (load_u32(h + detail::kOffReserved) != 0)
    fail("reserved field at byte offset ", detail::kOffReserved, " is not 0");
  const bool aligned = f.table_offset % kShardAlign == 0 && f.data_offset % kShardAlign == 0 &&
                       f.file_size % kShardAlign == 0;
  const bool ordered = f.data_offset >= detail::kHeaderBytes + schema_bytes &&
                       f.data_offset <= f.table_offset && f.table_offset <= f.file_size &&
                       f.samples <= (f.file_size - f.table_offset) / detail::kTableEntryBytes;
  if (!aligned || !ordered)
    fail("bad layout in the header: data_offset ", f.data_offset, ", table_offset ", f.table_offset,
         ", ", f.samples, " samples, file_size ", f.file_size, " (offsets must be multiples of ",
         kShardAlign, " with the records, then the table, inside the file)");

  Json schema_json;
  io::detail::JsonParseError err;
  if (!io::detail::parse_json(schema_text, &schema_json, &err))
    fail("the schema is not valid JSON: ", err.reason, " at byte offset ",
         detail::kHeaderBytes + err.offset);
  Schema shard_schema = Schema::from_json(schema_json, f.path);
  if (!(shard_schema == schema))
    fail("its schema ", schema_json.dump(), " differs from the schema in ", index_path, ": ",
         schema.to_json().dump());
}

void ShardReader::Impl::load_table(int shard) const {
  ShardFile& f = *files[shard];
  if (f.loaded.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.loaded.load(std::memory_order_relaxed)) return;

  const uint64_t nbytes = f.samples * detail::kTableEntryBytes;  // checked at open: fits the file
  std::string raw(nbytes, '\0');
  const size_t got = pread_full(f.fd, raw.data(), raw.size(), f.table_offset, f.path);
  if (got != nbytes)
    LOOM_THROW(DataError, "[data.shard] ", f.path, ": the file ends at byte offset ",
               f.table_offset + got, ", inside the sample table at byte offset ", f.table_offset,
               " (", nbytes, " bytes); it is truncated");
  const uint32_t crc = crc32c(raw.data(), raw.size());
  if (crc != f.table_crc)
    LOOM_THROW(DataError, "[data.shard] ", f.path, ": the sample table at byte offset ",
               f.table_offset, " (", nbytes, " bytes) fails its CRC32C: computed ",
               detail::crc_hex(crc), ", header says ", detail::crc_hex(f.table_crc),
               "; the shard is corrupt");
  std::vector<TableEntry> table(f.samples);
  uint64_t previous_end = f.data_offset;
  for (uint64_t i = 0; i < f.samples; ++i) {
    const char* e = raw.data() + i * detail::kTableEntryBytes;
    TableEntry t{load_u64(e), load_u32(e + 8), load_u32(e + 12)};
    if (t.bytes == 0 || t.offset < previous_end || t.offset > f.table_offset ||
        t.bytes > f.table_offset - t.offset)
      LOOM_THROW(DataError, sample_where(shard, static_cast<int64_t>(i), t.offset),
                 "its table entry (byte offset ", f.table_offset + i * detail::kTableEntryBytes,
                 ") places the ", t.bytes, "-byte record outside the records [", previous_end, ", ",
                 f.table_offset, ") that follow the previous sample; the table is corrupt");
    previous_end = t.offset + t.bytes;
    table[i] = t;
  }
  f.table = std::move(table);
  f.loaded.store(true, std::memory_order_release);
}

// Note [record layout]. Every size is checked against `size` before it is used.
void ShardReader::Impl::parse_record(const SampleLocation& loc, const char* data, uint64_t size,
                                     SampleView& view) const {
  const size_t C = schema.columns.size();
  auto fail = [&](const auto&... why) {
    LOOM_THROW(DataError, sample_where(loc.shard, loc.local, loc.offset), "bad record",
               compressed ? " (after decompression)" : "", ": ", why...);
  };
  const uint64_t prefix = detail::record_prefix_bytes(C);
  if (size < prefix) fail("it has ", size, " bytes, too few for the sizes of its ", C, " columns");
  view.schema_ = &schema;
  view.payloads_.resize(C);
  uint64_t at = prefix;
  for (size_t i = 0; i < C; ++i) {
    const Column& c = schema.columns[i];
    const uint64_t n = load_u32(data + 4 * i);
    if (align_up(n, 8) > size - at)
      fail("column \"", c.name, "\" claims ", n, " bytes at record byte ", at,
           " but the record has ", size, " bytes");
    const char* p = data + at;
    switch (c.type) {
      case ColumnType::Bytes:
      case ColumnType::String:
        break;
      case ColumnType::Int:
        if (n != 8) fail("int column \"", c.name, "\" has ", n, " bytes, expected 8");
        break;
      case ColumnType::Tensor: {
        if (n < 8) fail("tensor column \"", c.name, "\" has ", n, " bytes, too few for its header");
        const uint32_t ndim = load_u32(p);
        if (load_u32(p + 4) != 0 || ndim > detail::kMaxTensorRank || 8 + 8 * uint64_t{ndim} > n)
          fail("tensor column \"", c.name, "\" has a bad header (ndim ", ndim, ") at record byte ",
               at);
        int64_t sizes[detail::kMaxTensorRank];
        uint64_t numel = 1;
        bool overflow = false;
        for (uint32_t d = 0; d < ndim; ++d) {
          sizes[d] = static_cast<int64_t>(load_u64(p + 8 + 8 * d));
          if (sizes[d] < 0) fail("tensor column \"", c.name, "\" has negative size ", sizes[d]);
          overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(sizes[d]), &numel);
        }
        uint64_t nbytes = 0;
        overflow |= __builtin_mul_overflow(numel, uint64_t{element_size(c.dtype)}, &nbytes);
        if (overflow || nbytes != n - 8 - 8 * uint64_t{ndim})
          fail("tensor column \"", c.name, "\" has shape ", sizes_text(sizes, ndim), " of ",
               dtype_name(c.dtype), " but ", n - 8 - 8 * uint64_t{ndim}, " bytes of elements");
        bool fits = c.any_rank || ndim == c.shape.size();
        for (uint32_t d = 0; fits && !c.any_rank && d < ndim; ++d)
          fits = c.shape[d] == -1 || c.shape[d] == sizes[d];
        if (!fits)
          fail("tensor column \"", c.name, "\" has shape ", sizes_text(sizes, ndim),
               " but the schema says ", detail::shape_text(c));
        break;
      }
    }
    view.payloads_[i] = std::string_view(p, n);
    at += align_up(n, 8);
  }
  if (at != size) fail("it has ", size - at, " bytes after its last column");
}

ShardReader::ShardReader(const std::string& dir, ShardReaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& r = *impl_;
  LOOM_CHECK(!dir.empty(), "[data.shard] the dataset directory is an empty path");
  r.dir = dir;
  while (r.dir.size() > 1 && r.dir.back() == '/') r.dir.pop_back();
  r.index_path = r.dir + "/" + detail::kIndexName;
  r.options = options;
  r.read_index();
  r.files.reserve(r.infos.size());
  for (size_t i = 0; i < r.infos.size(); ++i) r.open_shard(i);
}

ShardReader::~ShardReader() = default;

const std::string& ShardReader::dir() const {
  return impl_->dir;
}
const Schema& ShardReader::schema() const {
  return impl_->schema;
}
int64_t ShardReader::size() const {
  return impl_->size;
}
const std::vector<ShardInfo>& ShardReader::shards() const {
  return impl_->infos;
}
bool ShardReader::compressed() const {
  return impl_->compressed;
}
const Json& ShardReader::index() const {
  return impl_->index;
}

std::string ShardReader::shard_path(int shard) const {
  LOOM_CHECK_INDEX(shard >= 0 && static_cast<size_t>(shard) < impl_->files.size(),
                   "[data.shard] shard ", shard, " is out of range for ", impl_->dir, " with ",
                   impl_->files.size(), " shards");
  return impl_->files[shard]->path;
}

SampleLocation ShardReader::locate(int64_t id) const {
  const Impl& r = *impl_;
  LOOM_CHECK_INDEX(id >= 0 && id < r.size, "[data.shard] sample ", id, " is out of range for ",
                   r.dir, " with ", r.size, " samples");
  // The last shard starting at or before `id`; empty shards share their successor's `first`.
  auto it = std::upper_bound(r.infos.begin(), r.infos.end(), id,
                             [](int64_t v, const ShardInfo& s) { return v < s.first; });
  const int shard = static_cast<int>(it - r.infos.begin()) - 1;
  r.load_table(shard);
  const ShardFile& f = *r.files[shard];
  SampleLocation loc;
  loc.shard = shard;
  loc.local = id - r.infos[shard].first;
  const TableEntry& e = f.table[static_cast<size_t>(loc.local)];
  loc.fd = f.fd;
  loc.offset = e.offset;
  loc.bytes = e.bytes;
  loc.crc32c = e.crc;
  return loc;
}

SampleView ShardReader::decode(const SampleLocation& loc, const void* stored,
                               std::string& scratch) const {
  const Impl& r = *impl_;
  LOOM_CHECK_INDEX(loc.shard >= 0 && static_cast<size_t>(loc.shard) < r.files.size() &&
                       loc.local >= 0 && loc.local < r.infos[loc.shard].samples,
                   "[data.shard] sample location (shard ", loc.shard, ", sample ", loc.local,
                   ") is out of range for ", r.dir);
  const uint32_t crc = crc32c(stored, loc.bytes);
  if (crc != loc.crc32c)
    LOOM_THROW(DataError, r.sample_where(loc.shard, loc.local, loc.offset), "the ", loc.bytes,
               "-byte record fails its CRC32C (computed ", detail::crc_hex(crc), ", table says ",
               detail::crc_hex(loc.crc32c), "); the shard is corrupt");
  SampleView view;
  if (!r.compressed) {
    r.parse_record(loc, static_cast<const char*>(stored), loc.bytes, view);
    return view;
  }
  const unsigned long long content = ZSTD_getFrameContentSize(stored, loc.bytes);
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
      content > UINT32_MAX)
    LOOM_THROW(DataError, r.sample_where(loc.shard, loc.local, loc.offset),
               "the record is not a zstd frame of a known size up to 4 GiB");
  try {
    scratch.resize(static_cast<size_t>(content));
  } catch (const std::bad_alloc&) {
    LOOM_THROW(OutOfMemoryError, r.sample_where(loc.shard, loc.local, loc.offset),
               "cannot allocate ", content, " bytes to decompress the record into");
  }
  const size_t n =
      ZSTD_decompressDCtx(thread_dctx(), scratch.data(), scratch.size(), stored, loc.bytes);
  if (ZSTD_isError(n))
    LOOM_THROW(DataError, r.sample_where(loc.shard, loc.local, loc.offset),
               "zstd cannot decompress the ", loc.bytes, "-byte record: ", ZSTD_getErrorName(n));
  if (n != content)
    LOOM_THROW(DataError, r.sample_where(loc.shard, loc.local, loc.offset), "zstd produced ", n,
               " bytes but the frame says ", content);
  r.parse_record(loc, scratch.data(), content, view);
  return view;
}

SampleView ShardReader::read(int64_t id, std::string& buffer, std::string& scratch) const {
  const SampleLocation loc = locate(id);
  buffer.resize(loc.bytes);
  const std::string& path = impl_->files[loc.shard]->path;
  const size_t got = pread_full(loc.fd, buffer.data(), loc.bytes, loc.offset, path);
  if (got != loc.bytes)
    LOOM_THROW(DataError, impl_->sample_where(loc.shard, loc.local, loc.offset),
               "the file ends after ", got, " of the record's ", loc.bytes,
               " bytes; it is truncated");
  return decode(loc, buffer.data(), scratch);
}

void ShardReader::verify(void (*progress)(uint64_t done, uint64_t total, void* ctx),
                         void* ctx) const {
  const Impl& r = *impl_;
  uint64_t total = 0;
  for (const ShardInfo& s : r.infos) total += s.bytes;
  uint64_t done = 0;
  if (progress) progress(done, total, ctx);
  constexpr size_t kChunk = size_t{4} << 20;
  std::string chunk;
  for (size_t i = 0; i < r.files.size(); ++i) {
    const ShardFile& f = *r.files[i];
    const ShardInfo& info = r.infos[i];
    struct stat st;
    if (::fstat(f.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != info.bytes)
      LOOM_THROW(DataError, "[data.shard] ", f.path, ": the file has ",
                 static_cast<uint64_t>(st.st_size), " bytes but ", r.index_path, " says ",
                 info.bytes, "; it was truncated or replaced");
    r.load_table(static_cast<int>(i));
    chunk.resize(kChunk);
    uint32_t file_crc = 0;
    size_t next = 0;          // the first record not yet fully hashed
    uint32_t record_crc = 0;  // of its bytes seen so far
    for (uint64_t begin = 0; begin < info.bytes; begin += kChunk) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, info.bytes - begin));
      const size_t got = pread_full(f.fd, chunk.data(), want, begin, f.path);
      if (got != want)
        LOOM_THROW(DataError, "[data.shard] ", f.path, ": the file ends at byte offset ",
                   begin + got, " but ", r.index_path, " says it has ", info.bytes,
                   " bytes; it is truncated");
      file_crc = crc32c(chunk.data(), got, file_crc);
      const uint64_t end = begin + got;
      // Records are in file order and do not overlap (checked when the table loaded).
      while (next < f.table.size() && f.table[next].offset < end) {
        const TableEntry& e = f.table[next];
        const uint64_t from = std::max(e.offset, begin);
        const uint64_t to = std::min(e.offset + e.bytes, end);
        record_crc = crc32c(chunk.data() + (from - begin), to - from, record_crc);
        if (e.offset + e.bytes > end) break;
        if (record_crc != e.crc)
          LOOM_THROW(DataError,
                     r.sample_where(static_cast<int>(i), static_cast<int64_t>(next), e.offset),
                     "the ", e.bytes, "-byte record fails its CRC32C (computed ",
                     detail::crc_hex(record_crc), ", table says ", detail::crc_hex(e.crc),
                     "); the shard is corrupt");
        record_crc = 0;
        ++next;
      }
      done += got;
      if (progress) progress(done, total, ctx);
    }
    if (file_crc != info.crc32c)
      LOOM_THROW(DataError, "[data.shard] ", f.path, ": the whole-file CRC32C is ",
                 detail::crc_hex(file_crc), " but ", r.index_path, " says ",
                 detail::crc_hex(info.crc32c),
                 "; bytes outside the samples changed or the file was replaced");
  }
}

// ---- SampleView ----

std::string_view SampleView::bytes(size_t col) const {
  LOOM_CHECK_INDEX(col < payloads_.size(), "[data.shard] column ", col,
                   " is out of range for a sample with ", payloads_.size(), " columns");
  return payloads_[col];
}

int64_t SampleView::integer(size_t col) const {
  std::string_view p = bytes(col);
  const Column& c = schema_->columns[col];
  LOOM_CHECK(c.type == ColumnType::Int, "[data.shard] column \"", c.name, "\" is a ",
             column_type_name(c.type), " column, not an int column");
  return static_cast<int64_t>(load_u64(p.data()));
}

SampleView::TensorRef SampleView::tensor(size_t col) const {
  std::string_view p = bytes(col);
  const Column& c = schema_->columns[col];
  LOOM_CHECK(c.type == ColumnType::Tensor, "[data.shard] column \"", c.name, "\" is a ",
             column_type_name(c.type), " column, not a tensor column");
  // Checked by ShardReader::decode: the header fits and the sizes match the element bytes.
  const uint32_t ndim = load_u32(p.data());
  TensorRef t{c.dtype, std::vector<int64_t>(ndim), p.data() + 8 + 8 * size_t{ndim}};
  for (uint32_t d = 0; d < ndim; ++d)
    t.sizes[d] = static_cast<int64_t>(load_u64(p.data() + 8 + 8 * d));
  return t;
}

int64_t SampleView::TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

}  // namespace loom::data
