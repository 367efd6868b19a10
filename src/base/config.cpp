#include "loom/config.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "loom/error.h"

namespace loom::config {
namespace {

struct Knob {
  std::string default_value;
  std::string description;
  bool has_override = false;
  std::string override_value;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Knob> knobs;  // GUARDED_BY(mu)
};

std::atomic<uint64_t> g_generation{0};

Registry& registry() {
  static Registry* r = new Registry();  // leaked on purpose: used from static destructors
  return *r;
}

std::string resolve(const std::string& name, const Knob* knob, std::string* source) {
  if (knob && knob->has_override) {
    if (source) *source = "api";
    return knob->override_value;
  }
  if (const char* env = std::getenv(name.c_str())) {
    if (source) *source = "env";
    return env;
  }
  if (source) *source = "default";
  return knob ? knob->default_value : std::string();
}

}  // namespace

std::string declare(const std::string& name, const std::string& default_value,
                    const std::string& description) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.knobs.try_emplace(name);
  if (inserted) {
    it->second.default_value = default_value;
    it->second.description = description;
  }
  return resolve(name, &it->second, nullptr);
}

std::string get(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.knobs.find(name);
  return resolve(name, it == r.knobs.end() ? nullptr : &it->second, nullptr);
}

int64_t get_int(const std::string& name, int64_t fallback) {
  std::string v = get(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  LOOM_CHECK(end && *end == '\0', "[config] ", name, " must be an integer but is '", v, "'");
  return x;
}

void set(const std::string& name, const std::string& value) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Knob& k = r.knobs[name];
  k.has_override = true;
  k.override_value = value;
  g_generation.fetch_add(1, std::memory_order_release);
}

uint64_t generation() { return g_generation.load(std::memory_order_acquire); }

std::vector<Entry> list() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<Entry> out;
  for (auto& [name, knob] : r.knobs) {
    Entry e;
    e.name = name;
    e.value = resolve(name, &knob, &e.source);
    e.description = knob.description;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace loom::config
