// `loom info`: what this process runs on and with — CPU, threads (loom's and OpenBLAS's, as they
// really are), the matrix-product kernel — and every LOOM_* setting with its value and source.
#include <cstdio>
#include <string>

#include "cli.h"
#include "loom/build_info.h"
#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "loom/parallel.h"

namespace loom::cli {
namespace {

std::string cuda_line() {
  if (!cuda::is_built()) return "not built (configure with -DLOOM_CUDA=ON)";
  if (!cuda::is_available()) return "built (no device visible)";
  return "built (devices: " + std::to_string(cuda::device_count()) + ")";
}

std::string cpu_line() {
  const CpuInfo c = cpu_info();
  std::string has, lacks;
  for (const auto& [name, present] : c.features) (present ? has : lacks) += " " + name;
  std::string s = c.model + ", " + std::to_string(c.cores) +
                  " core(s) usable\n  instruction sets:" +
                  (has.empty() ? " (none of those loom looks for)" : has);
  if (!lacks.empty()) s += "; absent:" + lacks;
  return s;
}

// A markdown table of every setting: what README.md's Configuration section lists.
void print_settings_markdown() {
  std::printf("| variable | accepts | default | meaning |\n|---|---|---|---|\n");
  for (const auto& e : config::list()) {
    std::printf("| `%s` | %s | %s | %s |\n", e.name.c_str(), e.expected.c_str(),
                e.default_value.empty() ? "(see meaning)" : ("`" + e.default_value + "`").c_str(),
                e.description.c_str());
  }
}

void print_settings() {
  std::printf("settings (LOOM_* environment variables; config::set() overrides them):\n");
  std::printf("  %-24s %-14s %-8s %s\n", "name", "value", "source", "description");
  for (const auto& e : config::list()) {
    std::string value = e.value.empty() ? "\"\"" : e.value;
    if (!e.error.empty()) value += " (INVALID: " + e.error + ")";
    std::printf("  %-24s %-14s %-8s %s\n", e.name.c_str(), value.c_str(), e.source.c_str(),
                e.description.c_str());
  }
}

std::string build_line() {
  std::string s;
  for (const BuildPart& p : build_parts()) {
    s += "\n  " + p.name + ": " + (p.built ? "yes (" + p.detail + ")" : "no (" + p.detail + ")");
  }
  return s;
}

int run_info(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "settings-markdown", "cuda-check"}, {});
  if (args.flag("help")) {
    std::printf(
        "usage: loom info [--settings-markdown]\n"
        "  CPU, threads (loom's pool and OpenBLAS's, as they are), the matrix-product kernel and "
        "every\n"
        "  LOOM_* setting with its value and where it came from.\n"
        "  --settings-markdown  only the settings, as the markdown table of README.md\n"
        "  --cuda-check         run a small kernel on the current CUDA device, check its "
        "output and\n"
        "                       time an empty kernel's launch (the floor under every eager "
        "operator)\n");
    return 0;
  }
  if (args.flag("cuda-check")) {
    const std::string problem = cuda::self_check();
    if (!problem.empty()) {
      std::fprintf(stderr, "%s\n", problem.c_str());
      return 1;
    }
    std::printf("cuda self-check: the kernel ran on device and wrote the expected values\n");
    std::printf("cuda launch floor: %.2f us of host time per empty-kernel launch\n",
                cuda::launch_floor_us());
    return 0;
  }
  if (args.flag("settings-markdown")) {
    print_settings_markdown();
    return 0;
  }
  std::printf("loom 0.1.0\n");
  std::printf("CPU: %s\n", cpu_line().c_str());
  std::printf("CUDA backend: %s\n", cuda_line().c_str());
  if (cuda::is_available()) {
    // Devices, driver and runtime (the libraries found at build time are in "build parts").
    for (const std::string& line : cuda::describe()) std::printf("  %s\n", line.c_str());
  }
  std::printf("build parts:%s\n", build_line().c_str());
  // The pool first: creating it is what sets OpenBLAS to one thread, so what follows is what
  // every matrix product of this process sees.
  const int threads = get_num_threads();
  std::printf(
      "intra-op threads: %d (loom's pool, LOOM_NUM_THREADS; it also splits large matrix "
      "products)\n",
      threads);
  const BlasInfo blas = blas_info();
  std::printf("OpenBLAS threads: %d (openblas_get_num_threads)\n", blas.threads);
  std::printf("OpenBLAS core: %s\n", blas.core.c_str());
  std::printf("OpenBLAS build: %s\n", blas.config.c_str());
  std::printf("f32 matrix products: %s\n", gemm_backend().c_str());
  std::printf("operators: %zu\n\n", Dispatcher::singleton().all_operators().size());
  print_settings();
  return 0;
}

const RegisterCommand kInfo("info", "CPU, threads, matrix-product kernel and every LOOM_* setting",
                            run_info);

}  // namespace
}  // namespace loom::cli
