// Whole-file helpers (base layer): atomic replacement of a file, reading a whole file, and removal
// of the temporaries that killed writers left behind. They sit in base, below memory, because the
// memory tools write and read allocation traces (Note [File helpers in base]); io.h includes this
// header, so they keep their names in loom::io. Thread-safe (distinct calls are independent).
//
// Note [File helpers in base]
//   The allocation-trace writer (memory layer) needs the same atomic write as checkpoints; rather
//   than let memory reach up to io, the file helpers moved down. They need nothing but POSIX.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/export.h"

namespace loom::io {

// Replaces `path` with `bytes` atomically: writes `path`.tmp.<pid>.<n> in the same directory,
// fsyncs it, renames it over `path` and fsyncs the directory. On failure the temporary file is
// removed, `path` is untouched and DataError names the path and the system error. An existing
// file's permission bits are kept; a new file gets 0666 minus the umask.
LOOM_API void atomic_write_file(const std::string& path, std::string_view bytes);

// What remove_orphan_temp_files removed.
struct OrphanSweep {
  std::vector<std::string> files;  // names within the directory
  uint64_t bytes = 0;
};

// Removes the temporary files (`NAME.tmp.<pid>.<n>`) that atomic writes in `dir` left behind when
// their writer was killed mid-write. A writer locks its temporary while it writes, so only files
// that no live process holds are removed: never a write in progress. A file whose pid is alive but
// unlocked (the pid was reused) goes once it is min_age_seconds old. A missing directory is not an
// error.
LOOM_API OrphanSweep remove_orphan_temp_files(const std::string& dir,
                                              double min_age_seconds = 60.0);

// The whole content of a file; DataError naming the path and the system error when it cannot be
// read.
LOOM_API std::string read_file(const std::string& path);

}  // namespace loom::io
