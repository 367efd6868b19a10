// Ring reduce-scatter with blocks of any size (zeros included): the ring pass with the block index
// shifted by one, so that the block rank r finishes with is its own.
#include <vector>

#include "dist/algorithms.h"
#include "dist/algorithms/ring_pass.h"
#include "loom/error.h"

namespace loom::dist {

void reduce_scatter_ring(Comm& c, void* data, const std::vector<size_t>& counts, DType dt,
                         ReduceOp op) {
  const int size = c.size();
  LOOM_CHECK(counts.size() == static_cast<size_t>(size), "[dist] reduce_scatter expected ", size,
             " block counts but got ", counts.size());
  if (size == 1) return;
  std::vector<size_t> off(counts.size() + 1);
  for (size_t b = 0; b < counts.size(); ++b) off[b + 1] = off[b] + counts[b];
  const RingReduce reduce{dt, op};
  ring_pass(c, static_cast<char*>(data), off.data(), element_size(dt), -1, &reduce,
            pipeline_chunk_bytes());
  c.wait_all();
}

}  // namespace loom::dist
