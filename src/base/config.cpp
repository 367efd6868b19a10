#include "loom/config.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>

#include "loom/error.h"

namespace loom::config {
namespace detail {

struct Knob {
  Spec spec;
  bool declared = false;  // false: only set() has seen the name so far
  bool has_override = false;
  std::string override_value;
};

}  // namespace detail

namespace {

using detail::Knob;

struct Registry {
  std::mutex mu;
  std::map<std::string, Knob> knobs;  // GUARDED_BY(mu); nodes never move or die
};

std::atomic<uint64_t> g_generation{0};

Registry& registry() {
  static Registry* r = new Registry();  // leaked on purpose: used from static destructors
  return *r;
}

struct Resolved {
  std::string value;
  const char* source;
};

Resolved resolve(const Knob& knob) {
  if (knob.has_override) return {knob.override_value, "api"};
  if (const char* env = std::getenv(knob.spec.name.c_str()); env && *env) return {env, "env"};
  return {knob.spec.default_value, "default"};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::string format_number(double x, Type t) {
  if (t == Type::Int) return std::to_string(static_cast<long long>(x));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", x);
  return buf;
}

bool parse_flag(const std::string& v, bool* out) {
  const std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    *out = true;
    return true;
  }
  if (s == "0" || s == "false" || s == "no" || s == "off") {
    *out = false;
    return true;
  }
  return false;
}

// Whether a non-empty value fits the spec.
bool valid(const Spec& spec, const std::string& v) {
  switch (spec.type) {
    case Type::String:
      return true;
    case Type::Path:
      return v.find('\n') == std::string::npos;
    case Type::Flag: {
      bool b;
      return parse_flag(v, &b);
    }
    case Type::Choice: {
      const std::string l = lower(v);
      for (const std::string& c : spec.choices) {
        if (c == l) return true;
      }
      return false;
    }
    case Type::Int: {
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      return end == v.c_str() + v.size() && errno == 0 && static_cast<double>(x) >= spec.min &&
             static_cast<double>(x) <= spec.max;
    }
    case Type::Real: {
      errno = 0;
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      return end == v.c_str() + v.size() && errno == 0 && std::isfinite(x) && x >= spec.min &&
             x <= spec.max;
    }
  }
  return false;
}

std::string source_words(const char* source) {
  const std::string s = source;
  return s == "env"   ? "from the environment"
         : s == "api" ? "set through config::set"
                      : "its default";
}

[[noreturn]] void throw_invalid(const Spec& spec, const std::string& v, const char* source) {
  const std::string shown = spec.secret ? std::string("<hidden>") : "'" + v + "'";
  LOOM_THROW(ValueError, "[config] ", spec.name, "=", shown, " (", source_words(source),
             ") is not valid: expected ", spec.expected(), " (", spec.description, ")");
}

// The checked value of a declared knob. Called with the registry's mutex held.
std::string checked(const Knob& knob) {
  Resolved r = resolve(knob);
  if (!r.value.empty() && knob.declared && !valid(knob.spec, r.value))
    throw_invalid(knob.spec, r.value, r.source);
  return r.value;
}

Knob& knob_for(Registry& r, const std::string& name) {  // with r.mu held
  auto [it, inserted] = r.knobs.try_emplace(name);
  if (inserted) it->second.spec.name = name;
  return it->second;
}

Knob* register_spec(Spec spec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Knob& k = knob_for(r, spec.name);
  if (!k.declared) {
    k.spec = std::move(spec);
    k.declared = true;
  }
  return &k;
}

}  // namespace

const char* type_name(Type t) {
  switch (t) {
    case Type::String:
      return "string";
    case Type::Int:
      return "int";
    case Type::Real:
      return "real";
    case Type::Flag:
      return "flag";
    case Type::Choice:
      return "choice";
    case Type::Path:
      return "path";
  }
  return "?";
}

std::string Spec::expected() const {
  switch (type) {
    case Type::String:
      return "a string";
    case Type::Path:
      return "a path";
    case Type::Flag:
      return "a flag: 1, true, yes, on or 0, false, no, off";
    case Type::Int:
    case Type::Real: {
      std::string what = type == Type::Int ? "an integer" : "a number";
      const bool no_max = max >= 9.2e18;
      return no_max
                 ? what + " of at least " + format_number(min, type)
                 : what + " from " + format_number(min, type) + " to " + format_number(max, type);
    }
    case Type::Choice: {
      std::string s = "one of ";
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + choices[i];
      return s;
    }
  }
  return "?";
}

void declare(Spec spec) {
  register_spec(std::move(spec));
}

std::string declare(const std::string& name, const std::string& default_value,
                    const std::string& description) {
  Spec spec;
  spec.name = name;
  spec.default_value = default_value;
  spec.description = description;
  Knob* k = register_spec(std::move(spec));
  std::lock_guard<std::mutex> lock(registry().mu);
  return checked(*k);
}

std::string get(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.knobs.find(name);
  if (it == r.knobs.end()) {
    const char* env = std::getenv(name.c_str());
    return env ? env : "";
  }
  return checked(it->second);
}

int64_t get_int(const std::string& name, int64_t fallback) {
  std::string v = get(name);
  if (v.empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  LOOM_CHECK(end == v.c_str() + v.size() && errno == 0, "[config] ", name,
             " must be an integer but is '", v, "'");
  return x;
}

void set(const std::string& name, const std::string& value) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Knob& k = knob_for(r, name);
  if (!value.empty() && k.declared && !valid(k.spec, value)) throw_invalid(k.spec, value, "api");
  k.has_override = !value.empty();
  k.override_value = value;
  g_generation.fetch_add(1, std::memory_order_release);
}

uint64_t generation() {
  return g_generation.load(std::memory_order_acquire);
}

std::vector<Entry> list() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<Entry> out;
  for (auto& [name, knob] : r.knobs) {
    Entry e;
    e.name = name;
    Resolved v = resolve(knob);
    e.source = v.source;
    e.value = knob.spec.secret && !v.value.empty() ? "(set)" : v.value;
    e.description = knob.spec.description;
    e.type = type_name(knob.spec.type);
    e.expected = knob.spec.expected();
    e.default_value = knob.spec.default_value;
    if (!v.value.empty() && knob.declared && !valid(knob.spec, v.value))
      e.error = "expected " + e.expected;
    out.push_back(std::move(e));
  }
  return out;
}

