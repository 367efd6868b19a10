// Warnings (base layer): what loom did that a user should know and that is not an error: a slower
// path it took, a fallback, a compiled function that ran eagerly. Never fall back in silence.
//
// warn_once prints a message the first time its key is seen in the process, to stderr, as
// "[loom] warning: <message>", and records it; later calls with the same key only count. The
// record (warnings()) lets tests and tools show what happened without parsing stderr. Printing can
// be turned off for a scope (WarningsToStderr(false)), recording cannot.
//
// Thread-safety: every function is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom {

struct Warning {
  std::string key;      // what identifies the situation, e.g. "cuda.gemm.no_algorithm:float16"
  std::string message;  // what happened, where, and what it costs
  int64_t count = 0;    // how many times it happened
};

// Records (and prints, the first time) the warning `key`.
LOOM_API void warn_once(const std::string& key, const std::string& message);

// Every warning recorded so far, in the order first seen.
LOOM_API std::vector<Warning> warnings();

// Printing on or off for the lifetime of this object (process-wide; restores the previous
// setting). Recording continues either way.
class LOOM_API WarningsToStderr {
 public:
  explicit WarningsToStderr(bool on);
  ~WarningsToStderr();
  WarningsToStderr(const WarningsToStderr&) = delete;
  WarningsToStderr& operator=(const WarningsToStderr&) = delete;

 private:
  bool previous_;
};

}  // namespace loom
