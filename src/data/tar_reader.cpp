// Streaming tar reader (see tar_reader.h).
#include "data/tar_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "loom/error.h"

namespace loom::data {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kBufferBytes = size_t{256} << 10;
// Sizes above this cannot come from a real file: the header is damaged.
constexpr uint64_t kAbsurdSize = uint64_t{1} << 50;
// 'L', 'K', 'x' and 'g' headers hold a name or a few key=value records; anything larger is damage.
constexpr uint64_t kMaxExtensionBytes = uint64_t{16} << 20;
// read_data() holds a member in memory, and a shard record stores its size in a u32.
constexpr uint64_t kMaxMemberBytes = (uint64_t{1} << 32) - 4096;

uint64_t padded(uint64_t n) {
  return (n + kBlock - 1) / kBlock * kBlock;
}

}  // namespace

std::string printable_name(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 300)) {
    if (c >= 0x20 && c < 0x7F && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02X", c);
      out += hex;
    }
  }
  if (s.size() > 300) out += "...";
  return out;
}

namespace {

// A NUL-terminated (or full-width) string field.
std::string field(const unsigned char* block, size_t at, size_t width) {
  const char* p = reinterpret_cast<const char*>(block + at);
  return std::string(p, strnlen(p, width));
}

// An octal number field as GNU tar writes it: optional leading spaces, digits, then NUL or spaces
// (or the end of the field). nullopt when there are no digits or stray characters.
std::optional<uint64_t> parse_octal(const unsigned char* p, size_t width) {
  size_t i = 0;
  while (i < width && p[i] == ' ') ++i;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < width && p[i] >= '0' && p[i] <= '7'; ++i, ++digits) {
    if (v > (UINT64_MAX >> 3)) return std::nullopt;
    v = (v << 3) | static_cast<uint64_t>(p[i] - '0');
  }
  if (digits == 0) return std::nullopt;
  for (; i < width; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  }
  return v;
}

bool all_zero(const unsigned char* p, size_t n) {
  return std::all_of(p, p + n, [](unsigned char c) { return c == 0; });
}

const char* link_kind(char type) {
  switch (type) {
    case '1':
      return "a hard link";
    case '2':
      return "a symbolic link";
    case '3':
      return "a character device";
    case '4':
      return "a block device";
    case '6':
      return "a FIFO";
    default:
      return nullptr;
  }
}

}  // namespace

TarReader::TarReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) LOOM_THROW(DataError, "[tar] cannot open ", path_, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    LOOM_THROW(DataError, "[tar] cannot read ", path_, ": ",
               S_ISDIR(st.st_mode) ? "it is a directory" : std::strerror(err));
  }
  if (S_ISREG(st.st_mode)) {
    seekable_ = true;
    file_size_ = static_cast<uint64_t>(st.st_size);
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  buffer_.resize(kBufferBytes);
}

TarReader::~TarReader() {
  if (fd_ >= 0) ::close(fd_);
}

void TarReader::fail(const std::string& member, uint64_t offset, const std::string& what) const {
  if (member.empty())
    LOOM_THROW(DataError, "[tar] ", path_, ": at byte offset ", offset, ": ", what);
  LOOM_THROW(DataError, "[tar] ", path_, ": member '", printable_name(member), "' at byte offset ",
             offset, ": ", what);
}

void TarReader::fail_after(const std::string& last_member, uint64_t offset,
                           const std::string& what) const {
  if (last_member.empty()) fail("", offset, what);
  LOOM_THROW(DataError, "[tar] ", path_, ": at byte offset ", offset, ", after member '",
             printable_name(last_member), "': ", what);
}

size_t TarReader::read_fully(void* dst, size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t got = 0;
  while (got < n) {
    if (buf_pos_ < buf_len_) {
      const size_t k = std::min(n - got, buf_len_ - buf_pos_);
      std::memcpy(out + got, buffer_.data() + buf_pos_, k);
      buf_pos_ += k;
      got += k;
      offset_ += k;
      continue;
    }
    // Large reads go straight to the destination; small ones refill the buffer.
    const bool direct = n - got >= buffer_.size();
    unsigned char* to = direct ? out + got : reinterpret_cast<unsigned char*>(buffer_.data());
    const size_t want = direct ? std::min(n - got, size_t{1} << 30) : buffer_.size();
    const ssize_t r = ::read(fd_, to, want);
    if (r < 0) {
      if (errno == EINTR) continue;
      LOOM_THROW(DataError, "[tar] ", path_, ": read failed at byte offset ", offset_, ": ",
                 std::strerror(errno));
    }
    if (r == 0) break;
    if (direct) {
      got += static_cast<size_t>(r);
      offset_ += static_cast<uint64_t>(r);
    } else {
      buf_pos_ = 0;
      buf_len_ = static_cast<size_t>(r);
    }
  }
  return got;
}

