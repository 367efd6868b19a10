// Why an operator with a CPU kernel has no CUDA kernel (CUDA builds): `loom ops --missing cuda`
// prints these reasons, so a gap in the backend is said, never hidden behind a CPU fallback.
#include <map>
#include <string>

#include "loom/ops.h"

namespace loom {

std::string missing_kernel_reason(const std::string& op, DispatchKey backend) {
  if (backend != DispatchKey::CUDA) return "";
  // Operators left without a CUDA kernel on purpose, with the reason.
  static const std::map<std::string, std::string> reasons = {};
  auto it = reasons.find(op);
  return it != reasons.end() ? it->second : "no CUDA kernel yet";
}

}  // namespace loom
