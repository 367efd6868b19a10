// Note [Tree pipeline]
// The data is cut into K pieces. At step k a rank waits for piece k from its children (received
// into scratch slots), reduces them into its own piece k in child order and sends the result to its
// parent; the root instead sends its finished piece k to its children. A rank at level d (d edges
// below the root) also waits, at step k, for the final piece k - lag(d) from its parent and
// forwards it to its children, where lag(d) = kDownSlack * d. So a parent forwards a piece
// kDownSlack steps before its child needs it: without that slack a child's step k would wait for
// its parent's step k, which waits for the child's piece k, and the tree would move one piece per
// round trip; with it the upward and downward streams overlap and both directions of each link
// stay busy.
//
// Matching: a link matches messages in posting order, and in a double binary tree two trees may
// use the same link in the same direction. Every message is therefore posted by its sender at a
// known step (up piece j at step j; down piece j at step j + lag(sender level)), trees in a fixed
// order within a step, and the receiver posts the receive for it in the same order of (step, tree):
// post_receives(s) posts exactly the receives whose sends happen at step s. Receives are posted
// kLookahead steps ahead (up pieces into kLookahead + 1 scratch slots per child, down pieces
// straight into place).
//
// Deadlock-free: everything step k waits for is sent at a step <= k, and within step k a rank sends
// its piece up before it waits for anything coming down.
#include "distributed/algorithms/tree_pipeline.h"

#include <algorithm>

#include "distributed/algorithms/pieces.h"
#include "loom/error.h"

namespace loom::dist {
TreeNode btree_node(int size, int rank) {
  TreeNode n;
  int bit = 1;
  while (bit < size && !(bit & rank)) bit <<= 1;
  auto add_child = [&](int ch) { n.child[n.num_children++] = ch; };
  if (rank == 0) {
    if (size > 1) add_child(bit >> 1);
    return n;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= size) up = rank ^ bit;
  n.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    add_child(rank - low);
    // The right child is rank + low, or deeper on the left spine of that subtree when out of range.
    for (; low > 0; low >>= 1) {
      if (rank + low < size) {
        add_child(rank + low);
        break;
      }
    }
  }
  return n;
}

TreeNode btree_complement_node(int size, int rank) {
  const bool mirror = size % 2 == 0;
  auto to_shape = [&](int r) { return mirror ? size - 1 - r : (r - 1 + size) % size; };
  auto from_shape = [&](int r) { return r < 0 ? -1 : mirror ? size - 1 - r : (r + 1) % size; };
  TreeNode s = btree_node(size, to_shape(rank));
  TreeNode n;
  n.parent = from_shape(s.parent);
  n.num_children = s.num_children;
  for (int i = 0; i < s.num_children; ++i) n.child[i] = from_shape(s.child[i]);
  return n;
}

int btree_level(int size, int rank) {
  int level = 0;
  for (int x = rank; x != 0; x = btree_node(size, x).parent) ++level;
  return level;
}

int btree_depth(int size) {
  int depth = 0;
  for (int r = 0; r < size; ++r) depth = std::max(depth, btree_level(size, r));
  return depth;
}

TreePipeline::TreePipeline(Comm& c, const TreeNode& node, int level, int depth, char* data,
                           size_t count, DType dt, ReduceOp op, size_t chunk_bytes)
    : c_(c),
      node_(node),
      level_(level),
      data_(data),
      count_(count),
      elem_bytes_(element_size(dt)),
      dt_(dt),
      op_(op),
      pieces_(piece_count(count, element_size(dt), chunk_bytes)),
      piece_bytes_(pieces_ == 0 ? 0 : (count + pieces_ - 1) / pieces_ * element_size(dt)),
      steps_(pieces_ == 0 ? 0 : pieces_ + down_lag(depth)) {}

size_t TreePipeline::down_lag(int level) const {
  return kDownSlack * static_cast<size_t>(level);
}

size_t TreePipeline::scratch_bytes() const {
  return static_cast<size_t>(node_.num_children) * kSlots * piece_bytes_;
}

char* TreePipeline::piece(size_t j, size_t* elems) const {
  Span sp = split_part(count_, pieces_, j);
  *elems = sp.len;
  return data_ + sp.begin * elem_bytes_;
}

char* TreePipeline::slot(int child, size_t j) const {
  return scratch_ + (static_cast<size_t>(child) * kSlots + j % kSlots) * piece_bytes_;
}

void TreePipeline::post_receives(size_t s) {
  size_t n = 0;
  if (s < pieces_) {
    piece(s, &n);
    for (int ch = 0; ch < node_.num_children; ++ch) {
      from_child_[ch][s % kSlots] = c_.irecv(node_.child[ch], slot(ch, s), n * elem_bytes_);
    }
  }
  // The parent (at level_ - 1) sends piece j down at step j + down_lag(level_ - 1).
  if (node_.parent >= 0 && s >= down_lag(level_ - 1) && s - down_lag(level_ - 1) < pieces_) {
    size_t j = s - down_lag(level_ - 1);
    char* p = piece(j, &n);
    // Our piece j goes up before the answer can come back, so this cannot overwrite it early.
    from_parent_[j % kMaxPending] = c_.irecv(node_.parent, p, n * elem_bytes_);
  }
}

void TreePipeline::step(size_t k) {
  size_t n = 0;
  if (k < pieces_) {
    char* p = piece(k, &n);
    for (int ch = 0; ch < node_.num_children; ++ch) {
      c_.wait(from_child_[ch][k % kSlots]);
      reduce_into(p, slot(ch, k), n, dt_, op_);
    }
    if (node_.parent >= 0) {
      c_.isend(node_.parent, p, n * elem_bytes_);
    } else {
      for (int ch = 0; ch < node_.num_children; ++ch) c_.isend(node_.child[ch], p, n * elem_bytes_);
    }
  }
  const size_t lag = down_lag(level_);
  if (node_.parent >= 0 && k >= lag && k - lag < pieces_) {
    const size_t j = k - lag;
    c_.wait(from_parent_[j % kMaxPending]);
    char* p = piece(j, &n);
    for (int ch = 0; ch < node_.num_children; ++ch) c_.isend(node_.child[ch], p, n * elem_bytes_);
  }
}

}  // namespace loom::dist
