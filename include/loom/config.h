// Runtime configuration (base layer).
//
// Every knob is a LOOM_* environment variable read once, lazily, and also settable through this API
// (the API wins). `loom config` lists them with their current value and where it came from.
// Thread-safe: values are read and written under a mutex; hot paths cache what they need.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::config {

struct Entry {
  std::string name;         // e.g. "LOOM_NUM_THREADS"
  std::string value;        // current value ("" when unset)
  std::string source;       // "default", "env" or "api"
  std::string description;  // one line
};

// Registers a knob with its default and description (idempotent). Returns its current value.
LOOM_API std::string declare(const std::string& name, const std::string& default_value,
                             const std::string& description);
// Current value: the API override, else the environment, else the declared default.
LOOM_API std::string get(const std::string& name);
LOOM_API int64_t get_int(const std::string& name, int64_t fallback);
LOOM_API void set(const std::string& name, const std::string& value);
// Changes with every set(): a hot path may cache a value it read and read it again only when this
// moved (the environment is read once, as above).
LOOM_API uint64_t generation();
LOOM_API std::vector<Entry> list();

}  // namespace loom::config
