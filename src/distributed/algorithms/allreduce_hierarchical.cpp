// Hierarchical allreduce across hosts: the ranks of one host talk over shared memory, and only
// across hosts over the network.
//
// Note [Hierarchical allreduce]
// With H hosts of L ranks each, a flat ring crosses the network on every one of its 2(p-1) steps
// at the network's pace. The hierarchical ("2D") allreduce keeps the network for 1/L of the data:
//   1. reduce-scatter inside each host (ring over shared memory): local rank l holds block l of
//      the host's sum (n/L bytes);
//   2. allreduce of block l between the H ranks of local rank l, one on each host (ring over
//      TCP); the L such groups run at once, so the host's network link carries L streams;
//   3. allgather inside each host: every rank gets every block.
// Per rank the network carries 2(H-1)/H · n/L bytes instead of the ring's 2(p-1)/p · n. Phase 1's
// block sits in scratch slot 2 (the ordinary algorithms inside use slot 0, the process group
// slot 1). The L groups of phase 2 need the same number of ranks on every host; otherwise the tree
// variant runs: a binomial reduce to each host's first rank, a ring allreduce between those
// leaders, and a binomial broadcast back inside each host. It moves all n bytes over the network
// (from one rank per host) and is chosen when hosts are uneven or L streams would not fit the link.
// Both run every phase through Comm::SubGroup (Note [Sub-groups]), so the phases are the
// ordinary, tested algorithms. Hosts come from Comm::host_of(); with one host or one rank per host
// they degenerate into the ring.
#include <algorithm>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/algorithms/pieces.h"
#include "loom/error.h"

namespace loom::dist {

HostLayout host_layout(const Comm& c) {
  HostLayout h;
  const int p = c.world_size();
  const std::vector<int>& host_of = c.host_of();
  std::vector<std::vector<int>> by_host;
  for (int r = 0; r < p; ++r) {
    const int host = host_of.empty() ? 0 : host_of[static_cast<size_t>(r)];
    LOOM_INTERNAL_ASSERT(host >= 0 && host < p, "host index ", host, " of rank ", r);
    if (static_cast<size_t>(host) >= by_host.size()) by_host.resize(static_cast<size_t>(host) + 1);
    by_host[static_cast<size_t>(host)].push_back(r);
  }
  std::erase_if(by_host, [](const std::vector<int>& v) { return v.empty(); });
  h.hosts = static_cast<int>(by_host.size());
  h.even = true;
  for (const auto& v : by_host) h.even &= v.size() == by_host[0].size();
  for (const auto& v : by_host) {
    auto it = std::find(v.begin(), v.end(), c.world_rank());
    if (it == v.end()) continue;
    h.local = v;
    h.local_rank = static_cast<int>(it - v.begin());
  }
  for (const auto& v : by_host) {
    if (h.local_rank < static_cast<int>(v.size()))
      h.cross.push_back(v[static_cast<size_t>(h.local_rank)]);
    h.leaders.push_back(v[0]);
  }
  return h;
}

void allreduce_hierarchical(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const HostLayout h = host_layout(c);
  if (!h.even) return allreduce_hierarchical_tree(c, data, count, dt, op);
  const size_t L = h.local.size(), es = element_size(dt);
  std::vector<size_t> counts(L), bytes(L);
  for (size_t i = 0; i < L; ++i) {
    counts[i] = split_part(count, L, i).len;
    bytes[i] = counts[i] * es;
  }
  const size_t mine = counts[static_cast<size_t>(h.local_rank)];
  char* block = c.scratch(std::max<size_t>(mine * es, 1), 2);
  {
    Comm::SubGroup host(c, h.local);
    reduce_scatter_ring(c, data, block, counts, dt, op);
  }
  {
    Comm::SubGroup across(c, h.cross);
    allreduce_ring(c, block, mine, dt, op);
  }
  Comm::SubGroup host(c, h.local);
  allgather_ring(c, block, data, bytes);
}

void allreduce_hierarchical_tree(Comm& c, void* data, size_t count, DType dt, ReduceOp op) {
  const HostLayout h = host_layout(c);
  {
    Comm::SubGroup host(c, h.local);
    reduce_binomial(c, data, count, dt, op, 0);
  }
  if (h.local_rank == 0) {
    Comm::SubGroup leaders(c, h.leaders);
    allreduce_ring(c, data, count, dt, op);
  }
  Comm::SubGroup host(c, h.local);
  broadcast_binomial(c, data, count * element_size(dt), 0);
}

}  // namespace loom::dist
