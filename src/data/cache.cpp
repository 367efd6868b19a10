// Derived-data cache: Fashion-MNIST packed into shards once (see loom/data/pack.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "data/cache_internal.h"
#include "loom/config.h"
#include "loom/data/pack.h"
#include "loom/data/shard.h"
#include "loom/datasets.h"
#include "loom/error.h"
#include "loom/io.h"

namespace loom::data {

namespace fs = std::filesystem;

std::string default_cache_dir() {
  return config::cache_dir();
}

namespace {

// Identifies the source files: their paths, sizes and modification times.
std::string source_identity(const std::string& idx_dir, bool train, int64_t limit) {
  std::string id = std::string("fashion-mnist ") + (train ? "train" : "test") + " from " + idx_dir;
  const char* prefix = train ? "train" : "t10k";
  for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
    for (const char* ext : {"", ".gz"}) {
      const std::string p = idx_dir + "/" + prefix + kind + ext;
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0) {
        // Appended piece by piece: GCC 12 reports a false -Wrestrict on "literal" + std::string.
        ((((id += ' ') += prefix) += kind) += ext) += ':';
        (id += std::to_string(st.st_size)) += ':';
        id += std::to_string(st.st_mtim.tv_sec);
      }
    }
  }
  if (limit > 0) id += " first " + std::to_string(limit);
  return id;
}

// Both IDX files of the split exist, plain or gzipped.
bool source_present(const std::string& idx_dir, bool train) {
  const char* prefix = train ? "train" : "t10k";
  for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
    const std::string p = idx_dir + "/" + prefix + kind;
    if (!fs::exists(p) && !fs::exists(p + ".gz")) return false;
  }
  return true;
}

}  // namespace

std::string fashion_mnist_shards(const std::string& idx_dir, bool train, int64_t limit,
                                 const std::string& cache_dir) {
  const std::string root = cache_dir.empty() ? default_cache_dir() : cache_dir;
  const std::string name = std::string("fashion-mnist-") + (train ? "train" : "test") +
                           (limit > 0 ? "-first" + std::to_string(limit) : std::string());
  const std::string dir = root + "/" + name;
  const std::string identity = source_identity(idx_dir, train, limit);
  if (packed_from(dir, identity)) return dir;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    LOOM_THROW(DataError, "[data.cache] cannot create the cache directory ", root, ": ",
               ec.message());
  FileLock lock(root + "/." + name + ".lock");
  if (packed_from(dir, identity)) return dir;  // another process packed it while we waited
  // A missing file gets the IDX reader's error, which says how to install the dataset; otherwise
  // pack() is the only reader of the files.
  if (!source_present(idx_dir, train)) (void)load_fashion_mnist(idx_dir, train);
  PackOptions o;
  o.split = train ? "train" : "test";
  o.limit = limit;
  o.writer.source = identity;
  pack(idx_dir, dir, o);
  return dir;
}

}  // namespace loom::data
