// Packing sources into shard datasets (see loom/data/pack.h).
#include "loom/data/pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "data/tar_reader.h"
#include "loom/datasets.h"
#include "loom/error.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

// Reports progress at least every kProgressSamples samples, more often when samples are large.
constexpr int64_t kProgressSamples = 1000;
constexpr uint64_t kProgressBytes = uint64_t{8} << 20;

class Progress {
 public:
  Progress(const PackOptions& options, uint64_t total) : fn_(options.progress), total_(total) {}
  void sample(const ShardWriter& w, uint64_t read) {
    if (!fn_) return;
    if (w.samples() - last_samples_ >= kProgressSamples || read - last_read_ >= kProgressBytes) {
      report(w, read);
    }
  }
  void report(const ShardWriter& w, uint64_t read) {
    if (!fn_) return;
    last_samples_ = w.samples();
    last_read_ = read;
    fn_(w.samples(), w.bytes_written(), read, total_);
  }

 private:
  const std::function<void(int64_t, uint64_t, uint64_t, uint64_t)>& fn_;
  uint64_t total_;
  int64_t last_samples_ = 0;
  uint64_t last_read_ = 0;
};

Column column(std::string name, ColumnType type) {
  Column c;
  c.name = std::move(name);
  c.type = type;
  return c;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The writer options with `source` filled in unless the caller set it.
ShardWriterOptions with_source(const ShardWriterOptions& given, const std::string& text) {
  ShardWriterOptions w = given;
  if (w.source.empty()) w.source = text;
  return w;
}

// ---- IDX (Fashion-MNIST / MNIST) ----

bool is_idx_dir(const std::string& dir) {
  std::error_code ec;
  for (const char* split : {"train", "t10k"}) {
    for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
      for (const char* gz : {"", ".gz"}) {
        if (fs::is_regular_file(fs::path(dir) / (std::string(split) + kind + gz), ec)) return true;
      }
    }
  }
  return false;
}

void pack_idx(const std::string& src, const std::string& out, const PackOptions& options) {
  LOOM_CHECK(options.split == "train" || options.split == "test",
             "[data pack] split must be 'train' or ", "'test' but got '", options.split, "'");
  const MnistSplit split = load_fashion_mnist(src, options.split == "train");
  const int64_t n =
      options.limit > 0 ? std::min(options.limit, split.images.size(0)) : split.images.size(0);
  Schema schema;
  schema.columns.push_back(Column{"image", ColumnType::Tensor, DType::UInt8, {28, 28}, false});
  schema.columns.push_back(column("label", ColumnType::Int));
  ShardWriter writer(out, std::move(schema),
                     with_source(options.writer, "idx " + options.split + " split of " + src));
  constexpr uint64_t kImageBytes = 28 * 28;
  const auto* images = static_cast<const uint8_t*>(split.images.data_ptr());
  const auto* labels = static_cast<const int64_t*>(split.labels.data_ptr());
  Progress progress(options, static_cast<uint64_t>(n) * (kImageBytes + 1));
  for (int64_t i = 0; i < n; ++i) {
    writer.add({Value::of_tensor(DType::UInt8, {28, 28}, images + i * kImageBytes),
                Value::of_int(labels[i])});
    progress.sample(writer, static_cast<uint64_t>(i + 1) * (kImageBytes + 1));
  }
  writer.finish();
  progress.report(writer, static_cast<uint64_t>(n) * (kImageBytes + 1));
}

// ---- WebDataset-style tar shards ----

bool is_int_extension(const std::string& ext) {
  return ext == "cls" || ext == "label" || ext == "index";
}

struct Member {
  std::string name;
  std::string ext;
  uint64_t offset = 0;
  std::string data;
};

struct Sample {
  std::string key;
  size_t tar = 0;  // index into the tar list
  std::vector<Member> members;
};

// Where a key was first seen, to name both places when it comes back.
struct KeySeen {
  size_t tar;
  uint64_t offset;
};

