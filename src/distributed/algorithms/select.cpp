// Choosing an allreduce algorithm, the pipeline chunk, and the allreduce entry point.
//
// Note [Allreduce thresholds]
// A ring step moves one block of bytes/size; while a block is small a step costs about one message
// latency, and the ring's 2*(size-1) steps lose to recursive halving-doubling's 2*log2(size) (plus
// two for a non-power-of-two fold). Once blocks are a few KiB the ring's neighbour-only, pipelined
// steps catch up. So: rhd while bytes/size < kSmallBlockBytes. On a power-of-two number of ranks
// halving-doubling needs no fold and moves exactly the ring's 2*(size-1)/size of the data, in
// fewer and larger messages, so it keeps winning well past small blocks: on a 16-core host (loom
// bench collectives, 5-7 alternating runs, medians) 4 ranks took 9.7/21/103/650 us with rhd and
// 14/31/118/759 us with the ring at 16 KiB/64 KiB/256 KiB/2 MiB, 8 ranks 476 vs 573 us at 1 MiB
// and 893 vs 1078 at 2 MiB; on the 2-core VM (4 ranks, oversubscribed) rhd was 10-15 % faster at
// 1-2 MiB. Above kPow2RhdBytes the ring: from 4 MiB the two were within noise on 16 cores, and the
// ring was faster on 2 (3.0 vs 3.4 ms at 4 MiB). On 3 and 6 ranks the fold made rhd 1.2-2x slower
// than the ring from 64 KiB, so those keep the small-block rule. Two ranks only ever exchange
// halves and use the ring. Below all of these, when a rank would send at most kOneShotBytes in
// total, the one-shot allreduce (every rank sends everything to everyone, one step) has the lowest
// latency: on 2 ranks over shared memory it took a 4 KiB allreduce from 2.9 us (ring) to ~2 us.
// tree and dbt are never chosen here (they were no faster on one host) but can be forced; so are
// the hierarchical algorithms, which only the cost model (LOOM_ALGO=model) chooses, since these
// rules do not see hosts. A cost model can replace these rules by passing its choice as `forced`.
#include <algorithm>
#include <cstdint>
#include <string>

#include "distributed/algorithms/algorithms.h"
#include "distributed/settings.h"
#include "loom/config.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

constexpr size_t kSmallBlockBytes = 2u << 10;
constexpr size_t kPow2RhdBytes = 2u << 20;   // rhd up to here on a power-of-two number of ranks
constexpr size_t kOneShotBytes = 16u << 10;  // bytes a rank sends in a one-shot allreduce
constexpr size_t kMinChunkBytes = 64;  // at least one element of every dtype; keeps pieces sane

}  // namespace

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::Auto:
      return "auto";
    case Algo::Ring:
      return "ring";
    case Algo::Tree:
      return "tree";
    case Algo::DoubleBinaryTree:
      return "dbt";
    case Algo::HalvingDoubling:
      return "rhd";
    case Algo::OneShot:
      return "oneshot";
    case Algo::Model:
      return "model";
    case Algo::Hierarchical:
      return "hier";
    case Algo::HierarchicalTree:
      return "hier_tree";
  }
  return "unknown";
}

Algo parse_algo(const std::string& name) {
  for (Algo a : {Algo::Auto, Algo::Ring, Algo::Tree, Algo::DoubleBinaryTree, Algo::HalvingDoubling,
                 Algo::OneShot, Algo::Model, Algo::Hierarchical, Algo::HierarchicalTree}) {
    if (name == algo_name(a)) return a;
  }
  LOOM_THROW(ValueError, "[dist] unknown allreduce algorithm '", name,
             "' (expected ring, tree, dbt, rhd, oneshot, hier, hier_tree, auto or model)");
}

