// Double binary tree allreduce (as in NCCL): the first half of the data goes through btree, the
// second half through its complement, where btree's leaves are inner nodes. So every rank (but rank
// 0 for odd sizes) does inner-node work for only one half, and the two trees together use each
// rank's links about evenly. The two pipelines run interleaved, step by step, tree A before tree B
// within a step, which keeps messages matched where both trees use one link (Note [Tree pipeline]).
#include <algorithm>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/pieces.h"
#include "distributed/algorithms/tree_pipeline.h"

namespace loom::dist {

namespace {

// The level of `rank` in the complement tree: its level in btree at the rank it is mapped from.
int complement_level(int size, int rank) {
  return btree_level(size, size % 2 == 0 ? size - 1 - rank : (rank - 1 + size) % size);
}

}  // namespace

void allreduce_double_binary_tree(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const int size = c.size(), rank = c.rank();
  if (size == 1 || count == 0) return;
  const size_t chunk = pipeline_chunk_bytes();
  const int depth = btree_depth(size);
  const Span first = split_part(count, 2, 0), second = split_part(count, 2, 1);
  char* bytes = static_cast<char*>(data);
  TreePipeline a(c, btree_node(size, rank), btree_level(size, rank), depth, bytes, first.len, dt,
                 op, chunk);
  TreePipeline b(c, btree_complement_node(size, rank), complement_level(size, rank), depth,
                 bytes + second.begin * element_size(dt), second.len, dt, op, chunk);
  char* scratch = c.scratch(a.scratch_bytes() + b.scratch_bytes());
  a.set_scratch(scratch);
  b.set_scratch(scratch + a.scratch_bytes());
  for (size_t s = 0; s <= TreePipeline::kLookahead; ++s) {
    a.post_receives(s);
    b.post_receives(s);
  }
  const size_t steps = std::max(a.steps(), b.steps());
  for (size_t k = 0; k < steps; ++k) {
    a.step(k);
    b.step(k);
    a.post_receives(k + TreePipeline::kLookahead + 1);
    b.post_receives(k + TreePipeline::kLookahead + 1);
  }
  c.wait_all();
}

}  // namespace loom::dist