void TarReader::skip(uint64_t n) {
  const size_t from_buffer = static_cast<size_t>(std::min<uint64_t>(n, buf_len_ - buf_pos_));
  buf_pos_ += from_buffer;
  offset_ += from_buffer;
  n -= from_buffer;
  if (n == 0) return;
  if (seekable_) {
    // The caller has checked against file_size_ that these bytes exist.
    if (::lseek(fd_, static_cast<off_t>(offset_ + n), SEEK_SET) < 0) {
      LOOM_THROW(DataError, "[tar] ", path_, ": seek to byte offset ", offset_ + n,
                 " failed: ", std::strerror(errno));
    }
    offset_ += n;
    return;
  }
  std::string scratch(std::min<uint64_t>(n, kBufferBytes), '\0');
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
    const size_t got = read_fully(scratch.data(), k);
    if (got < k) {
      fail(current_.name, current_.header_offset,
           "truncated member data: the file ends at byte offset " + std::to_string(offset_));
    }
    n -= k;
  }
}

bool TarReader::read_block(unsigned char* block, const char* what, const std::string& last_member) {
  const uint64_t at = offset_;
  const size_t got = read_fully(block, kBlock);
  if (got == 0) return false;
  if (got < kBlock) {
    fail_after(last_member, at,
               std::string("truncated ") + what + ": the file ends at byte offset " +
                   std::to_string(offset_) + " inside the 512-byte block");
  }
  return true;
}

std::string TarReader::read_extension(uint64_t size, char type, uint64_t header_offset,
                                      const std::string& name) {
  const std::string label = std::string("'") + type + "' extension header";
  std::string data(static_cast<size_t>(padded(size)), '\0');
  if (read_fully(data.data(), data.size()) < data.size()) {
    fail(name, header_offset,
         "truncated " + label + ": " + std::to_string(size) + " bytes from byte offset " +
             std::to_string(header_offset + kBlock) + " but the file ends at byte offset " +
             std::to_string(offset_));
  }
  data.resize(static_cast<size_t>(size));
  return data;
}

// pax records: "LEN KEY=VALUE\n", LEN counting the whole record in decimal.
void TarReader::parse_pax(const std::string& text, char type, uint64_t header_offset,
                          std::map<std::string, std::string>* into) {
  size_t pos = 0;
  while (pos < text.size()) {
    const uint64_t at = header_offset + kBlock + pos;
    size_t i = pos;
    uint64_t len = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && len < text.size()) {
      len = len * 10 + static_cast<uint64_t>(text[i] - '0');
      ++i;
    }
    const bool ok = i > pos && i < text.size() && text[i] == ' ' && len > i - pos + 1 &&
                    len <= text.size() - pos && text[pos + len - 1] == '\n';
    if (!ok) {
      fail("", at,
           std::string("malformed pax record in a '") + type +
               "' header (expected \"LENGTH KEY=VALUE\\n\"): '" +
               printable_name(text.substr(pos, 60)) + "'");
    }
    const std::string record = text.substr(i + 1, pos + len - 1 - (i + 1));
    const size_t eq = record.find('=');
    if (eq == std::string::npos || eq == 0) {
      fail("", at,
           std::string("malformed pax record in a '") + type + "' header (no KEY=VALUE): '" +
               printable_name(record.substr(0, 60)) + "'");
    }
    (*into)[record.substr(0, eq)] = record.substr(eq + 1);
    pos += static_cast<size_t>(len);
  }
}

