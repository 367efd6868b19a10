// Binomial tree rooted anywhere, for broadcast_binomial and reduce_binomial (distributed
// algorithms, internal). With v = (rank - root) mod size, v's parent is v with its lowest set bit
// cleared and its children are v + 2^i for every 2^i below that bit (and below size).
#pragma once

namespace loom::dist {

struct BinomialNode {
  int parent = -1;   // real rank; -1 at the root
  int children[31];  // real ranks, largest subtree first
  int num_children = 0;
};

inline BinomialNode binomial_node(int size, int rank, int root) {
  BinomialNode n;
  const int v = (rank - root + size) % size;
  int mask = 1;
  while (mask < size) {
    if (v & mask) {
      n.parent = (v - mask + root) % size;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < size) n.children[n.num_children++] = (v + mask + root) % size;
  }
  return n;
}

}  // namespace loom::dist
