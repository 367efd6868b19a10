// Collective algorithms (distributed layer, internal), one per file under
// src/distributed/algorithms/. They move bytes over a Comm and never know which transport carries
// them. Buffers are raw, contiguous and owned by the caller (the process group); counts are in
// elements of `dt`.
//
// Reductions here never see AVG (the group sums, then divides) and never see bf16/f16 for SUM, PROD
// or AVG (the group accumulates those in an f32 copy). Every function handles count 0 and any world
// size >= 1, including counts not divisible by the world size. Algorithms use Comm::scratch slot 0
// only; slot 1 is the caller's (the group stages buffers there).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distributed/transport/communicator.h"
#include "loom/array_ref.h"
#include "loom/distributed/reduce_op.h"
#include "loom/dtype.h"
#include "loom/export.h"

namespace loom::dist {

// dst[i] = op(dst[i], src[i]) for n elements (src_kernels in
// src/distributed/algorithms/reduce_kernels.cpp; vectorised for the float types).
LOOM_API void reduce_into(void* dst, const void* src, size_t n, DType dt, ReduceOp op);

// Model: chosen per call by the cost model (the process group's backend decides; Note
// [Collective cost model]); the algorithms themselves never see it.
enum class Algo : int8_t {
  Auto = 0,
  Ring,
  Tree,
  DoubleBinaryTree,
  HalvingDoubling,
  OneShot,
  Model,
  Hierarchical,      // "hier": reduce-scatter in each host, ring across, allgather in each host
  HierarchicalTree,  // "hier_tree": reduce to each host's leader, ring across, broadcast
};
LOOM_API const char* algo_name(Algo a);
// "ring" | "tree" | "dbt" | "rhd" | "oneshot" | "hier" | "hier_tree" | "auto" | "model";
// ValueError otherwise.
LOOM_API Algo parse_algo(const std::string& name);
// The allreduce algorithm for `bytes` on `size` ranks: `forced` (from LOOM_ALGO or the caller) when
// it names an algorithm, else (Auto, Model) simple size thresholds. `why` (optional) receives the
// reason in words.
LOOM_API Algo choose_allreduce(size_t bytes, int size, Algo forced, std::string* why = nullptr);

// Pieces of at most this many bytes are pipelined through ring/tree steps (LOOM_DIST_CHUNK_BYTES or
// a default tuned for the transports).
LOOM_API size_t pipeline_chunk_bytes();

// ---- allreduce, in place on data[0..count) ----
// ring: RS + AG, pipelined; tree: pipelined reduce + bcast; dbt: two trees, half each;
// rhd: Rabenseifner (recursive halving + doubling).
LOOM_API void allreduce_ring(Comm& c, void* data, size_t count, DType dt, ReduceOp op);
LOOM_API void allreduce_tree(Comm& c, void* data, size_t count, DType dt, ReduceOp op);
LOOM_API void allreduce_double_binary_tree(Comm& c, void* data, size_t count, DType dt,
                                           ReduceOp op);
LOOM_API void allreduce_halving_doubling(Comm& c, void* data, size_t count, DType dt, ReduceOp op);
// Every rank sends its buffer to every other and reduces locally (small messages).
LOOM_API void allreduce_one_shot(Comm& c, void* data, size_t count, DType dt, ReduceOp op);
LOOM_API void allreduce(Comm& c, Algo algo, void* data, size_t count, DType dt, ReduceOp op);

// ---- across hosts (Note [Hierarchical allreduce]); hosts from Comm::host_of() ----
struct HostLayout {
  int hosts = 1;
  bool even = true;          // every host runs the same number of ranks
  std::vector<int> local;    // the group ranks on this rank's host, ascending
  int local_rank = 0;        // this rank's index in `local`
  std::vector<int> cross;    // the rank of each host with this local rank (hosts that have one)
  std::vector<int> leaders;  // each host's first rank
};
LOOM_API HostLayout host_layout(const Comm& c);
// 2D: RS in each host, ring allreduce between equal local ranks, AG in each host. Runs the tree
// variant when hosts hold different numbers of ranks.
LOOM_API void allreduce_hierarchical(Comm& c, void* data, size_t count, DType dt, ReduceOp op);
LOOM_API void allreduce_hierarchical_tree(Comm& c, void* data, size_t count, DType dt, ReduceOp op);

// ---- ring allgather: rank r's block (bytes[r] long) sits at out + sum(bytes[0..r)) on entry (its
// own block only); on return every block is filled. Uneven sizes allowed. ----
LOOM_API void allgather_ring(Comm& c, void* out, ArrayRef<size_t> bytes);
// The same with this rank's block read from `in` (bytes[rank] long, not inside `out` unless exactly
// at its place) and copied into `out` by the algorithm.
LOOM_API void allgather_ring(Comm& c, const void* in, void* out, ArrayRef<size_t> bytes);

// ---- ring reduce-scatter, out of place (Note [Out-of-place reduce-scatter]): `in` holds every
// block of this rank's contribution (counts[r] elements each, in rank order) and is only read; on
// return `out` (counts[rank] elements, not overlapping `in`) holds the reduction of everyone's
// block `rank`. Uses scratch slot 0 for partial sums only on more than two ranks (two blocks'
// worth). ----
LOOM_API void reduce_scatter_ring(Comm& c, const void* in, void* out, ArrayRef<size_t> counts,
                                  DType dt, ReduceOp op);
// The same with block r of the input at in_blocks[r] (blocks anywhere, e.g. separate tensors).
LOOM_API void reduce_scatter_ring(Comm& c, ArrayRef<const void*> in_blocks, void* out,
                                  ArrayRef<size_t> counts, DType dt, ReduceOp op);

// ---- binomial trees rooted anywhere ----
LOOM_API void broadcast_binomial(Comm& c, void* data, size_t bytes, int root);
// Result at root; other ranks' data is left unchanged (they reduce into scratch).
LOOM_API void reduce_binomial(Comm& c, void* data, size_t count, DType dt, ReduceOp op, int root);

// ---- simple collectives ----
// Root receives bytes[r] from each rank r into out + sum(bytes[0..r)); its own block is copied.
LOOM_API void gather_linear(Comm& c, const void* in, void* out, const std::vector<size_t>& bytes,
                            int root);
// Root sends block r (bytes[r] at in + offset) to rank r, which receives into out.
LOOM_API void scatter_linear(Comm& c, const void* in, void* out, const std::vector<size_t>& bytes,
                             int root);
// Pairwise exchange: send_bytes[p] from in + send_off[p] to p; recv_bytes[p] into out +
// recv_off[p].
LOOM_API void alltoallv_pairwise(Comm& c, const void* in, const std::vector<size_t>& send_bytes,
                                 const std::vector<size_t>& send_off, void* out,
                                 const std::vector<size_t>& recv_bytes,
                                 const std::vector<size_t>& recv_off);
LOOM_API void barrier_dissemination(Comm& c);

}  // namespace loom::dist
