// Ring allgather with blocks of any byte size (zeros included): each block travels size-1 hops and
// is received straight into its place in `out`. With a separate input, this rank's block is sent
// from there and copied into `out` only after the pass, while the last sends are still being read:
// peers then read memory this rank does not write meanwhile (over shared memory they copy it out of
// this process with process_vm_readv, and a block written just before would be read out of this
// core's cache line by line).
//
// Note [Whole messages without forwarding]
// Pipeline pieces pay off when a rank forwards what it receives (rings of three or more, inner tree
// nodes): the next hop starts before the whole block arrived. With nobody forwarding (a ring of two,
// a broadcast to leaves only) they only add messages: over shared memory each piece is one
// process_vm_readv, and on the 2-core development host one 4 MiB read of a peer's buffer took
// ~480 us where eight 512 KiB reads took ~580 us (the kernel pins and copies per call; median of 41
// reads while the peer spins). Such passes send each block as one message.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dist/algorithms.h"
#include "dist/algorithms/ring_pass.h"
#include "loom/error.h"

namespace loom::dist {

void allgather_ring(Comm& c, const void* in, void* out, const std::vector<size_t>& bytes) {
  const int size = c.size();
  LOOM_CHECK(bytes.size() == static_cast<size_t>(size), "[dist] allgather expected ", size,
             " block sizes but got ", bytes.size());
  std::vector<size_t> off(bytes.size() + 1);
  for (size_t b = 0; b < bytes.size(); ++b) off[b + 1] = off[b] + bytes[b];
  char* mine = static_cast<char*>(out) + off[static_cast<size_t>(c.rank())];
  const char* own = static_cast<const char*>(in) == mine ? nullptr : static_cast<const char*>(in);
  if (size > 1) {
    const size_t chunk =
        size == 2 ? std::max<size_t>(1, *std::max_element(bytes.begin(), bytes.end())) : pipeline_chunk_bytes();
    ring_pass(c, static_cast<char*>(out), off.data(), 1, 0, nullptr, chunk, own);
  }
  if (own && bytes[static_cast<size_t>(c.rank())] > 0) {
    std::memcpy(mine, own, bytes[static_cast<size_t>(c.rank())]);
  }
  c.wait_all();
}

void allgather_ring(Comm& c, void* out, const std::vector<size_t>& bytes) {
  allgather_ring(c, nullptr, out, bytes);
}

}  // namespace loom::dist