class TarPacker {
 public:
  TarPacker(std::vector<std::string> tars, std::string out, const PackOptions& options,
            uint64_t total)
      : tars_(std::move(tars)),
        out_(std::move(out)),
        options_(options),
        progress_(options, total) {}

  void run() {
    for (size_t t = 0; t < tars_.size(); ++t) {
      TarReader reader(tars_[t]);
      TarMember m;
      while (reader.next(&m)) {
        auto [key, ext] = split_name(m, t);
        if (current_ && (current_->key != key || current_->tar != t)) flush();
        if (!current_) start(key, t, m);
        for (const Member& prev : current_->members) {
          if (prev.ext == ext) {
            fail(t, m.name, m.header_offset,
                 "sample '" + printable_name(key) + "' has two '." + ext +
                     "' members; the first is '" + prev.name + "' at byte offset " +
                     std::to_string(prev.offset));
          }
        }
        Member member{m.name, ext, m.header_offset, {}};
        reader.read_data(&member.data);
        current_->members.push_back(std::move(member));
        read_ = done_bytes_ + reader.offset();
      }
      if (current_) flush();
      done_bytes_ += reader.offset();
      read_ = done_bytes_;
    }
    if (!writer_) {
      LOOM_THROW(DataError, "[data pack] ",
                 tars_.size() == 1 ? "tar file " + tars_[0] + " holds"
                                   : "the " + std::to_string(tars_.size()) + " tar files from " +
                                         tars_[0] + " on hold",
                 " no regular file members; nothing to pack");
    }
    writer_->finish();
    progress_.report(*writer_, read_);
  }

 private:
  [[noreturn]] void fail(size_t tar, const std::string& member, uint64_t offset,
                         const std::string& what) {
    LOOM_THROW(DataError, "[data pack] tar ", tars_[tar], ": member '", printable_name(member),
               "' at byte offset ", offset, ": ", what);
  }

