// Building generated C++ into shared objects, and the on-disk cache of them (compiler layer;
// internal).
//
// Note [Kernel cache]
//   A generated source is built by the system C++ compiler (LOOM_CXX, default c++) into a shared
//   object that loom loads with dlopen. Objects live in <cache dir>/compile/ (config::cache_dir()),
//   named by a 128-bit hash of everything that decides their bytes: the source, the compiler's
//   identity (its --version line), the flags, the CPU (model and features: the code is built for
//   -march=native) and the code generator's version. A process that finds the file loads it without
//   compiling (a warm first call); one that does not builds it under a temporary name in the same
//   folder and renames it into place, which is atomic, so concurrent processes that build the same
//   kernel each load a complete file and the last rename wins with identical bytes. Each hit
//   touches the file; after a build the folder is trimmed to LOOM_COMPILE_CACHE_MB, oldest first.
//   Within a process, a source built once is loaded once (a map from key to the loaded object).
//
//   A compiler that fails (or is missing) is a CompileError carrying its first lines of output and
//   the path of the source it was given; never a silent fallback.
//
// Thread-safety: build_shared_object may be called from several threads; a process-wide mutex
// serialises builds and the in-process map.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace loom::compiler {

struct SharedObject {
  std::shared_ptr<void> handle;  // dlopen's handle; never closed while kernels may run
  std::string path;              // the cached .so
  std::string source_path;       // the source kept beside it
  bool cache_hit = false;        // found on disk or already loaded in this process
  double build_ms = 0;           // the compiler's wall time when it ran
};

// A file of the cache: <dir>/<hash of key_text><ext>.
struct CachedFile {
  std::string path;
  std::string stem;  // the path without its extension, for files kept beside it
  bool cache_hit = false;
  double build_ms = 0;
};
// Writes the file at `tmp` (and may write others beside `stem`); throws on failure.
using CacheBuilder = std::function<void(const std::string& tmp, const std::string& stem)>;
// The cached file for key_text, built when missing, renamed into place atomically, the folder
// trimmed to its limit afterwards.
CachedFile cached_file(const std::string& key_text, const std::string& ext,
                       const CacheBuilder& build);

// Builds (or finds) `source`; throws CompileError when the compiler fails.
SharedObject build_shared_object(const std::string& source);
// The symbol `name` of a loaded object; CompileError when missing.
void* find_symbol(const SharedObject& so, const char* name);
// <cache dir>/compile
std::string kernel_cache_dir();

}  // namespace loom::compiler
