// The collective cost model (Note [Collective cost model] in loom/distributed/cost_model.h):
// predictions against the formulas computed by hand for chosen constants, the link classes a
// cluster of two hosts gives each algorithm, defaults, and the calibration file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "distributed/multiprocess.h"
#include "loom/config.h"
#include "loom/distributed/cost_model.h"
#include "loom/distributed/process_group.h"
#include "loom/ops.h"
#include "temp_dir.h"

namespace loom::dist {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

HostTopology one_host() {
  HostTopology h;
  h.hostname = "h";
  h.host_id = "h:boot";
  return h;
}

// alpha 1 us, beta 1 ns/B, gamma 0.5 ns/B on shared memory; the network 10 us, 4 ns/B a stream,
// 1 ns/B in all.
CostModel hand_model() {
  CostModel m = CostModel::defaults(one_host());
  m.link(LinkClass::SharedNuma) = {1e-6, 1e-9, 0, "test"};
  m.link(LinkClass::NetworkTcp) = {10e-6, 4e-9, 1e-9, "test"};
  m.gamma = 0.5e-9;
  return m;
}

const Prediction& find(const std::vector<Prediction>& all, const std::string& algo,
                       int channels = 1) {
  for (const Prediction& p : all)
    if (p.algo == algo && p.channels == channels) return p;
  throw std::runtime_error("no prediction for " + algo);
}

PredictOptions one_chunk() {
  PredictOptions o;
  o.chunks = {512 << 10};
  o.channels = {1, 2};
  return o;
}

// By hand, for 4 MiB on 4 ranks with 512 KiB pieces, over shared memory (the receiver copies and
// adds: no overlap): a 1 MiB block is 2 pieces, so
//   x_r(1 MiB) = 2a + 1 MiB x (b + g) = 2e-6 + 1.572864e-3 = 1.574864e-3
//   x(1 MiB)   = 2a + 1 MiB x b       = 2e-6 + 1.048576e-3 = 1.050576e-3
//   ring = 3 x (x_r + x) = 7.87632e-3 s
//   rhd  = x_r(2 MiB) + x(2 MiB) + x_r(1 MiB) + x(1 MiB)
//        = (4e-6 + 3.145728e-3) + (4e-6 + 2.097152e-3) + 2.62544e-3 = 7.87632e-3 s: the same bytes
//   and, with two pieces a block against four and two, the same 12 messages.
TEST(CostModel, AllreduceFormulasOnOneHost) {
  const CostModel m = hand_model();
  const ClusterTopology c = synthetic_cluster(one_host(), 4, 1);
  const std::vector<Prediction> all = predict(m, c, Collective::Allreduce, 4 * kMiB, one_chunk());
  EXPECT_NEAR(find(all, "ring").seconds, 7.87632e-3, 1e-12);
  EXPECT_NEAR(find(all, "rhd").seconds, 7.87632e-3, 1e-12);
  EXPECT_EQ(find(all, "ring").link, "shm, same NUMA node");
  // One shot: 3 x (a + 4 MiB x b) + 3 x 4 MiB x g.
  EXPECT_NEAR(find(all, "oneshot").seconds, 3 * (1e-6 + 4194304e-9) + 3 * 4194304 * 0.5e-9, 1e-12);
  // Tree of depth 2 (4 ranks): 8 pieces of 512 KiB: (2 x 2 + 8 - 1) x (a + 512 KiB x (3b + 2g)).
  EXPECT_NEAR(find(all, "tree").seconds, 11 * (1e-6 + 524288 * 4e-9), 1e-12);
  EXPECT_EQ(find(all, "tree").formula, "(2 x depth 2 + pieces - 1) x (a + piece x (3b + 2g))");
  // Double binary tree: 4 pieces of 512 KiB a half: (2 x 2 + 4 - 1) x (2a + 512 KiB x (4b + 2g)).
  EXPECT_NEAR(find(all, "dbt").seconds, 7 * (2e-6 + 524288 * 5e-9), 1e-12);
  // Fastest first (ties in the order the algorithms are listed); on shared memory nothing offers
  // channels.
  EXPECT_EQ(all.front().algo, "ring");
  for (size_t k = 1; k < all.size(); ++k) EXPECT_LE(all[k - 1].seconds, all[k].seconds);
  for (const Prediction& p : all) EXPECT_EQ(p.channels, 1);
}

// Five ranks fold one pair: rhd adds x_r(4 MiB) + x(4 MiB) = (8e-6 + 6.291456e-3) +
// (8e-6 + 4.194304e-3); the binomial broadcast takes ceil(log2 5) = 3 rounds of x(4 MiB).
TEST(CostModel, FoldsAndBinomialRounds) {
  const CostModel m = hand_model();
  const ClusterTopology c = synthetic_cluster(one_host(), 5, 1);
  const auto all = predict(m, c, Collective::Allreduce, 4 * kMiB, one_chunk());
  EXPECT_NEAR(find(all, "rhd").seconds, 7.87632e-3 + 1.050176e-2, 1e-12);
  const auto bcast = predict(m, c, Collective::Broadcast, 4 * kMiB, one_chunk());
  ASSERT_EQ(bcast.size(), 1u);
  EXPECT_NEAR(bcast[0].seconds, 3 * (8e-6 + 4194304e-9), 1e-12);
  EXPECT_EQ(bcast[0].formula, "3 x x(4 MiB)");
  // Allgather and reduce-scatter of 5 MiB: 4 steps of a 1 MiB block.
  const auto ag = predict(m, c, Collective::Allgather, 5 * kMiB, one_chunk());
  EXPECT_NEAR(ag[0].seconds, 4 * (2e-6 + 1048576e-9), 1e-12);
  const auto rs = predict(m, c, Collective::ReduceScatter, 5 * kMiB, one_chunk());
  EXPECT_NEAR(rs[0].seconds, 4 * (2e-6 + 1048576 * 1.5e-9), 1e-12);
}

// Two hosts of two ranks: the ring has neighbours on the other host, so every step runs at the
// network's pace; rhd crosses hosts only at distance 2 (ranks 0-2, 1-3) and stays on shared memory
// at distance 1. Two channels make a network byte max(4/2, 1) = 2 ns; over TCP a piece's addition
// overlaps the next piece's transfer.
TEST(CostModel, LinksAcrossHostsDecideTheChoice) {
  const CostModel m = hand_model();
  const ClusterTopology c = synthetic_cluster(one_host(), 4, 2);
  EXPECT_EQ(c.ranks[1].host, 0);
  EXPECT_EQ(c.ranks[2].host, 1);
  const auto all = predict(m, c, Collective::Allreduce, 4 * kMiB, one_chunk());
  const Prediction& ring = find(all, "ring", 2);
  EXPECT_EQ(ring.link, "tcp, between hosts");
  // x_r(1 MiB) over the network with 2 channels: 2 x 10e-6 + 1 MiB x 2e-9 + 512 KiB x 0.5e-9.
  const double xr = 20e-6 + 1048576 * 2e-9 + 524288 * 0.5e-9, x = 20e-6 + 1048576 * 2e-9;
  EXPECT_NEAR(ring.seconds, 3 * (xr + x), 1e-12);
  // rhd: the network level exchanges 2 MiB (4 pieces), the shared-memory level 1 MiB.
  const double net = (40e-6 + 2097152 * 2e-9 + 524288 * 0.5e-9) + (40e-6 + 2097152 * 2e-9);
  EXPECT_NEAR(find(all, "rhd", 2).seconds, net + 2.62544e-3, 1e-12);
  EXPECT_GT(find(all, "rhd", 1).seconds, find(all, "rhd", 2).seconds);
  // Of the flat algorithms rhd wins (the hierarchical one beats it: HierarchicalAcrossHosts).
  auto flat = std::find_if(all.begin(), all.end(),
                           [](const Prediction& p) { return p.algo.rfind("hier", 0) != 0; });
  EXPECT_EQ(flat->algo, "rhd");
}

// Two hosts of two ranks, 4 MiB, 512 KiB pieces, 2 channels (a network byte 2 ns; two streams a
// host need 2 x 1 ns in all, so still 2 ns). hier: reduce-scatter and allgather of 2 MiB blocks
// over shared memory (4 pieces), a ring of 1 MiB halves across (2 pieces):
//   4a + 2 MiB (b + g) + 4a + 2 MiB b        = 3.149728e-3 + 2.101152e-3
//   + x_r(1 MiB) + x(1 MiB) over TCP        = 2.379296e-3 + 2.117152e-3,  9.747328e-3 in all,
// which beats the flat ring (3 x 4.496448e-3) and rhd (11.356192e-3). hier_tree reduces and
// broadcasts 4 MiB in each host (one round, 8 pieces: 8a + 4 MiB (b + g), then 8a + 4 MiB b)
// and rings 2 MiB halves between the leaders.
TEST(CostModel, HierarchicalAcrossHosts) {
  const CostModel m = hand_model();
  const auto all =
      predict(m, synthetic_cluster(one_host(), 4, 2), Collective::Allreduce, 4 * kMiB, one_chunk());
  const Prediction& hier = find(all, "hier", 2);
  EXPECT_EQ(hier.link, "tcp, between hosts");
  EXPECT_NEAR(hier.seconds, 3.149728e-3 + 2.101152e-3 + 2.379296e-3 + 2.117152e-3, 1e-12);
  EXPECT_EQ(hier.formula,
            "1 x (x_r(2 MiB) + x(2 MiB)) in each host + 1 x (x_r(1 MiB) + x(1 MiB)) across, 2 "
            "streams a host");
  // Leaders' ring of 2 MiB halves (4 pieces): 4 x 10e-6 + 2 MiB x 2e-9 + 512 KiB x 0.5e-9, then
  // 4 x 10e-6 + 2 MiB x 2e-9.
  const double leaders = (40e-6 + 2097152 * 2e-9 + 524288 * 0.5e-9) + (40e-6 + 2097152 * 2e-9);
  const double host = (8e-6 + 4194304 * 1.5e-9) + (8e-6 + 4194304 * 1e-9);
  EXPECT_NEAR(find(all, "hier_tree", 2).seconds, host + leaders, 1e-12);
  EXPECT_EQ(all.front().algo, "hier");
  // With 1 ns a byte in all, four streams a host would each get 4 ns: 4 ranks a host make the
  // network part of hier slower than two channels alone would.
  const auto wide =
      predict(m, synthetic_cluster(one_host(), 8, 2), Collective::Allreduce, 4 * kMiB, one_chunk());
  EXPECT_NE(find(wide, "hier", 2).formula.find("4 streams a host"), std::string::npos);
  // Uneven hosts (two ranks and one) have only the tree variant; one host has neither.
  const auto uneven =
      predict(m, synthetic_cluster(one_host(), 3, 2), Collective::Allreduce, 4 * kMiB, one_chunk());
  for (const Prediction& p : uneven) EXPECT_NE(p.algo, "hier");
  EXPECT_NO_THROW(find(uneven, "hier_tree", 2));
  const auto one =
      predict(m, synthetic_cluster(one_host(), 4, 1), Collective::Allreduce, 4 * kMiB, one_chunk());
  for (const Prediction& p : one) EXPECT_EQ(p.algo.rfind("hier", 0), std::string::npos);
}

// Four ranks on a host of two logical CPUs time-share the cores: every term doubles.
TEST(CostModel, RanksBeyondTheCoresTimeShare) {
  HostTopology h = one_host();
  h.logical_cpus = 2;
  const auto shared = predict(hand_model(), synthetic_cluster(h, 4, 1), Collective::Allreduce,
                              4 * kMiB, one_chunk());
  EXPECT_NEAR(find(shared, "ring").seconds, 2 * 7.87632e-3, 1e-12);
  h.logical_cpus = 8;
  const auto own = predict(hand_model(), synthetic_cluster(h, 4, 1), Collective::Allreduce,
                           4 * kMiB, one_chunk());
  EXPECT_NEAR(find(own, "ring").seconds, 7.87632e-3, 1e-12);
}

TEST(CostModel, OneRankMovesNothing) {
  const auto all =
      predict(hand_model(), synthetic_cluster(one_host(), 1, 1), Collective::Allreduce, kMiB);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].seconds, 0);
  EXPECT_THROW(synthetic_cluster(one_host(), 2, 3), ValueError);
}

