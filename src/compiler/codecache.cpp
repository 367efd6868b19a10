// The system compiler and the on-disk kernel cache (Note [Kernel cache] in compiler/codecache.h).
#include "compiler/codecache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "loom/config.h"
#include "loom/error.h"
#include "loom/parallel.h"

extern char** environ;

namespace loom::compiler {
namespace {

namespace fs = std::filesystem;

const config::StringSetting kCxx("LOOM_CXX", "c++",
                                 "the C++ compiler that builds the compiler's generated kernels");
const config::IntSetting kCacheMb("LOOM_COMPILE_CACHE_MB", 1024, 1, int64_t{1} << 30,
                                  "size limit of the compiled-kernel cache, in MiB (oldest files "
                                  "are removed past it)");

// Bumped whenever the generated code's calling convention or prelude changes meaning.
constexpr int kCodegenVersion = 1;

const std::vector<std::string>& compile_flags() {
  static const std::vector<std::string> flags = {
      "-O3",     "-march=native",   "-std=c++20",        "-fPIC",
      "-shared", "-fno-math-errno", "-ffp-contract=off", "-pipe",
      "-w"};
  return flags;
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Runs argv with stdout and stderr into `log`; returns the exit status (-1 when it could not
// start).
int run_process(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_head(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::string line, out;
  for (size_t i = 0; i < max_lines && std::getline(in, line); ++i) out += line + "\n";
  return out;
}

// The compiler's first --version line, once per compiler name.
std::string compiler_identity(const std::string& cxx, const std::string& dir) {
  static std::map<std::string, std::string> known;
  auto it = known.find(cxx);
  if (it != known.end()) return it->second;
  const std::string log = dir + "/.version." + std::to_string(::getpid());
  const int rc = run_process({cxx, "--version"}, log);
  std::string id = read_head(log, 1);
  ::unlink(log.c_str());
  LOOM_CHECK_AS(CompileError, rc == 0 && !id.empty(), "[compile] the C++ compiler '", cxx,
                "' (LOOM_CXX) did not run (", rc < 0 ? "not found" : "exit " + std::to_string(rc),
                "); the inductor backend needs one to build its kernels (backend eager does not)");
  while (!id.empty() && id.back() == '\n') id.pop_back();
  known[cxx] = id;
  return id;
}

std::string cpu_identity() {
  static const std::string id = [] {
    const CpuInfo info = cpu_info();
    std::string s = info.model;
    for (const auto& [name, has] : info.features) s += has ? " +" + name : " -" + name;
    return s;
  }();
  return id;
}

// Removes the oldest objects (and their sources) until the folder fits the limit.
void trim_cache(const std::string& dir) {
  const uint64_t limit = static_cast<uint64_t>(kCacheMb.get()) << 20;
  struct Item {
    fs::file_time_type time;
    uint64_t size;
    fs::path path;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const uint64_t size = e.file_size(ec);
    total += size;
    items.push_back(Item{e.last_write_time(ec), size, e.path()});
  }
  if (total <= limit) return;
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.time < b.time; });
  for (const Item& item : items) {
    if (total <= limit) break;
    if (fs::remove(item.path, ec)) total -= item.size;
  }
}

std::mutex g_mu;
std::map<std::string, SharedObject> g_loaded;  // GUARDED_BY(g_mu), by key

}  // namespace

std::string kernel_cache_dir() {
  return config::cache_dir() + "/compile";
}

namespace {

std::string hash_key(const std::string& text) {
  char key[40];
  std::snprintf(key, sizeof(key), "%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(text, 14695981039346656037ull)),
                static_cast<unsigned long long>(fnv1a(text, 0x9e3779b97f4a7c15ull)));
  return key;
}

std::string make_cache_dir() {
  const std::string dir = kernel_cache_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK_AS(CompileError, !ec, "[compile] cannot create the kernel cache folder ", dir, ": ",
                ec.message(), " (LOOM_CACHE_DIR sets where it goes)");
  return dir;
}

// cached_file without the lock.
CachedFile cached_file_locked(const std::string& key_text, const std::string& ext,
                              const CacheBuilder& build) {
  const std::string dir = make_cache_dir();
  CachedFile f;
  f.stem = dir + "/" + hash_key(key_text);
  f.path = f.stem + ext;
  struct stat st {};
  if (::stat(f.path.c_str(), &st) == 0) {
    f.cache_hit = true;
    ::utimensat(AT_FDCWD, f.path.c_str(), nullptr, 0);  // most recently used
    return f;
  }
  const std::string tmp = f.path + ".tmp." + std::to_string(::getpid());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    build(tmp, f.stem);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  f.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  LOOM_CHECK_AS(CompileError, ::rename(tmp.c_str(), f.path.c_str()) == 0,
                "[compile] cannot move the built kernel into the cache: ", f.path);
  trim_cache(dir);
  return f;
}

}  // namespace

CachedFile cached_file(const std::string& key_text, const std::string& ext,
                       const CacheBuilder& build) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cached_file_locked(key_text, ext, build);
}

SharedObject build_shared_object(const std::string& source) {
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string cxx = kCxx.get();
  std::string key_text = "loom codegen " + std::to_string(kCodegenVersion) + "\n" +
                         compiler_identity(cxx, make_cache_dir()) + "\n" + cpu_identity() + "\n";
  for (const std::string& f : compile_flags()) key_text += f + " ";
  key_text += "\n" + source;
  const std::string loaded_key = kernel_cache_dir() + "/" + hash_key(key_text);
  if (auto it = g_loaded.find(loaded_key); it != g_loaded.end()) {
    SharedObject so = it->second;
    so.cache_hit = true;
    so.build_ms = 0;
    return so;
  }
  const CachedFile file =
      cached_file_locked(key_text, ".so", [&](const std::string& tmp, const std::string& stem) {
        const std::string tmp_src = stem + ".cpp.tmp." + std::to_string(::getpid());
        {
          std::ofstream out(tmp_src, std::ios::binary);
          out << source;
          LOOM_CHECK_AS(CompileError, out.good(), "[compile] cannot write ", tmp_src);
        }
        std::vector<std::string> argv = {cxx};
        argv.insert(argv.end(), compile_flags().begin(), compile_flags().end());
        argv.insert(argv.end(), {"-o", tmp, "-x", "c++", tmp_src});
        const std::string log = stem + ".log." + std::to_string(::getpid());
        const int rc = run_process(argv, log);
        const std::string output = read_head(log, 20);
        ::unlink(log.c_str());
        if (rc != 0) {
          std::string cmd;
          for (const std::string& a : argv) cmd += a + " ";
          LOOM_THROW(CompileError, "[compile] building a generated kernel failed (", cxx, " exit ",
                     rc, "): ", cmd, "\nthe source is kept at ", tmp_src, "\n", output);
        }
        // The source first, so that a visible object always has its source beside it.
        ::rename(tmp_src.c_str(), (stem + ".cpp").c_str());
      });
  SharedObject so;
  so.path = file.path;
  so.source_path = file.stem + ".cpp";
  so.cache_hit = file.cache_hit;
  so.build_ms = file.build_ms;
  void* h = ::dlopen(so.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  LOOM_CHECK_AS(CompileError, h != nullptr, "[compile] cannot load the built kernel ", so.path,
                ": ", ::dlerror());
  // Never closed: a kernel of it may be running, and keeping it costs one mapping.
  so.handle = std::shared_ptr<void>(h, [](void*) {});
  g_loaded[loaded_key] = so;
  return so;
}

void* find_symbol(const SharedObject& so, const char* name) {
  void* p = ::dlsym(so.handle.get(), name);
  LOOM_CHECK_AS(CompileError, p != nullptr, "[compile] the built kernel ", so.path,
                " has no symbol ", name);
  return p;
}

}  // namespace loom::compiler
