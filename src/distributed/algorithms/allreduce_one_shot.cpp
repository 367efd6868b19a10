// One-shot allreduce for small messages: every rank sends its whole buffer to every other rank and
// reduces locally, in rank order, so every rank computes the same bits. One step of latency instead
// of the ring's 2*(size-1) or halving-doubling's 2*log2(size); it moves (size-1) times the buffer
// per rank, so it only pays while messages are small (Note [Allreduce thresholds] in select.cpp).
#include <cstring>

#include "distributed/algorithms/algorithms.h"

namespace loom::dist {

void allreduce_one_shot(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const int n = c.size(), me = c.rank();
  const size_t bytes = count * element_size(dt);
  if (n == 1 || bytes == 0) return;
  char* buf = c.scratch(bytes * static_cast<size_t>(n), 0);
  for (int k = 1; k < n; ++k) {
    int p = (me + n - k) % n;
    c.irecv(p, buf + static_cast<size_t>(p) * bytes, bytes);
  }
  for (int k = 1; k < n; ++k) c.isend((me + k) % n, data, bytes);
  if (me >= 2) std::memcpy(buf + static_cast<size_t>(me) * bytes, data, bytes);
  c.wait_all();  // receives, and sends (which read `data` until they complete)
  // The result is ((x0 op x1) op x2) op ... on every rank. Ranks 0 and 1 start from their own
  // buffer (x1 op x0 == x0 op x1: every reduce op is commutative); the others start from x0.
  auto at = [&](int p) { return buf + static_cast<size_t>(p) * bytes; };
  if (me <= 1) {
    reduce_into(data, at(1 - me), count, dt, op);
  } else {
    std::memcpy(data, at(0), bytes);
    reduce_into(data, at(1), count, dt, op);
  }
  for (int p = 2; p < n; ++p) reduce_into(data, at(p), count, dt, op);
}

}  // namespace loom::dist