TEST(CostModel, DefaultsFollowTheHardware) {
  HostTopology h = one_host();
  const CostModel plain = CostModel::defaults(h);
  EXPECT_NEAR(plain.link(LinkClass::SharedNuma).beta, 1 / 10e9, 1e-20);
  EXPECT_NEAR(plain.link(LinkClass::NetworkTcp).beta_aggregate, 8 / 10e9, 1e-20);
  h.memory_bandwidth_one_core = 40e9;  // read + write: 20 GB/s of copies
  NetInterface nic;
  nic.name = "eth0";
  nic.kind = "ethernet";
  nic.up = true;
  nic.speed_mbps = 100000;
  h.nics.push_back(nic);
  const CostModel m = CostModel::defaults(h);
  EXPECT_NEAR(m.link(LinkClass::SharedNuma).beta, 1 / 20e9, 1e-20);
  EXPECT_NEAR(m.link(LinkClass::NetworkTcp).beta_aggregate, 8 / 100e9, 1e-20);
  EXPECT_NE(m.link(LinkClass::NetworkTcp).source.find("fastest interface"), std::string::npos);
}

TEST(CostModel, CalibrationFileRoundTripsAndBadFilesAreDataErrors) {
  testing::TempDir dir("loom-cost");
  config::set("LOOM_CACHE_DIR", dir.path());
  CostModel m = hand_model();
  m.source = "calibrated";
  EXPECT_EQ(CostModel::load_or_defaults(one_host()).source.rfind("defaults", 0), 0u);
  m.save();
  const CostModel back = CostModel::load_or_defaults(one_host());
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(CostModel::path_for("h:boot"), dir.path() + "/tune/h_boot.json");
  Json bad = m.to_json();
  bad.set("gamma", -1.0);
  EXPECT_THROW(CostModel::from_json(bad), DataError);
  bad = m.to_json();
  bad.at("links").at("tcp_network").set("alpha", "slow");
  EXPECT_THROW(CostModel::from_json(bad), DataError);
  config::set("LOOM_CACHE_DIR", "");
}

