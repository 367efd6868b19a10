// Note [Ring pass]
// The ring moves size-1 steps of one block each. Each block is cut into K pieces (K from the
// largest block and the pipeline chunk), and the pass runs as one stream of (step, piece) items t =
// s*K + j: at item t this rank sends piece j of its step-s block, which it finished receiving at
// item t-K, so a piece travels on as soon as it arrived instead of waiting for its whole block.
// Receives are posted `depth` items ahead: with a reduction they land in `depth` scratch slots (the
// receive of item t+1 is in flight while item t is reduced), without one they land straight in
// place. Pieces of an empty part of a block are skipped on both sides, which compute the same
// lengths.
#include "distributed/algorithms/ring_pass.h"

#include <algorithm>

#include "distributed/algorithms/pieces.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

constexpr size_t kReduceDepth = 2;  // scratch slots: double buffering
constexpr size_t kCopyDepth = 4;    // in-place receives posted ahead
constexpr size_t kMaxDepth = 4;

}  // namespace

void ring_pass(Comm& c, char* data, const size_t* off, size_t elem_bytes, int shift,
               const RingReduce* reduce, size_t chunk_bytes, const char* own) {
  const int size = c.size(), rank = c.rank();
  if (size == 1) return;
  size_t max_len = 0;
  for (int b = 0; b < size; ++b) max_len = std::max(max_len, off[b + 1] - off[b]);
  const size_t pieces = piece_count(max_len, elem_bytes, chunk_bytes);
  if (pieces == 0) return;
  const size_t items = static_cast<size_t>(size - 1) * pieces;
  const size_t piece_bytes = (max_len + pieces - 1) / pieces * elem_bytes;
  const size_t depth = std::min(reduce ? kReduceDepth : kCopyDepth, items);
  char* scratch = reduce ? c.scratch(depth * piece_bytes) : nullptr;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;

  // Piece j of the block sent (recv = false) or received (recv = true) at item t: its first element
  // within data, and its length.
  auto piece = [&](size_t t, bool recv, size_t* elems) {
    long s = static_cast<long>(t / pieces);
    int b = wrap_rank(rank + shift - s - (recv ? 1 : 0), size);
    Span sp = split_part(off[b + 1] - off[b], pieces, t % pieces);
    *elems = sp.len;
    return off[b] + sp.begin;
  };
  const size_t own_first = off[wrap_rank(rank + shift, size)];

  Request* req[kMaxDepth] = {};
  char* dst[kMaxDepth] = {};
  size_t len[kMaxDepth] = {};
  auto post_recv = [&](size_t t) {
    size_t k = t % depth;
    dst[k] = data + piece(t, true, &len[k]) * elem_bytes;
    char* into = reduce ? scratch + k * piece_bytes : dst[k];
    req[k] = len[k] == 0 ? nullptr : c.irecv(left, into, len[k] * elem_bytes);
  };

  for (size_t t = 0; t + 1 < depth; ++t) post_recv(t);
  for (size_t t = 0; t < items; ++t) {
    size_t n = 0;
    const size_t first = piece(t, false, &n);
    const char* src =
        own && t < pieces ? own + (first - own_first) * elem_bytes : data + first * elem_bytes;
    if (n > 0) c.isend(right, src, n * elem_bytes);
    if (t + depth - 1 < items) post_recv(t + depth - 1);
    size_t k = t % depth;
    if (!req[k]) continue;
    c.wait(req[k]);
    if (reduce) reduce_into(dst[k], scratch + k * piece_bytes, len[k], reduce->dtype, reduce->op);
  }
}

}  // namespace loom::dist