Algo choose_allreduce(size_t bytes, int size, Algo forced, std::string* why) {
  // Decide first; words only when asked (this runs on every allreduce).
  const size_t block = bytes / static_cast<size_t>(std::max(size, 1));
  const bool pow2 = size > 0 && (size & (size - 1)) == 0;
  const bool named = forced != Algo::Auto && forced != Algo::Model;
  const Algo a =
      named                                                                 ? forced
      : bytes * static_cast<size_t>(std::max(size - 1, 0)) <= kOneShotBytes ? Algo::OneShot
      : size <= 2                                                           ? Algo::Ring
      : block < kSmallBlockBytes || (pow2 && bytes <= kPow2RhdBytes)        ? Algo::HalvingDoubling
                                                                            : Algo::Ring;
  if (!why) return a;
  if (named) {
    *why = detail::str_cat(algo_name(forced), ": forced");
  } else if (a == Algo::OneShot) {
    *why = detail::str_cat(
        "oneshot: ", bytes, " bytes x ", size - 1, " peers <= ", kOneShotBytes,
        " bytes; one step of latency beats the ring's and halving-doubling's several");
  } else if (size <= 2) {
    *why =
        detail::str_cat("ring: ", size, " rank(s) only exchange halves; the ring pipelines them");
  } else if (a == Algo::HalvingDoubling && block < kSmallBlockBytes) {
    *why =
        detail::str_cat("rhd: ", bytes, " bytes on ", size, " ranks make blocks of ", block, " < ",
                        kSmallBlockBytes, " bytes, so latency dominates; halving-doubling takes ",
                        "about 2*log2(", size, ") steps where the ring takes 2*(", size, "-1)");
  } else if (a == Algo::HalvingDoubling) {
    *why = detail::str_cat("rhd: ", size, " ranks are a power of two and ", bytes,
                           " bytes <= ", kPow2RhdBytes,
                           ": halving-doubling moves as little data as the ring in ", "2*log2(",
                           size, ") larger steps instead of 2*(", size, "-1)");
  } else {
    *why = detail::str_cat("ring: ", bytes, " bytes on ", size, " ranks make blocks of ", block,
                           " >= ", kSmallBlockBytes,
                           " bytes; the pipelined ring moves the least data per rank (", "2*(",
                           size, "-1)/", size, " of it) between neighbours");
  }
  return a;
}

size_t pipeline_chunk_bytes() {
  // Every ring collective asks, and a configuration lookup (a lock, a map, getenv, a string) cost
  // ~0.1 us of a ~1.5 us small reduce-scatter: keep the value until config::set() changes a knob.
  thread_local uint64_t cached_generation = UINT64_MAX;
  thread_local size_t cached = 0;
  const uint64_t generation = config::generation();
  if (generation == cached_generation) return cached;
  const int64_t v = settings::kChunkBytes.get();  // 512 KiB unless set
  cached = std::max(static_cast<size_t>(v), kMinChunkBytes);
  cached_generation = generation;
  return cached;
}

void allreduce(Comm& c, Algo algo, void* data, size_t count, DType dt, ReduceOp op) {
  if (algo == Algo::Auto || algo == Algo::Model) {
    algo = choose_allreduce(count * element_size(dt), c.size(), parse_algo(settings::kAlgo.get()));
  }
  switch (algo) {
    case Algo::Ring:
      return allreduce_ring(c, data, count, dt, op);
    case Algo::Tree:
      return allreduce_tree(c, data, count, dt, op);
    case Algo::DoubleBinaryTree:
      return allreduce_double_binary_tree(c, data, count, dt, op);
    case Algo::HalvingDoubling:
      return allreduce_halving_doubling(c, data, count, dt, op);
    case Algo::OneShot:
      return allreduce_one_shot(c, data, count, dt, op);
    case Algo::Hierarchical:
      return allreduce_hierarchical(c, data, count, dt, op);
    case Algo::HierarchicalTree:
      return allreduce_hierarchical_tree(c, data, count, dt, op);
    case Algo::Auto:
    case Algo::Model:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] no allreduce algorithm chosen");
}

}  // namespace loom::dist
