#include "loom/dispatch_key.h"

#include <ostream>

#include "loom/error.h"

namespace loom {

const char* dispatch_key_name(DispatchKey k) {
  switch (k) {
    case DispatchKey::Undefined:
      return "Undefined";
    case DispatchKey::Meta:
      return "Meta";
    case DispatchKey::CPU:
      return "CPU";
    case DispatchKey::CUDA:
      return "CUDA";
    case DispatchKey::Capture:
      return "Capture";
    case DispatchKey::Functionalize:
      return "Functionalize";
    case DispatchKey::Autograd:
      return "Autograd";
    case DispatchKey::Autocast:
      return "Autocast";
    case DispatchKey::Tracer:
      return "Tracer";
    case DispatchKey::NumKeys:
      return "NumKeys";
    case DispatchKey::CompositeExplicit:
      return "CompositeExplicit";
    case DispatchKey::CompositeImplicit:
      return "CompositeImplicit";
  }
  return "Reserved";
}

DispatchKey parse_dispatch_key(const std::string& name) {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    auto k = static_cast<DispatchKey>(i);
    if (name == dispatch_key_name(k)) return k;
  }
  if (name == "CompositeExplicit") return DispatchKey::CompositeExplicit;
  if (name == "CompositeImplicit") return DispatchKey::CompositeImplicit;
  LOOM_THROW(ValueError, "[dispatch] unknown dispatch key '", name, "'");
}

std::ostream& operator<<(std::ostream& os, DispatchKey k) {
  return os << dispatch_key_name(k);
}

std::string DispatchKeySet::str() const {
  std::string s = "{";
  bool first = true;
  for (int i = 63; i >= 0; --i) {
    if (repr_ & (uint64_t{1} << i)) {
      if (!first) s += ", ";
      s += dispatch_key_name(static_cast<DispatchKey>(i));
      first = false;
    }
  }
  return s + "}";
}

}  // namespace loom
