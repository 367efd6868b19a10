// set_thread_name(): a registry of thread names by OS thread id, for the profiler and the OS.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "loom/parallel.h"

namespace loom {
namespace {

struct Names {
  std::mutex mu;
  std::unordered_map<uint64_t, std::string> by_tid;  // GUARDED_BY(mu)
};

Names& names() {
  static Names* n = new Names();  // leaked on purpose: threads exit after static destructors
  return *n;
}

// Removes the thread's entry when it exits, so that a later thread given the same id starts
// unnamed.
struct Forget {
  uint64_t tid = 0;
  ~Forget() {
    if (tid == 0) return;
    Names& n = names();
    std::lock_guard<std::mutex> lock(n.mu);
    n.by_tid.erase(tid);
  }
};
thread_local Forget t_forget;

}  // namespace

void set_thread_name(const std::string& name) {
  const auto tid = static_cast<uint64_t>(::syscall(SYS_gettid));
  {
    Names& n = names();
    std::lock_guard<std::mutex> lock(n.mu);
    n.by_tid[tid] = name;
  }
  t_forget.tid = tid;
  // Not the main thread's: its OS name is the process's (what ps and pgrep show).
  if (tid != static_cast<uint64_t>(::getpid()))
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

std::string thread_name_of(uint64_t os_tid) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  auto it = n.by_tid.find(os_tid);
  return it == n.by_tid.end() ? std::string() : it->second;
}

}  // namespace loom