  // `a/b/000017.seg.png` -> key `a/b/000017`, extension `seg.png` (a leading "./" is dropped).
  std::pair<std::string, std::string> split_name(const TarMember& m, size_t tar) {
    std::string name = m.name;
    while (name.rfind("./", 0) == 0) name.erase(0, 2);
    const size_t slash = name.rfind('/');
    const size_t base = slash == std::string::npos ? 0 : slash + 1;
    const size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base || dot + 1 == name.size()) {
      fail(tar, m.name, m.header_offset,
           "cannot split the name into a sample key and an extension (expected KEY.EXT, e.g. "
           "000017.jpg)");
    }
    return {name.substr(0, dot), name.substr(dot + 1)};
  }

  void start(const std::string& key, size_t tar, const TarMember& m) {
    auto [it, fresh] = seen_.try_emplace(key, KeySeen{tar, m.header_offset});
    if (!fresh) {
      const KeySeen& first = it->second;
      fail(tar, m.name, m.header_offset,
           "sample key '" + printable_name(key) +
               "' reappears here, but its members were already read from byte offset " +
               std::to_string(first.offset) + (first.tar == tar ? "" : " of " + tars_[first.tar]) +
               "; the members of one sample must be contiguous");
    }
    current_.emplace();
    current_->key = key;
    current_->tar = tar;
  }

  void make_writer(const Sample& s) {
    Schema schema;
    schema.columns.push_back(column("__key__", ColumnType::String));
    for (const Member& m : s.members) extensions_.push_back(m.ext);
    std::sort(extensions_.begin(), extensions_.end());
    for (const std::string& ext : extensions_) {
      schema.columns.push_back(
          column(ext, is_int_extension(ext) ? ColumnType::Int : ColumnType::Bytes));
    }
    first_key_ = s.key;
    const std::string more =
        tars_.size() > 1 ? " and " + std::to_string(tars_.size() - 1) + " more" : "";
    writer_ = std::make_unique<ShardWriter>(out_, std::move(schema),
                                            with_source(options_.writer, "tar " + tars_[0] + more));
  }

  int64_t parse_int(const Member& m, size_t tar) {
    size_t b = 0, e = m.data.size();
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (b < e && space(m.data[b])) ++b;
    while (e > b && space(m.data[e - 1])) --e;
    const std::string text = m.data.substr(b, e - b);
    size_t i = text.size() > 0 && (text[0] == '-' || text[0] == '+') ? 1 : 0;
    bool ok = i < text.size();
    uint64_t v = 0;
    for (; ok && i < text.size(); ++i) {
      ok = text[i] >= '0' && text[i] <= '9' && v <= (uint64_t{INT64_MAX} - 9) / 10;
      v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (!ok) {
      std::string shown;
      for (char c : m.data.substr(0, 40)) shown += (c >= 0x20 && c < 0x7F) ? c : '?';
      fail(tar, m.name, m.offset,
           "a '." + m.ext + "' member must hold a decimal integer but holds '" + shown +
               (m.data.size() > 40 ? "...'" : "'"));
    }
    return text[0] == '-' ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  }

  void flush() {
    Sample s = std::move(*current_);
    current_.reset();
    if (!writer_) make_writer(s);
    std::sort(s.members.begin(), s.members.end(),
              [](const Member& a, const Member& b) { return a.ext < b.ext; });
    // Both lists are sorted: walk them together to find the first difference.
    for (size_t i = 0, j = 0; i < extensions_.size() || j < s.members.size();) {
      if (j == s.members.size() || (i < extensions_.size() && extensions_[i] < s.members[j].ext)) {
        const Member& first = s.members.front();
        fail(s.tar, first.name, first.offset,
             "sample '" + printable_name(s.key) + "' has no '." + extensions_[i] +
                 "' member, but the first sample '" + printable_name(first_key_) +
                 "' has one; every sample needs the same extensions");
      }
      if (i == extensions_.size() || s.members[j].ext < extensions_[i]) {
        const Member& extra = s.members[j];
        fail(s.tar, extra.name, extra.offset,
             "sample '" + printable_name(s.key) + "' has an extra '." + extra.ext +
                 "' member that the first sample '" + printable_name(first_key_) +
                 "' lacks; every sample needs the same extensions");
      }
      ++i;
      ++j;
    }
    std::vector<Value> values;
    values.reserve(s.members.size() + 1);
    values.push_back(Value::of_string(s.key));
    for (const Member& m : s.members) {
      values.push_back(is_int_extension(m.ext) ? Value::of_int(parse_int(m, s.tar))
                                               : Value::of_bytes(m.data));
    }
    writer_->add(values);
    progress_.sample(*writer_, read_);
  }

  std::vector<std::string> tars_;
  std::string out_;
  const PackOptions& options_;
  Progress progress_;
  std::unique_ptr<ShardWriter> writer_;
  std::vector<std::string> extensions_;  // sorted, from the first sample
  std::string first_key_;
  std::optional<Sample> current_;
  std::unordered_map<std::string, KeySeen> seen_;
  uint64_t done_bytes_ = 0;  // of the tars finished
  uint64_t read_ = 0;
};

// The .tar files directly in `dir`, sorted, when there is at least one and nothing else.
std::optional<std::vector<std::string>> tar_dir_members(const std::string& dir) {
  std::vector<std::string> tars;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!ends_with(name, ".tar") || !it->is_regular_file(ec)) return std::nullopt;
    tars.push_back(it->path().string());
  }
  if (ec) LOOM_THROW(DataError, "[data pack] cannot list directory ", dir, ": ", ec.message());
  if (tars.empty()) return std::nullopt;
  std::sort(tars.begin(), tars.end());
  return tars;
}

void pack_tars(std::vector<std::string> tars, const std::string& out, const PackOptions& options) {
  uint64_t total = 0;
  for (const std::string& t : tars) {
    std::error_code ec;
    const auto n = fs::file_size(t, ec);
    if (!ec) total += n;
  }
  TarPacker(std::move(tars), out, options, total).run();
}

// ---- any directory of files ----

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) LOOM_THROW(DataError, "[data pack] cannot open ", path, ": ", std::strerror(errno));
  std::string data;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      LOOM_THROW(DataError, "[data pack] read of ", path, " failed at byte offset ", data.size(),
                 ": ", std::strerror(err));
    }
    if (r == 0) break;
    data.append(chunk, static_cast<size_t>(r));
  }
  ::close(fd);
  return data;
}

