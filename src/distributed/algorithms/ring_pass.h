// The ring pass shared by allgather_ring and allreduce_ring (distributed algorithms,
// internal). See Note [Ring pass] in ring_pass.cpp.
#pragma once

#include <cstddef>

#include "distributed/algorithms/algorithms.h"

namespace loom::dist {

struct RingReduce {
  DType dtype;
  ReduceOp op;
};

// Block b is off[b] .. off[b+1] (in elements of elem_bytes) within data; off has size+1 entries.
// At step s (0 .. size-2) this rank sends block (rank+shift-s) to rank+1 and receives block
// (rank+shift-s-1) from rank-1, reducing it into place when `reduce` is set and writing it in place
// otherwise. After the pass, with `reduce`, block (rank+shift+1) holds the full reduction; without,
// every block is filled when rank r started owning block r+shift. Sends may still be in flight on
// return: the caller waits for them (Comm::wait_all) before handing `data` back. `own`, when set,
// holds the block sent at step 0 (block rank+shift, never received here): it is sent from there and
// data's copy of it is neither read nor written.
void ring_pass(Comm& c, char* data, const size_t* off, size_t elem_bytes, int shift,
               const RingReduce* reduce, size_t chunk_bytes, const char* own = nullptr);

}  // namespace loom::dist
