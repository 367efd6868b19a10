// Choosing an allreduce algorithm, the pipeline chunk, and the allreduce entry point.
//
// Note [Allreduce thresholds]
// Small messages are latency-bound: recursive halving-doubling finishes in 2*log2(size) steps (plus
// two for a non-power-of-two fold) where the ring needs 2*(size-1). Large messages are
// bandwidth-bound: the ring moves the minimum 2*(size-1)/size of the data per rank, every link busy
// in one direction, with pipelined steps. Two ranks only ever exchange halves, so the ring is used
// there. The 64 KiB boundary is a starting point for TCP and shared memory on one host; the cost
// model in topology code can replace these rules by passing its choice as `forced`.
#include <algorithm>
#include <string>

#include "dist/algorithms.h"
#include "loom/config.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

constexpr size_t kSmallMessageBytes = 64u << 10;
constexpr size_t kDefaultChunkBytes = 512u << 10;
constexpr size_t kMinChunkBytes = 64;  // at least one element of every dtype; keeps pieces sane

}  // namespace

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kAuto:
      return "auto";
    case Algo::kRing:
      return "ring";
    case Algo::kTree:
      return "tree";
    case Algo::kDbt:
      return "dbt";
    case Algo::kRhd:
      return "rhd";
  }
  return "unknown";
}

Algo parse_algo(const std::string& name) {
  for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kTree, Algo::kDbt, Algo::kRhd}) {
    if (name == algo_name(a)) return a;
  }
  LOOM_THROW(ValueError, "[dist] unknown allreduce algorithm '", name,
             "' (expected ring, tree, dbt, rhd or auto)");
}

Algo choose_allreduce(size_t bytes, int size, Algo forced, std::string* why) {
  auto say = [&](Algo a, std::string reason) {
    if (why) *why = std::move(reason);
    return a;
  };
  if (forced != Algo::kAuto) return say(forced, detail::str_cat(algo_name(forced), ": forced"));
  if (size <= 2) {
    return say(
        Algo::kRing,
        detail::str_cat("ring: ", size, " rank(s) only exchange halves; the ring pipelines them"));
  }
  if (bytes < kSmallMessageBytes) {
    return say(Algo::kRhd,
               detail::str_cat("rhd: ", bytes, " bytes < ", kSmallMessageBytes,
                               " is latency-bound; halving-doubling takes about 2*log2(", size,
                               ") steps where the ring takes 2*(", size, "-1)"));
  }
  return say(Algo::kRing, detail::str_cat("ring: ", bytes, " bytes >= ", kSmallMessageBytes,
                                          " is bandwidth-bound; the pipelined ring moves the least "
                                          "data per rank (2*(",
                                          size, "-1)/", size, " of it)"));
}

size_t pipeline_chunk_bytes() {
  static const bool declared = [] {
    config::declare("LOOM_DIST_CHUNK_BYTES", std::to_string(kDefaultChunkBytes),
                    "bytes per pipelined piece in ring/tree/rhd collectives (same on every rank)");
    return true;
  }();
  (void)declared;
  int64_t v = config::get_int("LOOM_DIST_CHUNK_BYTES", static_cast<int64_t>(kDefaultChunkBytes));
  LOOM_CHECK(v > 0, "[dist] LOOM_DIST_CHUNK_BYTES must be positive but is ", v);
  return std::max(static_cast<size_t>(v), kMinChunkBytes);
}

void allreduce(Comm& c, Algo algo, void* data, size_t count, DType dt, ReduceOp op) {
  if (algo == Algo::kAuto) {
    static const bool declared = [] {
      config::declare("LOOM_ALGO", "",
                      "allreduce algorithm: ring, tree, dbt, rhd or auto (default)");
      return true;
    }();
    (void)declared;
    std::string forced = config::get("LOOM_ALGO");
    algo = choose_allreduce(count * element_size(dt), c.size(),
                            forced.empty() ? Algo::kAuto : parse_algo(forced));
  }
  switch (algo) {
    case Algo::kRing:
      return allreduce_ring(c, data, count, dt, op);
    case Algo::kTree:
      return allreduce_tree(c, data, count, dt, op);
    case Algo::kDbt:
      return allreduce_dbt(c, data, count, dt, op);
    case Algo::kRhd:
      return allreduce_rhd(c, data, count, dt, op);
    case Algo::kAuto:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] no allreduce algorithm chosen");
}

}  // namespace loom::dist