void pack_files(const std::string& src, const std::string& out, const PackOptions& options) {
  struct File {
    std::string rel;
    uint64_t size;
  };
  std::vector<File> files;
  uint64_t total = 0;
  std::error_code ec;
  // The iterator does not follow directory symlinks; file symlinks are skipped below.
  fs::recursive_directory_iterator it(src, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (st.type() != fs::file_type::regular) continue;
    const uint64_t size = it->file_size(ec);
    if (ec) break;
    files.push_back({fs::relative(it->path(), src).generic_string(), size});
    total += size;
  }
  if (ec) {
    LOOM_THROW(DataError, "[data pack] cannot list ", src, " (at ",
               (it != end ? it->path().string() : src), "): ", ec.message());
  }
  LOOM_CHECK(!files.empty(), "[data pack] ", src, " holds no regular files; nothing to pack");
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.rel < b.rel; });

  Schema schema;
  schema.columns.push_back(column("path", ColumnType::String));
  schema.columns.push_back(column("data", ColumnType::Bytes));
  ShardWriter writer(out, std::move(schema), with_source(options.writer, "files in " + src));
  Progress progress(options, total);
  uint64_t read = 0;
  for (const File& f : files) {
    const std::string data = read_file((fs::path(src) / f.rel).string());
    writer.add({Value::of_string(f.rel), Value::of_bytes(data)});
    read += data.size();
    progress.sample(writer, read);
  }
  writer.finish();
  progress.report(writer, read);
}

// True when `inner` is `outer` or lies below it.
bool is_within(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::absolute(inner), ec);
  const fs::path b = fs::weakly_canonical(fs::absolute(outer), ec);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (bi->empty()) continue;  // a trailing separator
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

}  // namespace

PackResult pack(const std::string& src, const std::string& out, const PackOptions& options) {
  std::error_code ec;
  const fs::file_status st = fs::status(src, ec);
  LOOM_CHECK(fs::exists(st), "[data pack] source ", src, " does not exist");
  LOOM_CHECK(!out.empty(), "[data pack] the output directory must not be empty");
  PackResult result;
  if (fs::is_regular_file(st)) {
    LOOM_CHECK(!ends_with(src, ".tar.gz") && !ends_with(src, ".tgz") && !ends_with(src, ".tar.zst"),
               "[data pack] ", src,
               " is a compressed tar; decompress it first (e.g. `gzip -dk` or ",
               "`zstd -d`) and pack the .tar");
    LOOM_CHECK(ends_with(src, ".tar"), "[data pack] source ", src,
               " is a file but not a .tar; expected ",
               "a .tar file, a directory of .tar files, a Fashion-MNIST IDX directory or a "
               "directory of files");
    result.kind = "tar";
    pack_tars({src}, out, options);
  } else if (fs::is_directory(st)) {
    const bool idx = is_idx_dir(src);
    auto tars = idx ? std::nullopt : tar_dir_members(src);
    result.kind = idx ? "idx" : tars ? "tar" : "files";
    LOOM_CHECK(result.kind == "idx" || !is_within(out, src), "[data pack] the output directory ",
               out, " lies inside the source ", src, "; a later pack would read its own output");
    if (result.kind == "idx") {
      pack_idx(src, out, options);
    } else if (tars) {
      pack_tars(std::move(*tars), out, options);
    } else {
      pack_files(src, out, options);
    }
  } else {
    LOOM_THROW(ValueError, "[data pack] source ", src,
               " is neither a regular file nor a directory");
  }
  ShardReader reader(out);
  result.samples = reader.size();
  result.shards = static_cast<int>(reader.shards().size());
  for (const ShardInfo& s : reader.shards()) result.bytes += s.bytes;
  return result;
}

PackResult pack(const std::string& src, const std::string& out) {
  return pack(src, out, PackOptions());
}

}  // namespace loom::data
