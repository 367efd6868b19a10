// The collective cost model (distributed layer): predicted times of every collective algorithm
// from per-link α-β constants and a reduction throughput γ, over a cluster's topology, as NCCL's
// tuning predicts ring, tree and their channel counts (Note [Collective cost model]).
//
// Note [Collective cost model]
//   A message of b bytes over a link costs α + b·β (α: the fixed cost of one message, β: seconds
//   per byte of one stream). Reducing b bytes into a buffer costs b·γ. An algorithm cuts each
//   transfer into pieces of at most `chunk` bytes, k = ceil(b / chunk) of them: each piece pays α.
//   A transfer costs x(b) = k·α + b·β. One whose pieces are reduced as they arrive costs, over TCP
//   (the kernel moves the next piece while the thread adds this one),
//       x_r(b) = k·α + b·max(β, γ) + (b / k)·min(β, γ)
//   and over shared memory, where the receiving thread both copies and adds, x_r(b) = k·α +
//   b·(β + γ). β is calibrated with both ranks sending at once (Note [Calibrating the cost
//   model]), as in every step of a ring. With c channels (TCP: c sockets per peer) a byte costs
//   max(β / c, β_aggregate): streams add up until the link's aggregate limit.
//
//   Per rank, with n the collective's bytes (the buffer of an allreduce, the whole output of an
//   allgather, the whole input of a reduce-scatter, what one rank sends in an alltoall) and p
//   ranks:
//     allreduce ring        (p-1)·[x_r(n/p) + x(n/p)]                 reduce-scatter, allgather
//     allreduce rhd         Σ_{j=1..log2 q} [x_r(n/2^j) + x(n/2^j)] + fold,  q = 2^floor(log2 p);
//                           fold = x_r(n) + x(n) when q < p (the folded ranks' data in and out)
//     allreduce tree        (2·D + k - 1)·(α + s·(3β + 2γ)),  D the binary tree's depth, k pieces
//                           of s bytes: reduce up and broadcast down at once; the busiest inner
//                           node copies and adds two children's pieces and copies its parent's
//                           (on 2 ranks: β + γ, one child and no parent)
//     allreduce dbt         (2·D + k' - 1)·(2α + s'·(4β + 2γ)),  each tree half the data (k'
//                           pieces of s'); every rank is inner in one tree and a leaf (one copy
//                           down) in the other (on 2 ranks: 2β + γ)
//     allreduce oneshot     (p-1)·(α + n·β) + (p-1)·n·γ               everyone to everyone
//     allreduce hier        (L-1)·[x_r(n/L) + x(n/L)] + (H-1)·[x_r(n/LH) + x(n/LH)]:  H hosts of
//                           L ranks, reduce-scatter and allgather in each host, a ring across in
//                           which L streams share each host's link
//     allreduce hier_tree   ⌈log2 L⌉·[x_r(n) + x(n)] + (H-1)·[x_r(n/H) + x(n/H)]: reduce to a
//                           leader and broadcast back in each host, a ring between the leaders
//                           (only they share the cores then)
//     allgather ring        (p-1)·x(n/p)
//     reduce_scatter ring   (p-1)·x_r(n/p)
//     broadcast binomial    ceil(log2 p)·x(n)
//     reduce binomial       ceil(log2 p)·x_r(n)
//     alltoall pairwise     (p-1)·x(n/p)
//   When s transfers of one step go from one host to another over the network (rhd's partners
//   across hosts, the hierarchical rings), they share its link: a byte costs at least
//   s·β_aggregate (not on one machine: loopback has no wire, only cores, counted below).
//   A step's α and β are those of the slowest link any rank uses in it (the ring's neighbours,
//   rhd's partners at distance 2^j, a tree's parent-child edges, every pair for oneshot and
//   alltoall), so a ring that crosses hosts runs at the network's pace. When a host runs more
//   ranks than it has logical CPUs, they time-share the cores and every term is multiplied by
//   ranks / CPUs (the most of any host). The predictions ignore contention between ranks that share
//   a host's memory bandwidth; `loom topo --predict` prints them next to the formula, and
//   calibration (measured α, β, γ per link class) is what makes them fit.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/distributed/topology.h"
#include "loom/export.h"
#include "loom/json.h"

namespace loom::dist {

constexpr int kNumLinkClasses = 6;  // LinkClass::Self .. LinkClass::NetworkTcp

struct LinkCost {
  double alpha = 0;           // seconds per message
  double beta = 0;            // seconds per byte, one stream
  double beta_aggregate = 0;  // seconds per byte, every stream together (<= beta); 0: as beta
  std::string source;         // "default: ...", "measured"
};

struct LOOM_API CostModel {
  LinkCost links[kNumLinkClasses];
  double gamma = 0;     // seconds per byte reduced (float32 sum)
  std::string host_id;  // the machine calibrated (HostTopology::machine): its hosts share it
  std::string source;   // "defaults from the detected hardware" or "calibrated by loom tune at ..."

  const LinkCost& link(LinkClass c) const { return links[static_cast<int>(c)]; }
  LinkCost& link(LinkClass c) { return links[static_cast<int>(c)]; }

  // Constants from the detected hardware, before any calibration: shared memory from the measured
  // single-core copy bandwidth (or a typical 10 GB/s), TCP on one host from typical loopback
  // figures, TCP between hosts from the fastest up interface's speed (or 10 Gbit/s).
  static CostModel defaults(const HostTopology& host);
  Json to_json() const;
  static CostModel from_json(const Json& j);  // DataError naming the field
  // The calibration file of a host in the cache directory (loom/config.h cache_dir()).
  static std::string path_for(const std::string& host_id);
  // The host's calibration when one was stored, else defaults(host).
  static CostModel load_or_defaults(const HostTopology& host);
  void save() const;
};

enum class Collective : int8_t { Allreduce, Allgather, ReduceScatter, Broadcast, Reduce, Alltoall };
LOOM_API const char* collective_name(Collective c);

struct Prediction {
  std::string algo;  // "ring", "rhd", "tree", "dbt", "oneshot", "hier", "hier_tree", "binomial",
                     // "pairwise"
  int channels = 1;
  size_t chunk_bytes = 0;
  double seconds = 0;
  std::string link;     // the slowest link class it crosses
  std::string formula;  // the terms, in words with numbers: "7 x (x_r(128 KiB) + x(128 KiB))"
};

struct PredictOptions {
  std::vector<size_t> chunks = {64 << 10, 256 << 10, 512 << 10, 2 << 20};
  std::vector<int> channels = {1, 2, 4};  // only for links between hosts and TCP on one host
  bool shared_memory = true;              // ranks of one host use shared memory
};

// Every algorithm x channel count x chunk size for `op` on `bytes` over the ranks of `cluster`,
// fastest first.
LOOM_API std::vector<Prediction> predict(const CostModel& model, const ClusterTopology& cluster,
                                         Collective op, size_t bytes,
                                         const PredictOptions& options = {});

// A cluster of `ranks` ranks on `hosts` hosts of `host`'s kind, ranks spread evenly (the first
// ranks on the first host), each rank's NUMA node the same: for predictions without a group.
LOOM_API ClusterTopology synthetic_cluster(const HostTopology& host, int ranks, int hosts = 1);

}  // namespace loom::dist
