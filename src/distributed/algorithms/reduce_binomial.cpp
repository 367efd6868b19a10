// Binomial-tree reduce to any root, pipelined in pieces. A rank with children reduces their pieces
// into an accumulator (its own data at the root, a scratch copy elsewhere, so non-root data stays
// unchanged) and sends each finished piece on; leaves send their data as is. Children are reduced
// smallest subtree first, the order in which their results tend to arrive.
#include <algorithm>
#include <cstring>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/binomial_tree.h"
#include "distributed/algorithms/pieces.h"
#include "loom/error.h"

namespace loom::dist {

void reduce_binomial(Comm& c, void* data, size_t count, DType dt, ReduceOp op, int root) {
  const int size = c.size();
  LOOM_CHECK(root >= 0 && root < size, "[dist] reduce root ", root, " is not a rank of a group of ",
             size);
  if (size == 1 || count == 0) return;
  const BinomialNode node = binomial_node(size, c.rank(), root);
  const size_t es = element_size(dt);
  const size_t pieces = piece_count(count, es, pipeline_chunk_bytes());
  const size_t piece_bytes = (count + pieces - 1) / pieces * es;
  char* own = static_cast<char*>(data);
  if (node.num_children == 0) {  // a leaf: our data is the partial result
    for (size_t j = 0; j < pieces; ++j) {
      Span s = split_part(count, pieces, j);
      c.isend(node.parent, own + s.begin * es, s.len * es);
    }
    c.wait_all();
    return;
  }
  // Scratch slot 0 holds the children's pieces, then (off the root) the accumulator.
  const size_t slots_bytes = static_cast<size_t>(node.num_children) * 2 * piece_bytes;
  char* slots = c.scratch(slots_bytes + (node.parent < 0 ? 0 : count * es));
  char* acc = node.parent < 0 ? own : slots + slots_bytes;
  // children[] is largest subtree first; reduce from the back.
  auto slot = [&](int i, size_t j) {
    return slots + (static_cast<size_t>(i) * 2 + j % 2) * piece_bytes;
  };
  Request* req[31][2] = {};
  auto post = [&](size_t j) {
    Span s = split_part(count, pieces, j);
    for (int i = 0; i < node.num_children; ++i) {
      req[i][j % 2] = c.irecv(node.children[i], slot(i, j), s.len * es);
    }
  };
  post(0);
  for (size_t j = 0; j < pieces; ++j) {
    if (j + 1 < pieces) post(j + 1);
    Span s = split_part(count, pieces, j);
    char* a = acc + s.begin * es;
    if (acc != own) std::memcpy(a, own + s.begin * es, s.len * es);
    for (int i = node.num_children - 1; i >= 0; --i) {
      c.wait(req[i][j % 2]);
      reduce_into(a, slot(i, j), s.len, dt, op);
    }
    if (node.parent >= 0) c.isend(node.parent, a, s.len * es);
  }
  c.wait_all();
}

}  // namespace loom::dist
