// Built when this build has no CUPTI (no CUDA toolkit, LOOM_CUDA=OFF, or a toolkit without
// CUPTI): the profiler records the CPU, and ProfileOptions::gpu says why it cannot trace the GPU.
#include "loom/error.h"
#include "profiler/gpu_activity.h"

namespace loom::profiler {

std::string gpu_tracing_unavailable_reason() {
  return "GPU activity tracing is not available in this build (it needs CUPTI: configure with "
         "-DLOOM_CUDA=ON on a machine with the CUDA toolkit and its CUPTI library)";
}

namespace detail {
void gpu_start() {
  LOOM_THROW(NotImplementedError, "[profiler] ", gpu_tracing_unavailable_reason());
}
void gpu_stop() noexcept {}
void gpu_collect(Trace&) {}
void gpu_push_correlation(uint64_t) noexcept {}
void gpu_pop_correlation() noexcept {}
}  // namespace detail

}  // namespace loom::profiler
