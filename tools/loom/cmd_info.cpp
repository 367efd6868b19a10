// `loom info`: what this build has (backends, BLAS, threads) and every LOOM_* setting.
#include <cstdio>

#include "cli.h"
#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "loom/parallel.h"


namespace loom::cli {
namespace {

int run_info(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {});
  if (args.flag("help")) {
    std::printf("usage: loom info\n  Build features, threads and LOOM_* settings.\n");
    return 0;
  }
  std::printf("loom 0.1.0\n");
  std::printf("CUDA backend: %s%s\n", cuda::is_built() ? "built" : "not built",
              cuda::is_built() ? (cuda::is_available() ? " (devices: " + std::to_string(cuda::device_count()) + ")" : " (no device visible)").c_str() : " (configure with -DLOOM_CUDA=ON)");
  std::printf("BLAS: %s\n", blas_config().c_str());
  std::printf("f32 matrix products: %s\n", gemm_backend().c_str());
  std::printf("intra-op threads: %d (OpenBLAS set to the same)\n", get_num_threads());
  std::printf("operators: %zu\n\nsettings:\n", Dispatcher::singleton().all_operators().size());
  for (const auto& e : config::list()) {
    std::printf("  %-20s = %-8s (%s)  %s\n", e.name.c_str(), e.value.empty() ? "\"\"" : e.value.c_str(),
                e.source.c_str(), e.description.c_str());
  }
  return 0;
}

const RegisterCommand kInfo("info", "build features, threads and LOOM_* settings", run_info);

}  // namespace
}  // namespace loom::cli
