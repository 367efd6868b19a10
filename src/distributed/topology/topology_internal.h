// Helpers shared by the topology files (distributed layer, internal).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/distributed/topology.h"

namespace loom::dist::topo {

// The first line of a file without its newline; nullopt when it cannot be read.
std::optional<std::string> read_line(const std::string& path);
// The file's first line as an integer in `base` (16 reads "0x1af4"); nullopt when unreadable.
std::optional<int64_t> read_int(const std::string& path, int base = 10);
// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; empty for malformed text.
std::vector<int> parse_cpu_list(const std::string& text);
std::string cpu_list_str(const std::vector<int>& cpus);
// "32K" -> 32768.
int64_t parse_size(const std::string& text);

// Fills `gpus` through NVML (loaded at run time); returns "" or why there are none.
std::string read_nvml_gpus(std::vector<GpuInfo>& gpus);

}  // namespace loom::dist::topo
