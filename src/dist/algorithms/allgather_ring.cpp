// Ring allgather with blocks of any byte size (zeros included): each block travels size-1 hops and
// is received straight into its place in `out`.
#include <vector>

#include "dist/algorithms.h"
#include "dist/algorithms/ring_pass.h"
#include "loom/error.h"

namespace loom::dist {

void allgather_ring(Comm& c, void* out, const std::vector<size_t>& bytes) {
  const int size = c.size();
  LOOM_CHECK(bytes.size() == static_cast<size_t>(size), "[dist] allgather expected ", size,
             " block sizes but got ", bytes.size());
  if (size == 1) return;
  std::vector<size_t> off(bytes.size() + 1);
  for (size_t b = 0; b < bytes.size(); ++b) off[b + 1] = off[b] + bytes[b];
  ring_pass(c, static_cast<char*>(out), off.data(), 1, 0, nullptr, pipeline_chunk_bytes());
  c.wait_all();
}

}  // namespace loom::dist
