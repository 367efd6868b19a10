// Binary trees for allreduce_tree and allreduce_double_binary_tree (distributed algorithms,
// internal): the tree shapes and a pipelined reduce-then-broadcast over one tree. See Note [Tree
// pipeline] in tree_pipeline.cpp.
#pragma once

#include <cstddef>

#include "distributed/algorithms/algorithms.h"

namespace loom::dist {

struct TreeNode {
  int parent = -1;          // -1 at the root
  int child[2] = {-1, -1};  // children first, then -1s
  int num_children = 0;
};

// NCCL's in-order binary tree rooted at rank 0: odd ranks are leaves, rank r's level is its lowest
// set bit, and the root has a single child (the largest power of two below size).
LOOM_API TreeNode btree_node(int size, int rank);
// The complementary tree of a double binary tree: btree mirrored (rank -> size-1-rank) when size is
// even, shifted by one (rank -> rank+1) when odd. The first tree's leaves (odd ranks) are inner
// nodes here and vice versa, except that for odd sizes rank 0 is an inner node in both.
LOOM_API TreeNode btree_complement_node(int size, int rank);
// Edges from rank to the root of btree (0 at the root), and the largest such over all ranks.
LOOM_API int btree_level(int size, int rank);
LOOM_API int btree_depth(int size);

// Allreduce of data[0..count) over one tree, in pieces, reduce up and broadcast down at once.
// Several pipelines may run interleaved on one Comm (the double binary tree): call
// post_receives(s) for s = 0, 1, ... on each in turn, and step(k) likewise, as
// allreduce_double_binary_tree does; Note [Tree pipeline] says why that keeps messages matched.
class TreePipeline {
 public:
  // `level`: edges from this rank to the root of its tree; `depth`: the largest level in the tree.
  TreePipeline(Comm& c, const TreeNode& node, int level, int depth, char* data, size_t count,
               DType dt, ReduceOp op, size_t chunk_bytes);
  // Scratch this pipeline needs; hand it over with set_scratch before posting.
  size_t scratch_bytes() const;
  void set_scratch(char* p) { scratch_ = p; }
  // Steps to run (the same on every rank of the tree) and how far receives are posted ahead.
  size_t steps() const { return steps_; }
  static constexpr size_t kLookahead = 1;
  // A rank forwards piece j down at step j + kDownSlack * (its level); Note [Tree pipeline].
  static constexpr size_t kDownSlack = 2;
  // Posts the receives of the messages that their senders send at step s.
  void post_receives(size_t s);
  // Step k: reduce piece k into place and send it up; forward a finished piece down.
  void step(size_t k);

 private:
  // Receives from the parent in flight: posted up to kLookahead + 1 steps ahead, awaited
  // kDownSlack steps after the parent sent them.
  static constexpr size_t kMaxPending = 8;
  static_assert(kLookahead + kDownSlack + 2 <= kMaxPending);
  static constexpr size_t kSlots = kLookahead + 1;
  char* piece(size_t j, size_t* elems) const;
  char* slot(int child, size_t j) const;
  size_t down_lag(int level) const;

  Comm& c_;
  TreeNode node_;
  int level_;
  char* data_;
  size_t count_;
  size_t elem_bytes_;
  DType dt_;
  ReduceOp op_;
  size_t pieces_;
  size_t piece_bytes_;
  size_t steps_;
  char* scratch_ = nullptr;
  Request* from_child_[2][kSlots] = {};     // [child][piece % kSlots]
  Request* from_parent_[kMaxPending] = {};  // [piece % kMaxPending]
};

}  // namespace loom::dist
