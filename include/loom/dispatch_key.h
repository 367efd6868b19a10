// Dispatch keys (core layer; the dispatcher itself is in dispatch.h).
//
// A DispatchKey names one layer of operator handling. Keys are ordered by priority: the dispatcher
// runs the kernel of the highest-priority key present in (tensors' keys | thread-local included)
// minus thread-local excluded. Backends are the lowest keys; Capture (compile tracing) sits below
// Autograd so that backward operators are captured too (the joint graph). A DispatchKeySet is a
// 64-bit mask where bit k is key k. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "loom/device.h"
#include "loom/export.h"

namespace loom {

enum class DispatchKey : uint8_t {
  Undefined = 0,
  // Backends, lowest priority. Meta is the highest backend so that a Meta tensor combined with a
  // CPU scalar runs the shape-only kernel.
  CPU = 1,
  CUDA = 2,
  Meta = 3,
  // 4..7: room for more backends.
  Capture = 8,        // graph capture for the compiler
  Functionalize = 9,  // room: rewriting mutations into pure ops
  Autograd = 10,      // records the backward graph
  Autocast = 11,      // mixed precision (loom/autocast.h)
  Tracer = 12,        // room: a user-visible tracing layer above everything else
  NumKeys = 13,
  // Alias keys: used only when registering kernels; each stands for several runtime keys.
  CompositeExplicit = 62,  // every backend (CPU, CUDA, Meta): one kernel that works on any device
  CompositeImplicit = 63,  // backends + Autograd + Capture: a decomposition into other operators
};
constexpr int kNumDispatchKeys = static_cast<int>(DispatchKey::NumKeys);
static_assert(kNumDispatchKeys <= 64, "dispatch keys must fit a 64-bit set");

LOOM_API const char* dispatch_key_name(DispatchKey k);
// Parses a key name ("CPU", "Autograd", "CompositeExplicit", ...); throws ValueError otherwise.
LOOM_API DispatchKey parse_dispatch_key(const std::string& name);
LOOM_API std::ostream& operator<<(std::ostream& os, DispatchKey k);

class DispatchKeySet {
 public:
  constexpr DispatchKeySet() = default;
  constexpr explicit DispatchKeySet(DispatchKey k)
      : repr_(k == DispatchKey::Undefined ? 0 : (uint64_t{1} << static_cast<int>(k))) {}
  static constexpr DispatchKeySet from_raw(uint64_t r) {
    DispatchKeySet s;
    s.repr_ = r;
    return s;
  }
  // Every key strictly below k in priority (used to redispatch past the current layer).
  static constexpr DispatchKeySet below(DispatchKey k) {
    return from_raw((uint64_t{1} << static_cast<int>(k)) - 1) -
           DispatchKeySet(DispatchKey::Undefined);
  }
  static constexpr DispatchKeySet backends() {
    return from_raw((uint64_t{1} << static_cast<int>(DispatchKey::Meta)) |
                    (uint64_t{1} << static_cast<int>(DispatchKey::CPU)) |
                    (uint64_t{1} << static_cast<int>(DispatchKey::CUDA)));
  }

  constexpr uint64_t raw() const { return repr_; }
  constexpr bool empty() const { return repr_ == 0; }
  constexpr bool has(DispatchKey k) const { return (repr_ & DispatchKeySet(k).repr_) != 0; }
  constexpr DispatchKeySet operator|(DispatchKeySet o) const { return from_raw(repr_ | o.repr_); }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const { return from_raw(repr_ & o.repr_); }
  constexpr DispatchKeySet operator-(DispatchKeySet o) const { return from_raw(repr_ & ~o.repr_); }
  constexpr DispatchKeySet add(DispatchKey k) const { return *this | DispatchKeySet(k); }
  constexpr DispatchKeySet remove(DispatchKey k) const { return *this - DispatchKeySet(k); }
  constexpr bool operator==(DispatchKeySet o) const { return repr_ == o.repr_; }

  // The key the dispatcher runs: the highest bit set (Undefined for an empty set).
  constexpr DispatchKey highest() const {
    return repr_ == 0 ? DispatchKey::Undefined
                      : static_cast<DispatchKey>(63 - __builtin_clzll(repr_));
  }
  LOOM_API std::string str() const;

 private:
  uint64_t repr_ = 0;
};

// The backend key of a device: CPU, CUDA or Meta.
constexpr DispatchKey backend_key(DeviceType t) {
  return t == DeviceType::CPU ? DispatchKey::CPU
                              : (t == DeviceType::CUDA ? DispatchKey::CUDA : DispatchKey::Meta);
}

}  // namespace loom
