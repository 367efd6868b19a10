// Runtime configuration (base layer).
//
// Every knob is a LOOM_* environment variable, also settable through this API (the API wins). Each
// is declared once, with its type, default and description, by a Setting object at namespace scope
// in the file that owns it; these register when libloom loads, so `loom info` lists every setting
// before any has been read. A value is read when asked for (from the environment as it is then) and
// checked against its type: a bad one is a ValueError naming the variable, the value, where it came
// from and what is expected. Thread-safe: values are read and written under a mutex; hot paths
// cache what they need and read again when generation() moves.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/export.h"

namespace loom::config {

enum class Type : uint8_t {
  String,  // anything
  Int,     // a decimal integer in [min, max]
  Real,    // a decimal number in [min, max]
  Flag,    // 1/0, true/false, yes/no, on/off (any case)
  Choice,  // one of `choices` (any case)
  Path,    // a file or directory path
};
LOOM_API const char* type_name(Type t);  // "int", "real", ...

// What a setting accepts. An empty value (unset, or set to "") means the default.
struct LOOM_API Spec {
  std::string name;
  Type type = Type::String;
  std::string default_value;         // "" when the code decides (the description then says how)
  std::string description;           // one line
  double min = 0, max = 0;           // Int, Real: inclusive range
  std::vector<std::string> choices;  // Choice, in lower case
  bool secret = false;               // list() shows whether it is set, never the value
  // "an integer from 1 to 64", "one of auto, tcp, shm", ...
  std::string expected() const;
};

struct Entry {
  std::string name;         // e.g. "LOOM_NUM_THREADS"
  std::string value;        // current value ("" when unset; "(set)" for a secret)
  std::string source;       // "default", "env" or "api"
  std::string description;  // one line
  std::string type;         // type_name()
  std::string expected;     // Spec::expected()
  std::string default_value;
  std::string error;  // why the current value is not valid; "" when it is
};

// Registers a setting (the first declaration of a name wins). Setting objects call this.
LOOM_API void declare(Spec spec);
// Registers a string setting with its default and description. Returns its current value.
LOOM_API std::string declare(const std::string& name, const std::string& default_value,
                             const std::string& description);
// Current value: the API override, else the environment, else the declared default; checked against
// the setting's spec (ValueError naming name, value, source and what is expected).
LOOM_API std::string get(const std::string& name);
LOOM_API int64_t get_int(const std::string& name, int64_t fallback);
// Overrides a setting; ValueError when the value does not fit its spec. "" removes the override, so
// the environment or the default applies again.
LOOM_API void set(const std::string& name, const std::string& value);
// Changes with every set(): a hot path may cache a value it read and read it again only when this
// moved (it then misses a change of the environment made after the read).
LOOM_API uint64_t generation();
// Every declared setting (and any name set() without a declaration), by name.
LOOM_API std::vector<Entry> list();

// LOOM_LOGS: the logs printed to stderr as things happen, a comma list of: recompiles, guards,
// graph_breaks, output_code (the compiler), algo (the collectives' algorithm choices). Whether
// `name` (one of those) is on; an unknown name in the setting is a ValueError listing the known.
LOOM_API bool log_enabled(std::string_view name);

// Where loom keeps what it derives and may rebuild (packed datasets, compiled kernels):
// $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else ~/.cache/loom, else /tmp/loom-cache-<uid>.
LOOM_API std::string cache_dir();

namespace detail {
struct Knob;
}

// A declared setting. Define one per LOOM_* variable at namespace scope, in the file that owns it:
//   const config::IntSetting kTcpChannels("LOOM_TCP_CHANNELS", 2, 1, 64, "TCP connections per
//   peer");
// and read it with kTcpChannels.get().
class LOOM_API Setting {
 public:
  const char* name() const { return name_; }
  // The raw value ("" when unset and without a default), checked against the spec.
  std::string value() const;
  // Whether the API or the environment gave a (non-empty) value.
  bool is_set() const;

 protected:
  explicit Setting(Spec spec);
  const char* name_;    // the spec's name, owned by the registry (lives for the process)
  detail::Knob* knob_;  // owned by the registry (lives for the process)
};

class LOOM_API StringSetting : public Setting {
 public:
  StringSetting(const char* name, const char* default_value, const char* description,
                bool secret = false);
  std::string get() const { return value(); }
};

class LOOM_API PathSetting : public Setting {
 public:
  PathSetting(const char* name, const char* default_value, const char* description);
  std::string get() const { return value(); }
};

class LOOM_API IntSetting : public Setting {
 public:
  IntSetting(const char* name, int64_t default_value, int64_t min, int64_t max,
             const char* description);
  // A setting whose default the code computes (say so in the description): read it with get_or().
  IntSetting(const char* name, std::nullopt_t, int64_t min, int64_t max, const char* description);
  int64_t get() const;
  int64_t get_or(int64_t computed_default) const;
};

class LOOM_API RealSetting : public Setting {
 public:
  RealSetting(const char* name, double default_value, double min, double max,
              const char* description);
  double get() const;
};

class LOOM_API FlagSetting : public Setting {
 public:
  FlagSetting(const char* name, bool default_value, const char* description);
  bool get() const;
};

class LOOM_API ChoiceSetting : public Setting {
 public:
  ChoiceSetting(const char* name, const char* default_value,
                std::initializer_list<const char*> choices, const char* description);
  std::string get() const;  // one of the choices, in lower case
};

}  // namespace loom::config
