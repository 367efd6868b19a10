// Ring allreduce: a ring reduce-scatter, after which rank r holds the reduced block r+1, then a
// ring allgather of those blocks. Each rank sends and receives 2*(size-1)/size of the data, in
// pipelined pieces (Note [Ring pass]). Blocks differ by at most one element when count % size != 0.
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/pieces.h"
#include "distributed/algorithms/ring_pass.h"

namespace loom::dist {

void allreduce_ring(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const int size = c.size();
  if (size == 1 || count == 0) return;
  std::vector<size_t> off(static_cast<size_t>(size) + 1);
  for (int b = 0; b < size; ++b) {
    off[b + 1] = off[b] + split_part(count, static_cast<size_t>(size), static_cast<size_t>(b)).len;
  }
  const size_t chunk = pipeline_chunk_bytes();
  const RingReduce reduce{dt, op};
  char* bytes = static_cast<char*>(data);
  ring_pass(c, bytes, off.data(), element_size(dt), 0, &reduce, chunk);
  // The allgather may start while reduce-scatter sends are in flight: it sends block r+1, which
  // those never read, and receives only blocks whose reduction needed those sends to arrive.
  ring_pass(c, bytes, off.data(), element_size(dt), 1, nullptr, chunk);
  c.wait_all();
}

}  // namespace loom::dist
