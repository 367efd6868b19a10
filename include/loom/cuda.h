// CUDA runtime (base layer seam). The CUDA backend is chosen in CMake (LOOM_CUDA); in a build
// without it these report no devices, and calls that need a device throw NotImplementedError saying
// how to enable it. With it, they wrap the CUDA runtime API: devices and their properties, the
// stream pool, peer access, and the one place where runtime error codes become loom errors.
//
// Streams: a CUDA Stream (loom/stream.h) has id 0 for the device's legacy default stream, and ids
// from 1 for streams made by new_stream() or handed out by the pool. The pool holds, per device and
// priority, kStreamPoolSize streams created on first use and handed out round-robin, as PyTorch's
// getStreamFromPool: side streams cost nothing to ask for and are never destroyed.
//
// Thread-safety: every function is thread-safe. Nothing here initialises CUDA before it is called
// (loading libloom never touches the driver, which must not happen before a fork).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/device.h"
#include "loom/export.h"
#include "loom/stream.h"

namespace loom {
class DeviceInterface;
}  // namespace loom

namespace loom::cuda {

// True when this build has the CUDA backend and at least one device is visible.
LOOM_API bool is_available();
LOOM_API int device_count();
// True when this build was compiled with the CUDA backend (devices may still be absent).
LOOM_API bool is_built();

struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  size_t total_memory = 0;   // bytes
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int warp_size = 0;
  size_t shared_memory_per_block = 0;  // opt-in maximum, bytes
  int l2_cache_bytes = 0;
  int memory_bus_width = 0;  // bits
  int memory_clock_khz = 0;
  std::string pci_bus_id;  // "0000:19:00.0"
};
// DeviceError / ValueError naming the index when there is no such device.
LOOM_API DeviceProperties device_properties(int device);
// The driver's and runtime's CUDA versions as 1000 * major + 10 * minor (0 when unknown).
LOOM_API int driver_version();
LOOM_API int runtime_version();
// Whether `device` can read and write `peer`'s memory directly (false for device == peer).
LOOM_API bool can_access_peer(int device, int peer);

constexpr int kStreamPoolSize = 32;
// A side stream of `device` from its pool (Note above); high priority streams are scheduled first.
LOOM_API Stream stream_from_pool(DeviceIndex device, bool high_priority = false);
// A new stream of `device`, owned by the runtime interface for the process's lifetime.
// priority: 0 normal, -1 high (CUDA's lower numbers are higher priorities; clamped to the range).
LOOM_API Stream new_stream(DeviceIndex device, int priority);
// The runtime's handle (a cudaStream_t) of a CUDA stream, for kernel launches and libraries.
// ValueError for a stream that is not CUDA or not known.
LOOM_API void* raw_stream(const Stream& stream);
// raw_stream(current_stream(cuda:device)) of the calling thread.
LOOM_API void* current_raw_stream(DeviceIndex device);

// Throws DeviceError "[cuda] <call> failed[ in <context>]: <description> (<error name>)" and clears
// the runtime's last error. `code` is a cudaError_t; context is the operator or component (may be
// null). Out of line so that checks stay small.
[[noreturn]] LOOM_API void throw_error(int code, const char* call, const char* context);

// Page-locks host memory [p, p + n) for asynchronous copies (cudaHostRegister). False when no
// device is present or the runtime refuses; the memory is then left as it was.
LOOM_API bool host_register(void* p, size_t n);
// Undoes host_register (no-op for memory that was not registered).
LOOM_API void host_unregister(void* p);

// Whether float32 matrix products and convolutions on CUDA may use TF32 tensor cores (the setting
// LOOM_ALLOW_TF32, off by default: Note [TF32 is off by default] in src/base/cuda_math.cpp).
// set_allow_tf32 overrides the environment for the process; later calls see the new value.
LOOM_API bool allow_tf32();
LOOM_API void set_allow_tf32(bool allow);

// CUDA graphs (Note [CUDA graphs] in compiler/cuda_graph.cpp). graph_capture_begin starts
// capturing the work queued on `stream` (relaxed mode: other threads' calls are not checked);
// graph_capture_end ends it and instantiates the graph. graph_capture_abort ends a capture that
// failed, discarding it. graph_launch queues the executable on `stream` (any stream of its
// device); graph_destroy frees it and its graph.
struct RecordedGraph {
  void* exec = nullptr;   // the executable (a cudaGraphExec_t)
  void* graph = nullptr;  // the graph it was instantiated from (a cudaGraph_t): its node handles
  size_t nodes = 0;
};
LOOM_API void graph_capture_begin(const Stream& stream);
LOOM_API RecordedGraph graph_capture_end(const Stream& stream);
LOOM_API void graph_capture_abort(const Stream& stream);
LOOM_API void graph_launch(const RecordedGraph& g, const Stream& stream);
LOOM_API void graph_destroy(RecordedGraph& g);
// The node of `g` that copies device memory into `dst` (a device-to-device copy recorded in
// it), or null. graph_set_copy makes later launches of `g` run that node from `src` (as many
// bytes as recorded) or, with src null, skip it; no launch is queued. False when the runtime
// refused the new source: the node is then skipped, and the caller must copy.
LOOM_API void* graph_copy_node(const RecordedGraph& g, const void* dst);
LOOM_API bool graph_set_copy(const RecordedGraph& g, void* node, const void* src);

// What `loom info` prints: one line per device, then driver, runtime and libraries found.
LOOM_API std::vector<std::string> describe();

// The device checks of index values (Note [Device index checks] in src/ops/cuda/index_check.h):
// how many ran on the device (one host round trip each) and how many passed from the record of an
// earlier check of the same unchanged indices (Note [Remembered index checks]); zeros without CUDA.
struct IndexCheckCounts {
  int64_t device_checks = 0;
  int64_t remembered = 0;
};
LOOM_API IndexCheckCounts index_check_counts();

namespace detail {
// The CUDA runtime's DeviceInterface (loom/device_interface.h) when this build has the CUDA backend
// and a device is visible, else nullptr. device_interface(DeviceType::CUDA) asks once, lazily, so
// that loading libloom never initialises CUDA (which must not happen before a fork).
LOOM_API loom::DeviceInterface* runtime_interface();
}  // namespace detail

}  // namespace loom::cuda

// Checks a CUDA runtime call: LOOM_CUDA_CHECK(cudaMemcpyAsync(...), "loom::copy_").
#define LOOM_CUDA_CHECK(call, context)                                                  \
  do {                                                                                  \
    const int loom_cuda_err_ = static_cast<int>(call);                                  \
    if (loom_cuda_err_ != 0) ::loom::cuda::throw_error(loom_cuda_err_, #call, context); \
  } while (0)
