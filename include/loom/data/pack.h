// Packing (data layer): converts a source into a shard dataset (shard.h). `loom data pack SRC OUT`.
//
// Sources, recognised by what SRC is:
//   - Fashion-MNIST / MNIST IDX files: a directory holding {train,t10k}-images-idx3-ubyte and
//     {train,t10k}-labels-idx1-ubyte (each optionally .gz). Columns: image (tensor uint8 [28, 28]),
//     label (int). `split` picks "train" or "test".
//   - WebDataset-style tar shards: a .tar file, or a directory containing only .tar files (packed
//   in
//     name order). Members are grouped into samples by key, the member path up to the first dot of
//     its last component (`a/b/000017.jpg` and `a/b/000017.cls` make one sample with key
//     `a/b/000017`; a leading "./" is dropped; a name without KEY.EXT is a DataError); each
//     extension becomes a column. Columns: __key__ (string), then one bytes
//     column per extension in sorted order, except `cls` / `label` / `index` holding a decimal
//     integer, which become int columns. Every sample must have the same extensions. ustar, GNU
//     long names ('L') and pax headers ('x', 'g': path and size) are read; directories are skipped;
//     links, devices, FIFOs, sparse files, bad header checksums, truncated members, a missing or
//     damaged end of archive and members whose key repeats non-contiguously (in any of the tars)
//     are DataErrors naming the tar file, the member and its byte offset.
//   - Any other directory: every regular file below it (sorted by relative path) is one sample with
//     columns path (string, relative) and data (bytes). Symbolic links are not followed.
//
// Thread-safety: a pack call uses only its arguments; concurrent calls with different OUT are fine.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "loom/data/shard.h"
#include "loom/export.h"

namespace loom::data {

struct PackOptions {
  ShardWriterOptions writer;
  std::string split = "train";  // IDX sources: train or test
  int64_t limit = 0;            // IDX sources: > 0 packs only the first `limit` samples
  // Called now and then with (samples packed, bytes written, bytes of source read, source bytes in
  // total or 0 when unknown). May be empty.
  std::function<void(int64_t samples, uint64_t written, uint64_t read, uint64_t total)> progress;
};

struct PackResult {
  std::string kind;  // "idx", "tar" or "files"
  int64_t samples = 0;
  int shards = 0;
  uint64_t bytes = 0;  // all shard files together
};

// Packs SRC into the dataset directory OUT. DataError for unreadable or malformed sources (naming
// the file and offset), ValueError when SRC does not exist or is none of the kinds above.
LOOM_API PackResult pack(const std::string& src, const std::string& out,
                         const PackOptions& options);
// With default options. (An overload, not a default argument: GCC 12 warns falsely about the
// default temporary's strings at every call site.)
LOOM_API PackResult pack(const std::string& src, const std::string& out);

// Where loom keeps data it derives from sources: $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else
// $HOME/.cache/loom.
LOOM_API std::string default_cache_dir();

// The dataset directory of a Fashion-MNIST split (IDX files in `idx_dir`) packed into shards under
// `cache_dir` (empty: default_cache_dir()), packing it first when it is missing or was packed from
// other files. `limit` > 0 keeps the first `limit` samples. Concurrent callers (several ranks) are
// serialised by a lock file, so the split is packed once. DataError (with the install hint) when
// the IDX files are missing.
LOOM_API std::string fashion_mnist_shards(const std::string& idx_dir, bool train, int64_t limit = 0,
                                          const std::string& cache_dir = "");

}  // namespace loom::data
