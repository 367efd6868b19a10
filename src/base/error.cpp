#include "loom/error.h"

namespace loom::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << "[internal] assertion `" << cond << "` failed at " << file << ":" << line;
  if (!msg.empty()) os << ": " << msg;
  os << " (this is a bug in loom; please report it)";
  throw InternalError(os.str());
}

}  // namespace loom::detail
