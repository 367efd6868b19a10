// Built when CMake did not enable CUDA (LOOM_CUDA=OFF, or AUTO without a toolkit): no devices, and
// calls that need one say how to enable the backend.
#include "loom/cuda.h"
#include "loom/error.h"

namespace loom::cuda {
namespace {
[[noreturn]] void missing(const char* what) {
  LOOM_THROW(NotImplementedError, "[cuda] ", what,
             " is not available in this build (configure with -DLOOM_CUDA=ON on a machine with "
             "the CUDA toolkit)");
}
}  // namespace

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}
bool is_built() {
  return false;
}
DeviceProperties device_properties(int) {
  missing("device_properties");
}
int driver_version() {
  return 0;
}
int runtime_version() {
  return 0;
}
bool can_access_peer(int, int) {
  return false;
}
Stream stream_from_pool(DeviceIndex, bool) {
  missing("stream_from_pool");
}
Stream new_stream(DeviceIndex, int) {
  missing("new_stream");
}
void* raw_stream(const Stream&) {
  missing("raw_stream");
}
void* current_raw_stream(DeviceIndex) {
  missing("current_raw_stream");
}
void throw_error(int code, const char* call, const char* context) {
  LOOM_THROW(DeviceError, "[cuda] ", call, " failed", context ? " in " : "", context ? context : "",
             " (error ", code, "; CUDA is not in this build)");
}
bool host_register(void*, size_t) {
  return false;
}
void host_unregister(void*) {}
void graph_capture_begin(const Stream&) {
  missing("graph_capture_begin");
}
RecordedGraph graph_capture_end(const Stream&) {
  missing("graph_capture_end");
}
void graph_capture_abort(const Stream&) {}
void graph_launch(const RecordedGraph&, const Stream&) {
  missing("graph_launch");
}
void graph_destroy(RecordedGraph&) {}
void* graph_copy_node(const RecordedGraph&, const void*) {
  return nullptr;
}
bool graph_set_copy(const RecordedGraph&, void*, const void*) {
  missing("graph_set_copy");
}
std::vector<std::string> describe() {
  return {
      "CUDA is not in this build (configure with -DLOOM_CUDA=ON on a machine with the CUDA "
      "toolkit)"};
}
loom::DeviceInterface* detail::runtime_interface() {
  return nullptr;
}

}  // namespace loom::cuda
