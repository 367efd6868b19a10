// Built when CMake did not enable CUDA (LOOM_CUDA=OFF, or AUTO without a toolkit).
#include "loom/cuda.h"

namespace loom::cuda {

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
bool is_built() {
  return false;
}
bool host_register(void*, size_t) {
  return false;
}
void host_unregister(void*) {}
loom::DeviceInterface* detail::runtime_interface() {
  return nullptr;
}

}  // namespace loom::cuda
