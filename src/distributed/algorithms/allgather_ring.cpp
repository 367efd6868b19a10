// Ring allgather with blocks of any byte size (zeros included): each block travels size-1 hops and
// is received straight into its place in `out`. With a separate input, this rank's block is sent
// from there and copied into `out` only after the pass, while the last sends are still being read:
// peers then read memory this rank does not write meanwhile (over shared memory they copy it out of
// this process with process_vm_readv, and a block written just before would be read out of this
// core's cache line by line).
//
// Note [Whole messages without forwarding]
// Pipeline pieces pay off when a rank forwards what it receives (rings of three or more, inner tree
// nodes): the next hop starts before the whole block arrived. With nobody forwarding (a ring of
// two, a broadcast to leaves only) they only add messages: over shared memory each piece is one
// process_vm_readv, and on the 2-core development host one 4 MiB read of a peer's buffer took
// ~480 us where eight 512 KiB reads took ~580 us (the kernel pins and copies per call; median of 41
// reads while the peer spins). Such passes send each block as one message.
#include <cstring>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/ring_pass.h"
#include "loom/detail/small_vector.h"
#include "loom/error.h"

namespace loom::dist {

// Note [Two-rank allgather]
// Two ranks swap their blocks: one receive, one send, as the ring pass would post them. This rank's
// own block is copied into `out` while the peer's block is still on its way, once the send has
// completed (its bytes left this process: a small message is copied into the link at once), so the
// copy is off the critical path of a small allgather. A send still in flight (a large message the
// peer reads by address) keeps the copy for after the exchange, for the reason given above.
void allgather_ring(Comm& c, const void* in, void* out, ArrayRef<size_t> bytes) {
  const int size = c.size(), rank = c.rank();
  LOOM_CHECK(bytes.size() == static_cast<size_t>(size), "[dist] allgather expected ", size,
             " block sizes but got ", bytes.size());
  detail::SmallVector<size_t, 9> off;  // no allocation up to 8 ranks
  off.resize(bytes.size() + 1);
  for (size_t b = 0; b < bytes.size(); ++b) off[b + 1] = off[b] + bytes[b];
  char* mine = static_cast<char*>(out) + off[static_cast<size_t>(rank)];
  const char* own = static_cast<const char*>(in) == mine ? nullptr : static_cast<const char*>(in);
  const size_t own_bytes = bytes[static_cast<size_t>(rank)];
  if (size == 2) {
    const int peer = 1 - rank;
    const size_t peer_bytes = bytes[static_cast<size_t>(peer)];
    char* theirs = static_cast<char*>(out) + off[static_cast<size_t>(peer)];
    Request* recv = peer_bytes > 0 ? c.irecv(peer, theirs, peer_bytes) : nullptr;
    Request* send = own_bytes > 0 ? c.isend(peer, own ? own : mine, own_bytes) : nullptr;
    if (own && own_bytes > 0 && c.test(send)) {
      std::memcpy(mine, own, own_bytes);
      own = nullptr;
    }
    if (recv) c.wait(recv);
  } else if (size > 2) {
    ring_pass(c, static_cast<char*>(out), off.data(), 1, 0, nullptr, pipeline_chunk_bytes(), own);
  }
  if (own && own_bytes > 0) std::memcpy(mine, own, own_bytes);
  c.wait_all();
}

void allgather_ring(Comm& c, void* out, ArrayRef<size_t> bytes) {
  allgather_ring(c, nullptr, out, bytes);
}

}  // namespace loom::dist
