// cpu_info(): what `loom info` reports about the processor.
#include <sched.h>

#include <fstream>
#include <string>

#include "loom/parallel.h"

namespace loom {

CpuInfo cpu_info() {
  CpuInfo c;
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos)
        c.model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  if (c.model.empty()) c.model = "unknown (no model name in /proc/cpuinfo)";
  cpu_set_t set;
  c.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  __builtin_cpu_init();
  // __builtin_cpu_supports takes string literals only.
  c.features = {{"avx2", __builtin_cpu_supports("avx2") != 0},
                {"fma", __builtin_cpu_supports("fma") != 0},
                {"f16c", __builtin_cpu_supports("f16c") != 0},
                {"avx512f", __builtin_cpu_supports("avx512f") != 0},
                {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
                {"avx512vl", __builtin_cpu_supports("avx512vl") != 0}};
  return c;
}

}  // namespace loom