// ---- Setting objects

Setting::Setting(Spec spec) {
  knob_ = register_spec(std::move(spec));
  name_ = knob_->spec.name.c_str();
}

std::string Setting::value() const {
  LOOM_INTERNAL_ASSERT(knob_ != nullptr,
                       "[config] a setting was read before its declaration ran (static "
                       "initialisation order)");
  std::lock_guard<std::mutex> lock(registry().mu);
  return checked(*knob_);
}

bool Setting::is_set() const {
  LOOM_INTERNAL_ASSERT(knob_ != nullptr, "[config] a setting was read before its declaration ran");
  std::lock_guard<std::mutex> lock(registry().mu);
  return std::string(resolve(*knob_).source) != "default";
}

namespace {
Spec make_spec(const char* name, Type type, std::string default_value, const char* description) {
  Spec s;
  s.name = name;
  s.type = type;
  s.default_value = std::move(default_value);
  s.description = description;
  return s;
}
}  // namespace

StringSetting::StringSetting(const char* name, const char* default_value, const char* description,
                             bool secret)
    : Setting([&] {
        Spec s = make_spec(name, Type::String, default_value, description);
        s.secret = secret;
        return s;
      }()) {}

PathSetting::PathSetting(const char* name, const char* default_value, const char* description)
    : Setting(make_spec(name, Type::Path, default_value, description)) {}

IntSetting::IntSetting(const char* name, int64_t default_value, int64_t min, int64_t max,
                       const char* description)
    : Setting([&] {
        Spec s = make_spec(name, Type::Int, std::to_string(default_value), description);
        s.min = static_cast<double>(min);
        s.max = static_cast<double>(max);
        return s;
      }()) {}

