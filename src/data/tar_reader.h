// A streaming reader of tar archives (data layer, internal to `loom data pack`).
//
// Reads ustar, old-GNU and pax archives member by member through a file descriptor and a bounded
// buffer, so a tar of any size is read in constant memory (plus the member being read). Understood:
// regular files ('0', '\0', '7'); directories ('5') and volume labels ('V'), both skipped; GNU long
// names ('L'; 'K' is read and dropped); pax per-file ('x') and global ('g') headers (keys `path`
// and `size`; others ignored, except GNU.sparse.* which is refused). Header checksums are verified
// (the unsigned and the signed sum are both accepted, as GNU tar does); sizes may be octal or
// base-256. Everything else -- links, devices, FIFOs, unknown types, bad checksums, truncation,
// absurd sizes, non-zero bytes where the end-of-archive blocks belong -- throws DataError naming
// the tar file, the member and its byte offset.
//
// Thread-safety: a TarReader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "loom/export.h"

namespace loom::data {

struct TarMember {
  std::string name;   // path inside the archive (after long-name and pax overrides)
  uint64_t size = 0;  // bytes of data
  uint64_t header_offset =
      0;                     // offset of the member's first header block (its 'L'/'x' block if any)
  uint64_t data_offset = 0;  // offset of its data
};

// A member name fit for an error message: control and non-ASCII bytes escaped, long names cut.
LOOM_API std::string printable_name(std::string_view name);

class LOOM_API TarReader {
 public:
  // Opens `path`; DataError when it cannot be opened.
  explicit TarReader(std::string path);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // Moves to the next regular file (skipping the rest of the current one and any directories).
  // Returns false after the end-of-archive blocks, having checked that only zero bytes follow.
  bool next(TarMember* member);
  // Reads the whole data of the member that next() returned into `out` (once per member).
  void read_data(std::string* out);

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }        // bytes consumed so far
  uint64_t file_size() const { return file_size_; }  // 0 when unknown (not a regular file)

 private:
  // Fills `dst` with exactly n bytes; returns how many there were before the end of the file.
  size_t read_fully(void* dst, size_t n);
  void skip(uint64_t n);
  // Reads a whole 512-byte block into `block`; false at a clean end of file. DataError when the
  // file ends inside the block (`what` names what was being read).
  bool read_block(unsigned char* block, const char* what, const std::string& last_member);
  // Reads `size` bytes of an extension header's data ('L', 'K', 'x', 'g') plus its padding.
  std::string read_extension(uint64_t size, char type, uint64_t header_offset,
                             const std::string& name);
  void parse_pax(const std::string& text, char type, uint64_t header_offset,
                 std::map<std::string, std::string>* into);
  void check_end(uint64_t first_zero_offset);
  [[noreturn]] void fail(const std::string& member, uint64_t offset, const std::string& what) const;
  // For damage between members: names the offset and the member before it.
  [[noreturn]] void fail_after(const std::string& last_member, uint64_t offset,
                               const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  bool seekable_ = false;
  uint64_t file_size_ = 0;
  uint64_t offset_ = 0;  // logical position: bytes handed out by the buffer so far
  std::string buffer_;
  size_t buf_pos_ = 0, buf_len_ = 0;
  bool ended_ = false;

  TarMember current_;
  uint64_t remaining_ = 0;  // data bytes of the current member not read yet
  uint64_t padding_ = 0;    // padding after its data
  bool data_read_ = true;
  std::map<std::string, std::string> global_pax_;  // from 'g' headers, for every later member
};

}  // namespace loom::data
