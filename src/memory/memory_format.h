// Internal helpers of the caching allocator shared by its source files (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "loom/memory/caching_allocator.h"

namespace loom::memory::detail {

// "512 B", "4 KiB", "1.50 MiB": whole multiples of a unit without decimals, others with two.
std::string format_bytes(uint64_t bytes);

// The Stat members of MemoryStats with their JSON names, in declaration order.
struct StatField {
  const char* name;
  Stat MemoryStats::*member;
};
constexpr int kNumStatFields = 7;
extern const StatField kStatFields[kNumStatFields];

}  // namespace loom::memory::detail
