// Ring reduce-scatter from an input that is only read to a separate output, blocks of any size
// (zeros included).
//
// Note [Out-of-place reduce-scatter]
// Step s (0 .. size-2) sends block rank-1-s to the right and receives block rank-2-s from the left,
// so that the last step receives this rank's own block. Step 0 sends straight from the input; a
// received piece is written where its partial sum belongs and then reduced with this rank's input
// in place (every ReduceOp is commutative, so recv op in == in op recv): partial sums of the middle
// steps alternate between two block-sized scratch regions, the last step's land in `out`. The
// input is never copied and never written, and two ranks (one step) need no scratch at all.
// Like ring_pass, blocks are cut into K pieces and the pass runs as one stream of items t = s*K +
// j, a piece travelling on one step after it arrived; receives are posted one item ahead. Piece j
// always sits at j * piece_bytes in a region, so pieces of blocks of different lengths never
// overlap. A region is reused two steps later: before receiving into piece j of it, the send that
// read piece j one step earlier (item t-K) is waited for, which has long completed in practice.
#include <algorithm>
#include <cstring>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/pieces.h"
#include "loom/detail/small_vector.h"
#include "loom/error.h"

namespace loom::dist {
namespace {
constexpr size_t kDepth = 2;  // receive of item t+1 in flight while item t is reduced
}  // namespace

void reduce_scatter_ring(Comm& c, ArrayRef<const void*> in_blocks, void* out,
                         ArrayRef<size_t> counts, DType dt, ReduceOp op) {
  const int size = c.size(), rank = c.rank();
  LOOM_CHECK(counts.size() == static_cast<size_t>(size), "[dist] reduce_scatter expected ", size,
             " block counts but got ", counts.size());
  LOOM_CHECK(in_blocks.size() == counts.size(), "[dist] reduce_scatter expected ", size,
             " input blocks but got ", in_blocks.size());
  const size_t es = element_size(dt);
  char* dst = static_cast<char*>(out);
  auto input = [&](int b, size_t first) {
    return static_cast<const char*>(in_blocks[static_cast<size_t>(b)]) + first * es;
  };
  if (size == 1) {
    if (counts[0] > 0 && dst != input(0, 0)) std::memcpy(dst, input(0, 0), counts[0] * es);
    return;
  }
  const size_t max_len = *std::max_element(counts.begin(), counts.end());
  const size_t pieces = piece_count(max_len, es, pipeline_chunk_bytes());
  if (pieces == 0) return;
  const size_t steps = static_cast<size_t>(size - 1), items = steps * pieces;
  const size_t piece_bytes = (max_len + pieces - 1) / pieces * es;
  const size_t region_bytes = pieces * piece_bytes;
  char* acc = steps > 1 ? c.scratch(2 * region_bytes) : nullptr;
  auto partial = [&](size_t s, size_t j) { return acc + (s % 2) * region_bytes + j * piece_bytes; };
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto block_at = [&](size_t s, bool recv) {
    return wrap_rank(rank - 1 - static_cast<long>(s) - (recv ? 1 : 0), size);
  };

  detail::SmallVector<Request*, 8> sent;  // no allocation for small rings of whole blocks
  sent.resize(items);
  const size_t depth = std::min(kDepth, items);
  Request* req[kDepth] = {};
  char* into[kDepth] = {};
  const char* mine[kDepth] = {};
  size_t len[kDepth] = {};
  auto post_recv = [&](size_t t) {
    const size_t s = t / pieces, j = t % pieces, k = t % depth;
    const int b = block_at(s, true);
    const Span sp = split_part(counts[static_cast<size_t>(b)], pieces, j);
    req[k] = nullptr;
    len[k] = sp.len;
    if (sp.len == 0) return;
    mine[k] = input(b, sp.begin);
    if (s + 1 == steps) {
      into[k] = dst + sp.begin * es;
    } else {
      into[k] = partial(s, j);
      if (s >= 2 && sent[t - pieces]) c.wait(sent[t - pieces]);
    }
    req[k] = c.irecv(left, into[k], sp.len * es);
  };

  for (size_t t = 0; t + 1 < depth; ++t) post_recv(t);
  for (size_t t = 0; t < items; ++t) {
    const size_t s = t / pieces, j = t % pieces;
    const int b = block_at(s, false);
    const Span sp = split_part(counts[static_cast<size_t>(b)], pieces, j);
    if (sp.len > 0) {
      const char* from = s == 0 ? input(b, sp.begin) : partial(s - 1, j);
      sent[t] = c.isend(right, from, sp.len * es);
    }
    if (t + depth - 1 < items) post_recv(t + depth - 1);
    const size_t k = t % depth;
    if (!req[k]) continue;
    c.wait(req[k]);
    reduce_into(into[k], mine[k], len[k], dt, op);
  }
  c.wait_all();
}

void reduce_scatter_ring(Comm& c, const void* in, void* out, ArrayRef<size_t> counts, DType dt,
                         ReduceOp op) {
  detail::SmallVector<const void*, 8> blocks;
  blocks.resize(counts.size());
  const char* p = static_cast<const char*>(in);
  for (size_t b = 0; b < counts.size(); ++b) {
    blocks[b] = p;
    p += counts[b] * element_size(dt);
  }
  reduce_scatter_ring(c, ArrayRef<const void*>(blocks.data(), blocks.size()), out, counts, dt, op);
}

}  // namespace loom::dist
