// Binomial-tree broadcast from any root, pipelined: the data is cut into pieces, a rank forwards
// piece j to its children as soon as it arrived, and receives are posted a window ahead straight
// into place. Latency log2(size) hops plus one hop per piece; the root sends the data once per
// child (about log2(size) times), so this suits small and medium messages. On up to three ranks
// nobody forwards (every non-root is a leaf), so pieces gain nothing and the data goes as one
// message: see Note [Whole messages without forwarding] in allgather_ring.cpp.
#include <algorithm>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/binomial_tree.h"
#include "distributed/algorithms/pieces.h"
#include "loom/error.h"

namespace loom::dist {
namespace {
constexpr size_t kWindow = 8;  // receives posted ahead
}  // namespace

void broadcast_binomial(Comm& c, void* data, size_t bytes, int root) {
  const int size = c.size();
  LOOM_CHECK(root >= 0 && root < size, "[dist] broadcast root ", root,
             " is not a rank of a group of ", size);
  if (size == 1 || bytes == 0) return;
  const BinomialNode node = binomial_node(size, c.rank(), root);
  char* p = static_cast<char*>(data);
  const size_t pieces = size <= 3 ? 1 : piece_count(bytes, 1, pipeline_chunk_bytes());
  Request* req[kWindow] = {};
  auto post = [&](size_t j) {
    Span s = split_part(bytes, pieces, j);
    req[j % kWindow] = c.irecv(node.parent, p + s.begin, s.len);
  };
  if (node.parent >= 0) {
    for (size_t j = 0; j < std::min(pieces, kWindow); ++j) post(j);
  }
  for (size_t j = 0; j < pieces; ++j) {
    if (node.parent >= 0) {
      c.wait(req[j % kWindow]);
      if (j + kWindow < pieces) post(j + kWindow);
    }
    Span s = split_part(bytes, pieces, j);
    for (int i = 0; i < node.num_children; ++i) c.isend(node.children[i], p + s.begin, s.len);
  }
  c.wait_all();
}

}  // namespace loom::dist
