// Warnings printed once and recorded (see loom/warning.h).
#include "loom/warning.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace loom {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Warning> seen;  // guarded by mu
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: warnings may come during exit
  return *r;
}

std::atomic<bool> g_print{true};

}  // namespace

void warn_once(const std::string& key, const std::string& message) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (Warning& w : r.seen) {
      if (w.key == key) {
        ++w.count;
        return;
      }
    }
    r.seen.push_back(Warning{key, message, 1});
  }
  if (g_print.load(std::memory_order_relaxed)) {
    std::fprintf(stderr, "[loom] warning: %s\n", message.c_str());
  }
}

std::vector<Warning> warnings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.seen;
}

WarningsToStderr::WarningsToStderr(bool on) : previous_(g_print.exchange(on)) {}

WarningsToStderr::~WarningsToStderr() {
  g_print.store(previous_);
}

}  // namespace loom