void TarReader::check_end(uint64_t first_zero_offset) {
  // After the first zero block only zero bytes may follow (the second zero block and the padding up
  // to the record size); anything else is a damaged or concatenated archive whose members would be
  // silently lost.
  std::string chunk(kBufferBytes, '\0');
  for (;;) {
    const uint64_t at = offset_;
    const size_t got = read_fully(chunk.data(), chunk.size());
    if (got == 0) return;
    const auto* p = reinterpret_cast<const unsigned char*>(chunk.data());
    const unsigned char* bad = std::find_if(p, p + got, [](unsigned char c) { return c != 0; });
    if (bad != p + got) {
      fail_after(current_.name, at + static_cast<uint64_t>(bad - p),
                 "non-zero bytes at byte offset " + std::to_string(at + (bad - p)) +
                     " after the end-of-archive block at byte offset " +
                     std::to_string(first_zero_offset) +
                     "; the archive is damaged or several archives were concatenated");
    }
  }
}

bool TarReader::next(TarMember* member) {
  if (ended_) return false;
  if (!data_read_) skip(remaining_ + padding_);
  data_read_ = true;
  remaining_ = padding_ = 0;

  std::string long_name;
  std::map<std::string, std::string> pax;
  uint64_t member_start = 0;  // offset of the member's first header ('L'/'x' or its own)
  bool started = false;
  unsigned char block[kBlock];
  for (;;) {
    const uint64_t at = offset_;
    if (!read_block(block, "header", current_.name)) {
      fail_after(current_.name, at,
                 "the archive ends at byte offset " + std::to_string(at) +
                     " without its end-of-archive blocks; is the file truncated?");
    }
    if (all_zero(block, kBlock)) {
      check_end(at);
      ended_ = true;
      return false;
    }
    const std::string raw_name = field(block, 0, 100);
    const auto stored = parse_octal(block + 148, 8);
    int64_t sum_unsigned = 0, sum_signed = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      const unsigned char c = (i >= 148 && i < 156) ? ' ' : block[i];
      sum_unsigned += c;
      sum_signed += static_cast<signed char>(c);
    }
    if (!stored || (static_cast<int64_t>(*stored) != sum_unsigned &&
                    static_cast<int64_t>(*stored) != sum_signed)) {
      fail(raw_name, at,
           "bad header checksum: the header stores " +
               (stored ? std::to_string(*stored)
                       : "'" + printable_name(field(block, 148, 8)) + "'") +
               " but its bytes sum to " + std::to_string(sum_unsigned) +
               " (is this a tar file, or is it damaged?)");
    }
    if (!started) member_start = at;
    started = true;

    // The member's name: pax path, then a GNU long name, then a global pax path, then the header.
    std::string name = raw_name;
    if (std::memcmp(block + 257, "ustar\0", 6) == 0 && block[345] != 0) {
      name = field(block, 345, 155) + "/" + raw_name;
    }
    auto pick = [&](const std::map<std::string, std::string>& m,
                    const char* key) -> const std::string* {
      auto it = m.find(key);
      return it != m.end() && !it->second.empty() ? &it->second : nullptr;
    };
    if (const std::string* p = pick(pax, "path")) {
      name = *p;
    } else if (!long_name.empty()) {
      name = long_name;
    } else if (const std::string* g = pick(global_pax_, "path")) {
      name = *g;
    }

    const char type = static_cast<char>(block[156]);
    uint64_t size = 0;
    if (block[124] & 0x80) {
      // GNU base-256: big-endian two's complement with the top bit set; bit 0x40 is the sign.
      if (block[124] & 0x40) fail(name, at, "negative size in the base-256 size field");
      size = block[124] & 0x3F;
      for (size_t i = 125; i < 136; ++i) {
        if (size > (UINT64_MAX >> 8)) fail(name, at, "absurd size in the base-256 size field");
        size = (size << 8) | block[i];
      }
    } else {
      const auto octal = parse_octal(block + 124, 12);
      if (!octal) fail(name, at, "bad size field '" + printable_name(field(block, 124, 12)) + "'");
      size = *octal;
    }
    const bool extension = type == 'L' || type == 'K' || type == 'x' || type == 'g';
    if (!extension) {
      const std::string* pax_size = pick(pax, "size");
      if (!pax_size) pax_size = pick(global_pax_, "size");
      if (pax_size) {
        uint64_t v = 0;
        for (char c : *pax_size) {
          if (c < '0' || c > '9' || v > kAbsurdSize) {
            fail(name, member_start, "bad pax size '" + printable_name(*pax_size) + "'");
          }
          v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        size = v;
      }
    }
    if (size > kAbsurdSize || (extension && size > kMaxExtensionBytes)) {
      fail(name, at,
           "absurd size " + std::to_string(size) + " bytes" +
               (extension ? std::string(" for a '") + type + "' header" : "") +
               "; the header is damaged");
    }
    const uint64_t data_at = offset_;
    if (seekable_ && padded(size) > file_size_ - std::min(file_size_, data_at)) {
      fail(name, member_start,
           "truncated member data: the header says " + std::to_string(size) +
               " bytes from byte offset " + std::to_string(data_at) + " (" +
               std::to_string(padded(size)) + " with padding) but the file ends at byte offset " +
               std::to_string(file_size_));
    }

    switch (type) {
      case 'L':
        long_name = read_extension(size, type, at, name);
        long_name.resize(strnlen(long_name.c_str(), long_name.size()));
        continue;
      case 'K':
        read_extension(size, type, at, name);
        continue;
      case 'x':
        parse_pax(read_extension(size, type, at, name), type, at, &pax);
        continue;
      case 'g':
        parse_pax(read_extension(size, type, at, name), type, at, &global_pax_);
        started = false;  // a global header belongs to no member
        continue;
      default:
        break;
    }
    current_.name = name;
    current_.header_offset = member_start;
    for (const auto* m : {&pax, &global_pax_}) {
      auto sparse = m->lower_bound("GNU.sparse.");
      if (sparse != m->end() && sparse->first.rfind("GNU.sparse.", 0) == 0) {
        fail(name, member_start,
             "sparse members (pax key '" + sparse->first + "') are not supported");
      }
    }
    if (type == 'V') {
      // A GNU volume label: no file, nothing to pack.
      skip(padded(size));
      long_name.clear();
      pax.clear();
      started = false;
      continue;
    }
    if (type == '5' || ((type == '0' || type == '\0') && !name.empty() && name.back() == '/')) {
      // A directory (old tars mark them with a trailing slash): its size, if any, is skipped.
      remaining_ = size;
      padding_ = padded(size) - size;
      skip(remaining_ + padding_);
      remaining_ = padding_ = 0;
      long_name.clear();
      pax.clear();
      started = false;
      continue;
    }
    if (const char* kind = link_kind(type)) {
      fail(name, member_start,
           std::string("the member is ") + kind +
               "; only regular files and directories can be packed (extract the archive with "
               "links dereferenced, e.g. `tar --dereference`, and re-create it)");
    }
    if (type != '0' && type != '\0' && type != '7') {
      char shown[16];
      if (type >= 0x20 && type < 0x7F) {
        std::snprintf(shown, sizeof(shown), "'%c'", type);
      } else {
        std::snprintf(shown, sizeof(shown), "0x%02X", static_cast<unsigned char>(type));
      }
      fail(name, member_start,
           std::string("unknown or unsupported typeflag ") + shown +
               " (regular files '0', directories '5', 'L', 'x' and 'g' headers are read)");
    }
    current_.size = size;
    current_.data_offset = data_at;
    remaining_ = size;
    padding_ = padded(size) - size;
    data_read_ = false;
    *member = current_;
    return true;
  }
}

void TarReader::read_data(std::string* out) {
  LOOM_INTERNAL_ASSERT(!data_read_, "TarReader::read_data called twice for one member");
  if (remaining_ > kMaxMemberBytes) {
    fail(current_.name, current_.header_offset,
         "member of " + std::to_string(remaining_) +
             " bytes is too large to read as one sample (limit " + std::to_string(kMaxMemberBytes) +
             ")");
  }
  out->resize(static_cast<size_t>(remaining_));
  const size_t got = read_fully(out->data(), out->size());
  if (got < out->size()) {
    fail(current_.name, current_.header_offset,
         "truncated member data: " + std::to_string(current_.size) +
             " bytes expected from byte offset " + std::to_string(current_.data_offset) +
             " but the file ends at byte offset " + std::to_string(offset_));
  }
  remaining_ = 0;
  data_read_ = true;
  skip(padding_);
  padding_ = 0;
}

}  // namespace loom::data