IntSetting::IntSetting(const char* name, std::nullopt_t, int64_t min, int64_t max,
                       const char* description)
    : Setting([&] {
        Spec s = make_spec(name, Type::Int, "", description);
        s.min = static_cast<double>(min);
        s.max = static_cast<double>(max);
        return s;
      }()) {}

int64_t IntSetting::get() const {
  const std::string v = value();
  LOOM_INTERNAL_ASSERT(!v.empty(), "[config] ", name_, " has no default: read it with get_or()");
  return std::strtoll(v.c_str(), nullptr, 10);
}

int64_t IntSetting::get_or(int64_t computed_default) const {
  const std::string v = value();
  return v.empty() ? computed_default : std::strtoll(v.c_str(), nullptr, 10);
}

RealSetting::RealSetting(const char* name, double default_value, double min, double max,
                         const char* description)
    : Setting([&] {
        Spec s = make_spec(name, Type::Real, format_number(default_value, Type::Real), description);
        s.min = min;
        s.max = max;
        return s;
      }()) {}

double RealSetting::get() const {
  return std::strtod(value().c_str(), nullptr);
}

FlagSetting::FlagSetting(const char* name, bool default_value, const char* description)
    : Setting(make_spec(name, Type::Flag, default_value ? "1" : "0", description)) {}

bool FlagSetting::get() const {
  bool b = false;
  parse_flag(value(), &b);
  return b;
}

ChoiceSetting::ChoiceSetting(const char* name, const char* default_value,
                             std::initializer_list<const char*> choices, const char* description)
    : Setting([&] {
        Spec s = make_spec(name, Type::Choice, default_value, description);
        for (const char* c : choices) s.choices.push_back(lower(c));
        return s;
      }()) {}

std::string ChoiceSetting::get() const {
  return lower(value());
}

namespace {
const PathSetting kCacheDir(
    "LOOM_CACHE_DIR", "",
    "where derived data goes: Fashion-MNIST packed into shards, compiled kernels "
    "(default: $XDG_CACHE_HOME/loom, else ~/.cache/loom)");
}  // namespace

namespace {

const StringSetting kLogs("LOOM_LOGS", "",
                          "comma list of logs to print to stderr as things happen: recompiles, "
                          "guards, graph_breaks, output_code (the compiler), algo (collectives' "
                          "algorithm choices)");
constexpr std::string_view kLogNames[] = {"recompiles", "guards", "graph_breaks", "output_code",
                                          "algo"};
constexpr size_t kNumLogs = sizeof(kLogNames) / sizeof(kLogNames[0]);

}  // namespace

bool log_enabled(std::string_view name) {
  // Parsed again when a setting changes (generation()); a hot path pays an atomic load.
  static std::atomic<uint64_t> seen{~uint64_t{0}};
  static std::atomic<uint32_t> bits{0};
  static std::mutex mu;
  const uint64_t g = generation();
  if (seen.load(std::memory_order_acquire) != g) {
    std::lock_guard<std::mutex> lock(mu);
    uint32_t b = 0;
    std::stringstream ss(kLogs.get());
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      size_t k = 0;
      while (k < kNumLogs && kLogNames[k] != item) ++k;
      LOOM_CHECK(k < kNumLogs, "[config] LOOM_LOGS: unknown log '", item,
                 "' (recompiles, guards, graph_breaks, output_code, algo)");
      b |= 1u << k;
    }
    bits.store(b, std::memory_order_relaxed);
    seen.store(g, std::memory_order_release);
  }
  for (size_t k = 0; k < kNumLogs; ++k)
    if (kLogNames[k] == name) return (bits.load(std::memory_order_relaxed) >> k) & 1u;
  return false;
}

std::string cache_dir() {
  if (std::string d = kCacheDir.get(); !d.empty()) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/loom";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/loom";
  return "/tmp/loom-cache-" + std::to_string(::getuid());
}

}  // namespace loom::config
