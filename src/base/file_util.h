// Internal to the base layer: POSIX file helpers shared by the safetensors reader/writer and the
// public atomic_write_file / read_file. Not thread-safe per object; distinct objects are
// independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::io::detail {

// Writes one file atomically. Bytes go to a temporary file next to the target; commit() fsyncs it,
// renames it over the target and fsyncs the directory. Destroying an AtomicFile that was not
// committed (an exception on the way) removes the temporary. Errors throw DataError naming the
// target path.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, size_t nbytes);
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const char* action, int err);

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// A regular file opened for positional reads. `component` prefixes error messages ("safetensors").
class InputFile {
 public:
  InputFile(const std::string& path, const char* component);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  uint64_t size() const { return size_; }
  // Reads up to nbytes at offset; returns how many were read (fewer only at the end of the file).
  size_t read_at(uint64_t offset, void* data, size_t nbytes) const;

 private:
  std::string path_;
  const char* component_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace loom::io::detail
