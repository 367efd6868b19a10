// Tree allreduce: a pipelined reduce up the binary tree rooted at rank 0 and a broadcast down it,
// running concurrently (Note [Tree pipeline]). Latency grows with log2(size) rather than size; each
// link carries the whole message in each direction.
#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/tree_pipeline.h"

namespace loom::dist {

void allreduce_tree(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const int size = c.size(), rank = c.rank();
  if (size == 1 || count == 0) return;
  TreePipeline tree(c, btree_node(size, rank), btree_level(size, rank), btree_depth(size),
                    static_cast<char*>(data), count, dt, op, pipeline_chunk_bytes());
  tree.set_scratch(c.scratch(tree.scratch_bytes()));
  for (size_t s = 0; s <= TreePipeline::kLookahead; ++s) tree.post_receives(s);
  for (size_t k = 0; k < tree.steps(); ++k) {
    tree.step(k);
    tree.post_receives(k + TreePipeline::kLookahead + 1);
  }
  c.wait_all();
}

}  // namespace loom::dist
