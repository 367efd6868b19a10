// CUDA availability (base layer seam). The CUDA backend is chosen in CMake (LOOM_CUDA); in a build
// without it these report no devices and device work throws NotImplementedError saying how to
// enable it. Thread-safe.
#pragma once

#include <cstddef>

#include "loom/export.h"

namespace loom {
class DeviceInterface;
}  // namespace loom

namespace loom::cuda {

// True when this build has the CUDA backend and at least one device is visible.
LOOM_API bool is_available();
LOOM_API int device_count();
// True when this build was compiled with the CUDA backend (devices may still be absent).
LOOM_API bool is_built();

// Page-locks host memory [p, p + n) for asynchronous copies (cudaHostRegister). False when no
// device is present or the runtime refuses; the memory is then left as it was.
LOOM_API bool host_register(void* p, size_t n);
// Undoes host_register (no-op for memory that was not registered).
LOOM_API void host_unregister(void* p);

namespace detail {
// The CUDA runtime's DeviceInterface (loom/device_interface.h) when this build has the CUDA backend
// and a device is visible, else nullptr. device_interface(DeviceType::CUDA) asks once, lazily, so
// that loading libloom never initialises CUDA (which must not happen before a fork).
LOOM_API loom::DeviceInterface* runtime_interface();
}  // namespace detail

}  // namespace loom::cuda