// LOOM_ALGO=model in a real group of 3 processes (Note [Choosing by the cost model]): each
// allreduce runs the algorithm the model predicts fastest for its size over the group's
// topology, its result is the sum, the flight recorder names the algorithm, and LOOM_LOGS=algo
// prints the candidates on rank 0.
TEST(CostModel, AGroupChoosesByTheModel) {
  testing::TempDir cache("loom-cost-cache");
  const int size = 3;
  const std::vector<size_t> sizes = {256, 64 << 10, 4 << 20};
  auto res = testing::run_processes(size, [&](int rank, const std::string& path) {
    config::set("LOOM_CACHE_DIR", cache.path());  // no calibration: every rank's defaults
    config::set("LOOM_LOGS", "algo");
    ProcessGroupOptions o;
    o.algo = "model";
    auto pg = testing::make_group(rank, size, path, o);
    // The same prediction by hand, from this host's defaults over three ranks of one host.
    TopologyOptions to;
    to.gpus = false;
    const HostTopology host = detect_topology(to);
    const ClusterTopology cluster = synthetic_cluster(host, size, 1);
    PredictOptions po;
    po.chunks = {512 << 10};
    po.channels = {2};
    for (size_t bytes : sizes) {
      const int64_t n = static_cast<int64_t>(bytes / 4);
      Tensor t = full({n}, Scalar(static_cast<double>(rank + 1)));
      pg->allreduce(t, ReduceOp::Sum);
      CHILD_CHECK(equal(t, full({n}, 6.0)), "allreduce of " << bytes << " bytes");
      const std::string want =
          predict(CostModel::defaults(host), cluster, Collective::Allreduce, bytes, po)[0].algo;
      const std::string flight = pg->flight_record_json();
      const size_t last = flight.rfind("\"algo\"");
      const std::string entry = "\"algo\":\"" + want + "\"";
      CHILD_CHECK(last != std::string::npos && flight.compare(last, entry.size(), entry) == 0,
                  bytes << " bytes: expected " << want << " in " << flight.substr(last, 40));
      CHILD_CHECK(pg->describe().find("cost model over 1 host(s)") != std::string::npos,
                  pg->describe());
    }
  });
  for (size_t r = 0; r < res.size(); ++r) {
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].output;
  }
  EXPECT_NE(res[0].output.find("[dist] allreduce of 65536 bytes on 3 ranks (1 host(s)): "),
            std::string::npos)
      << res[0].output;
  EXPECT_NE(res[0].output.find("by the cost model (defaults from the detected hardware"),
            std::string::npos)
      << res[0].output;
}

}  // namespace
}  // namespace loom::dist
