// Intra-op parallelism (base layer).
//
// One process-wide pool of worker threads runs parallel_for. Its width is LOOM_NUM_THREADS
// (default: the number of cores). It is the only pool: OpenBLAS is kept single-threaded and loom
// splits large matrix products across this pool itself, so two sets of threads never compete for
// the cores. parallel_for nested inside a parallel region runs serially on the calling thread. Also
// here: what the machine offers (cpu_info, blas_info) and thread names (set_thread_name). All
// functions are thread-safe; set_num_threads must not race with a running parallel_for.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/export.h"

namespace loom {

LOOM_API int get_num_threads();
// Sets loom's pool width (n >= 1); OpenBLAS stays at one thread (matrix products use this pool).
LOOM_API void set_num_threads(int n);
// The BLAS library loom calls and its build configuration (e.g. "OpenBLAS 0.3.21 ...
// MAX_THREADS=64").
LOOM_API std::string blas_config();
struct BlasInfo {
  std::string config;  // blas_config()
  std::string core;    // the kernel set OpenBLAS picked for this CPU, e.g. "SkylakeX"
  int threads = 0;  // the threads OpenBLAS itself would run a call with (1 once loom's pool exists)
};
LOOM_API BlasInfo blas_info();
// The CPU loom runs on, as detected: its model name (/proc/cpuinfo), the cores this process may
// use, and the instruction-set extensions loom's kernels look for (name, present).
struct CpuInfo {
  std::string model;
  int cores = 0;
  std::vector<std::pair<std::string, bool>> features;
};
LOOM_API CpuInfo cpu_info();
// Names the calling thread for whoever shows threads: the profiler's tables and traces (loader
// workers are "loader worker N"; a training loop should call set_thread_name("training")), and the
// OS (the first 15 bytes, for top and gdb; not for the main thread, whose OS name is the
// process's). The name is forgotten when the thread exits.
LOOM_API void set_thread_name(const std::string& name);
// The name the thread with this OS id (gettid()) gave itself; "" when none or it has exited.
LOOM_API std::string thread_name_of(uint64_t os_tid);
// True while the caller runs inside a parallel_for body.
LOOM_API bool in_parallel_region();

namespace detail {
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
LOOM_API void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx);
}  // namespace detail

// Splits [begin, end) into at most get_num_threads() contiguous chunks of at least `grain`
// iterations and runs f(chunk_begin, chunk_end) on them; returns when all are done. An exception
// thrown by any chunk is rethrown here (the first one wins).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (end <= begin) return;
  if (end - begin <= grain || in_parallel_region()) {
    f(begin, end);
    return;
  }
  detail::parallel_for_impl(
      begin, end, grain,
      [](void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace loom
