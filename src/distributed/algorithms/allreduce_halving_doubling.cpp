// Recursive halving-doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving, then
// an allgather by recursive doubling, over the largest power of two p2 <= size. Each rank moves
// 2*(p2-1)/p2 of the data in 2*log2(p2) steps, which suits small and medium messages.
//
// Other sizes fold first: of the first 2*(size-p2) ranks, each even rank sends its data to the odd
// rank above it and sits out; the odd rank reduces it and takes part; at the end it sends the
// result back. Every exchange is cut into pipeline pieces so the reduction of a piece overlaps the
// transfer of the next ones.
#include <algorithm>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/pieces.h"

namespace loom::dist {
namespace {

constexpr size_t kWindow = 4;  // receives in flight while a piece is reduced

struct Exchange {
  Comm& c;
  size_t elem_bytes;
  DType dt;
  ReduceOp op;
  size_t chunk;

  size_t pieces(size_t n) const { return piece_count(n, elem_bytes, chunk); }
  size_t piece_bytes(size_t n) const {
    size_t k = pieces(n);
    return k == 0 ? 0 : (n + k - 1) / k * elem_bytes;
  }

  void send(int peer, const char* p, size_t n) {
    const size_t k = pieces(n);
    for (size_t j = 0; j < k; ++j) {
      Span s = split_part(n, k, j);
      c.isend(peer, p + s.begin * elem_bytes, s.len * elem_bytes);
    }
  }
  void recv(int peer, char* p, size_t n) {
    const size_t k = pieces(n);
    for (size_t j = 0; j < k; ++j) {
      Span s = split_part(n, k, j);
      c.irecv(peer, p + s.begin * elem_bytes, s.len * elem_bytes);
    }
  }
  // Receives n elements from peer into kWindow scratch slots and reduces them into dst as they
  // come. The first receives are posted before sending send_n elements from `out` to the peer.
  void exchange_reduce(int peer, char* dst, size_t n, char* scratch, const char* out = nullptr,
                       size_t send_n = 0) {
    const size_t k = pieces(n), slot_bytes = piece_bytes(n);
    Request* req[kWindow] = {};
    auto post = [&](size_t j) {
      Span s = split_part(n, k, j);
      req[j % kWindow] = c.irecv(peer, scratch + (j % kWindow) * slot_bytes, s.len * elem_bytes);
    };
    for (size_t j = 0; j < std::min(k, kWindow); ++j) post(j);
    send(peer, out, send_n);
    for (size_t j = 0; j < k; ++j) {
      Span s = split_part(n, k, j);
      c.wait(req[j % kWindow]);
      reduce_into(dst + s.begin * elem_bytes, scratch + (j % kWindow) * slot_bytes, s.len, dt, op);
      if (j + kWindow < k) post(j + kWindow);
    }
  }
  // Enough for exchange_reduce of any n <= count: a piece never exceeds the chunk nor n.
  size_t scratch_bytes(size_t count) const {
    return kWindow * std::min(std::max<size_t>(1, chunk / elem_bytes), count) * elem_bytes;
  }
};

}  // namespace

void allreduce_halving_doubling(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const int size = c.size(), rank = c.rank();
  if (size == 1 || count == 0) return;
  Exchange x{c, element_size(dt), dt, op, pipeline_chunk_bytes()};
  char* bytes = static_cast<char*>(data);
  const size_t es = x.elem_bytes;
  char* scratch = c.scratch(x.scratch_bytes(count));

  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  const int extra = size - p2;
  // Rank within the power-of-two group (ranks that fold their data into a partner return early).
  int vrank;
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      x.send(rank + 1, bytes, count);
      x.recv(rank + 1, bytes, count);  // the result; our data left before the partner could reply
      c.wait_all();
      return;
    }
    x.exchange_reduce(rank - 1, bytes, count, scratch);
    vrank = rank / 2;
  } else {
    vrank = rank - extra;
  }
  auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  // Block b of p2 near-equal blocks starts at element block_start(b).
  auto block_start = [&](int b) {
    return b == p2 ? count
                   : split_part(count, static_cast<size_t>(p2), static_cast<size_t>(b)).begin;
  };

  // Recursive halving: keep the half of the current block range on our side of bit `d`, send the
  // other half, reduce the partner's copy of ours. We end with block vrank fully reduced.
  int lo = 0, hi = p2;
  for (int d = p2 / 2; d >= 1; d /= 2) {
    const int peer = real_rank(vrank ^ d), mid = (lo + hi) / 2;
    const bool lower = (vrank & d) == 0;
    const int keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    const int give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
    x.exchange_reduce(
        peer, bytes + block_start(keep_lo) * es, block_start(keep_hi) - block_start(keep_lo),
        scratch, bytes + block_start(give_lo) * es, block_start(give_hi) - block_start(give_lo));
    lo = keep_lo;
    hi = keep_hi;
  }
  // Recursive doubling: swap our finished range for the partner's, straight into place.
  for (int d = 1; d < p2; d *= 2) {
    const int peer = real_rank(vrank ^ d);
    const int width = hi - lo;
    const int peer_lo = (vrank & d) == 0 ? hi : lo - width;
    x.recv(peer, bytes + block_start(peer_lo) * es,
           block_start(peer_lo + width) - block_start(peer_lo));
    x.send(peer, bytes + block_start(lo) * es, block_start(hi) - block_start(lo));
    c.wait_all();
    lo = std::min(lo, peer_lo);
    hi = lo + 2 * width;
  }
  if (rank < 2 * extra) x.send(rank - 1, bytes, count);
  c.wait_all();
}

}  // namespace loom::dist
