// AllocatorConfig's named policies and description, Stat, and byte formatting for messages.
#include <cmath>
#include <cstdio>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "memory/memory_format.h"

namespace loom::memory {
namespace detail {

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  int unit = 0;
  uint64_t scale = 1024;
  while (unit + 1 < 5 && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  char buf[48];
  if (bytes % scale == 0) {
    std::snprintf(buf, sizeof(buf), "%llu %s", static_cast<unsigned long long>(bytes / scale),
                  kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s",
                  static_cast<double>(bytes) / static_cast<double>(scale), kUnits[unit]);
  }
  return buf;
}

const StatField kStatFields[kNumStatFields] = {
    {"allocated_bytes", &MemoryStats::allocated_bytes},
    {"requested_bytes", &MemoryStats::requested_bytes},
    {"reserved_bytes", &MemoryStats::reserved_bytes},
    {"active_bytes", &MemoryStats::active_bytes},
    {"inactive_split_bytes", &MemoryStats::inactive_split_bytes},
    {"allocations", &MemoryStats::allocations},
    {"segments", &MemoryStats::segments},
};

}  // namespace detail

namespace {

constexpr const char* kPolicyNames[] = {"default",  "expandable",    "expandable-share",
                                        "gc-0.8",   "max-split-64m", "no-cache",
                                        "no-split", "small-segments"};

bool same_config(const AllocatorConfig& a, const AllocatorConfig& b) {
  return a.small_size == b.small_size && a.small_segment == b.small_segment &&
         a.large_segment == b.large_segment && a.min_large_alloc == b.min_large_alloc &&
         a.large_round == b.large_round && a.max_split_size == b.max_split_size &&
         a.gc_threshold == b.gc_threshold && a.cache == b.cache && a.expandable == b.expandable &&
         a.share_pages == b.share_pages;
}

}  // namespace

AllocatorConfig AllocatorConfig::policy(const std::string& name) {
  AllocatorConfig c;
  if (name == "default") return c;
  if (name == "no-cache") {
    c.cache = false;
  } else if (name == "no-split") {
    c.max_split_size = 0;
  } else if (name == "max-split-64m") {
    c.max_split_size = size_t{64} << 20;
  } else if (name == "gc-0.8") {
    c.gc_threshold = 0.8;
  } else if (name == "expandable") {
    c.expandable = true;
  } else if (name == "expandable-share") {
    c.expandable = true;
    c.share_pages = true;
  } else if (name == "small-segments") {
    c.large_segment = size_t{2} << 20;
  } else {
    std::string known;
    for (const char* n : kPolicyNames) known += std::string(known.empty() ? "" : ", ") + n;
    LOOM_THROW(ValueError, "[caching allocator] unknown allocator policy '", name,
               "': expected one of ", known);
  }
  return c;
}

std::vector<std::string> AllocatorConfig::policies() {
  return {std::begin(kPolicyNames), std::end(kPolicyNames)};
}

std::string AllocatorConfig::describe() const {
  using detail::format_bytes;
  std::string out;
  for (const char* n : kPolicyNames) {
    if (same_config(*this, policy(n))) {
      out = std::string("policy=") + n + " ";
      break;
    }
  }
  char gc[32];
  std::snprintf(gc, sizeof(gc), "%g", gc_threshold);
  out += "small_size=" + format_bytes(small_size) +
         " small_segment=" + format_bytes(small_segment) +
         " large_segment=" + format_bytes(large_segment) +
         " min_large_alloc=" + format_bytes(min_large_alloc) +
         " large_round=" + format_bytes(large_round) + " max_split_size=" +
         (max_split_size == SIZE_MAX ? std::string("unlimited") : format_bytes(max_split_size)) +
         " gc_threshold=" + gc + " cache=" + (cache ? "on" : "off") +
         " expandable=" + (expandable ? "on" : "off") +
         " share_pages=" + (share_pages ? "on" : "off") +
         " history=" + std::to_string(history_capacity);
  return out;
}

void AllocatorConfig::validate() const {
  auto check_size = [](size_t v, const char* field) {
    LOOM_CHECK(v > 0 && v % kRoundBytes == 0, "[caching allocator] config ", field,
               " must be a positive multiple of ", kRoundBytes, " bytes but got ", v);
  };
  check_size(small_size, "small_size");
  check_size(small_segment, "small_segment");
  check_size(large_segment, "large_segment");
  check_size(min_large_alloc, "min_large_alloc");
  check_size(large_round, "large_round");
  LOOM_CHECK(small_size <= small_segment, "[caching allocator] config small_size (", small_size,
             ") must not exceed small_segment (", small_segment, ")");
  LOOM_CHECK(gc_threshold >= 0.0 && gc_threshold <= 1.0, "[caching allocator] config gc_threshold ",
             "must be in [0, 1] but got ", gc_threshold);
  LOOM_CHECK(!expandable || max_split_size == SIZE_MAX, "[caching allocator] config expandable ",
             "needs an unlimited max_split_size but got ", max_split_size,
             " (Note [expandable segments])");
  LOOM_CHECK(
      expandable || !share_pages,
      "[caching allocator] config share_pages needs expandable (Note [expandable segments])");
}

void Stat::add(int64_t n) {
  current += n;
  if (n >= 0) {
    allocated += n;
    if (current > peak) peak = current;
  } else {
    freed -= n;
  }
}

double MemoryStats::fragmentation() const {
  int64_t free = reserved_bytes.current - active_bytes.current;
  if (free <= 0) return 0.0;
  double f = 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free);
  return f < 0.0 ? 0.0 : f;
}

}  // namespace loom::memory
