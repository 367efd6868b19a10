// The collective cost model (Note [Collective cost model] in loom/distributed/cost_model.h).
#include "loom/distributed/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "distributed/algorithms/tree_pipeline.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/file.h"
#include "loom/text.h"

namespace loom::dist {
namespace {

constexpr LinkClass kClasses[kNumLinkClasses] = {LinkClass::Self,         LinkClass::SharedNuma,
                                                 LinkClass::SharedSocket, LinkClass::CrossSocket,
                                                 LinkClass::LocalTcp,     LinkClass::NetworkTcp};

const char* class_key(LinkClass c) {
  switch (c) {
    case LinkClass::Self:
      return "self";
    case LinkClass::SharedNuma:
      return "shm_numa";
    case LinkClass::SharedSocket:
      return "shm_socket";
    case LinkClass::CrossSocket:
      return "shm_cross_socket";
    case LinkClass::LocalTcp:
      return "tcp_local";
    case LinkClass::NetworkTcp:
      return "tcp_network";
  }
  return "unknown";
}

// The cost terms of one link at a channel count and chunk size.
struct Terms {
  double alpha, beta, gamma;
  double chunk;
  bool overlap;  // reductions overlap transfers (TCP: the kernel moves the bytes)
  // Pieces of a transfer of b bytes.
  double pieces(double b) const { return std::max(1.0, std::ceil(b / chunk)); }
  // x(b): a transfer.
  double x(double b) const { return b <= 0 ? 0 : pieces(b) * alpha + b * beta; }
  // x_r(b): a transfer whose pieces are reduced as they arrive.
  double xr(double b) const {
    if (b <= 0) return 0;
    const double k = pieces(b);
    if (!overlap) return k * alpha + b * (beta + gamma);
    return k * alpha + b * std::max(beta, gamma) + (b / k) * std::min(beta, gamma);
  }
};

// `share`: how many ranks time-share a core (1 when each has its own).
Terms terms(const CostModel& m, LinkClass c, int channels, size_t chunk, double share) {
  const LinkCost& l = m.link(c);
  const double agg = l.beta_aggregate > 0 ? l.beta_aggregate : l.beta;
  const bool tcp = c == LinkClass::LocalTcp || c == LinkClass::NetworkTcp;
  return {share * l.alpha, share * std::max(l.beta / channels, agg), share * m.gamma,
          static_cast<double>(chunk), tcp};
}

// Note [Collective cost model], time-sharing: the most ranks per logical CPU on any machine (hosts
// emulated on one machine share its cores).
double core_share(const ClusterTopology& t) {
  double share = 1;
  for (size_t h = 0; h < t.hosts.size(); ++h) {
    const int cpus = t.hosts[h].logical_cpus;
    if (cpus <= 0) continue;
    int ranks = 0;
    for (size_t o = 0; o < t.hosts.size(); ++o)
      if (t.hosts[o].machine() == t.hosts[h].machine())
        ranks += t.ranks_on_host(static_cast<int>(o));
    share = std::max(share, static_cast<double>(ranks) / cpus);
  }
  return share;
}

// The slowest of the link classes of these rank pairs.
LinkClass worst(const ClusterTopology& t, const std::vector<std::pair<int, int>>& pairs, bool shm) {
  LinkClass w = LinkClass::Self;
  for (const auto& [a, b] : pairs) w = std::max(w, t.link(a, b, shm));
  return w;
}

// How many of these (directed) transfers go from one host to another at once, at most: they share
// that TCP link's aggregate bandwidth.
int streams(const ClusterTopology& t, const std::vector<std::pair<int, int>>& pairs) {
  std::map<std::pair<int, int>, int> count;
  int most = 1;
  for (const auto& [a, b] : pairs) {
    const int ha = t.ranks[static_cast<size_t>(a)].host, hb = t.ranks[static_cast<size_t>(b)].host;
    if (ha != hb) most = std::max(most, ++count[{ha, hb}]);
  }
  return most;
}

// Terms of a network link that `n` streams share: a byte costs at least n times the aggregate.
// TCP on one machine (loopback, veth) has no wire to share: each stream is one more pair of cores
// copying, which the time-sharing factor counts.
Terms shared(Terms k, const CostModel& m, LinkClass c, int n, double share) {
  if (n <= 1 || c != LinkClass::NetworkTcp) return k;
  const LinkCost& l = m.link(c);
  const double agg = l.beta_aggregate > 0 ? l.beta_aggregate : l.beta;
  k.beta = std::max(k.beta, n * agg * share);
  return k;
}

bool uses_channels(LinkClass c) {
  return c == LinkClass::LocalTcp || c == LinkClass::NetworkTcp;
}

int log2_ceil(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::Allreduce:
      return "allreduce";
    case Collective::Allgather:
      return "allgather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::Alltoall:
      return "alltoall";
  }
  return "unknown";
}

CostModel CostModel::defaults(const HostTopology& host) {
  CostModel m;
  m.host_id = host.machine();
  m.source = "defaults from the detected hardware (no calibration stored)";
  // Shared memory: one copy by one core per transfer.
  const double copy = host.memory_bandwidth_one_core.value_or(0) > 0
                          ? *host.memory_bandwidth_one_core / 2  // read + write counted
                          : 10e9;
  const std::string how = host.memory_bandwidth_one_core
                              ? "default: the measured one-core copy bandwidth"
                              : "default: a typical 10 GB/s copy";
  m.link(LinkClass::Self) = {0, 0, 0, "no transfer"};
  m.link(LinkClass::SharedNuma) = {1.5e-6, 1 / copy, 0, how};
  m.link(LinkClass::SharedSocket) = {2e-6, 1.2 / copy, 0, how + ", 1.2x across NUMA nodes"};
  m.link(LinkClass::CrossSocket) = {3e-6, 1.5 / copy, 0, how + ", 1.5x across sockets"};
  m.link(LinkClass::LocalTcp) = {15e-6, 1 / 3e9, 1 / 6e9,
                                 "default: typical loopback TCP (3 GB/s a stream, 6 GB/s in all)"};
  double bits = 0;
  for (const NetInterface& n : host.nics)
    if (n.up && n.kind != "loopback" && n.speed_mbps > 0) bits = std::max(bits, n.speed_mbps * 1e6);
  const std::string net = bits > 0 ? "default: the fastest interface's speed"
                                   : "default: 10 Gbit/s (no interface reports a speed)";
  if (bits <= 0) bits = 10e9;
  // One stream reaches about 80 % of the line rate; several reach it.
  m.link(LinkClass::NetworkTcp) = {50e-6, 8 / (0.8 * bits), 8 / bits, net};
  m.gamma = 1 / (copy / 1.5);  // reading two operands and writing one
  return m;
}

Json CostModel::to_json() const {
  Json links_json = Json::object();
  for (LinkClass c : kClasses) {
    const LinkCost& l = link(c);
    links_json.set(class_key(c), Json::object({{"alpha", l.alpha},
                                               {"beta", l.beta},
                                               {"beta_aggregate", l.beta_aggregate},
                                               {"source", l.source}}));
  }
  return Json::object(
      {{"host_id", host_id}, {"source", source}, {"gamma", gamma}, {"links", links_json}});
}

CostModel CostModel::from_json(const Json& j) {
  CostModel m;
  m.host_id = j.at("host_id").as_string();
  m.source = j.at("source").as_string();
  m.gamma = j.at("gamma").as_double();
  const Json& links_json = j.at("links");
  for (LinkClass c : kClasses) {
    const Json& l = links_json.at(class_key(c));
    LinkCost& k = m.link(c);
    k.alpha = l.at("alpha").as_double();
    k.beta = l.at("beta").as_double();
    k.beta_aggregate = l.at("beta_aggregate").as_double();
    k.source = l.at("source").as_string();
    LOOM_CHECK_AS(DataError, k.alpha >= 0 && k.beta >= 0 && k.beta_aggregate >= 0,
                  "[cost model] links.", class_key(c), " has a negative constant");
  }
  LOOM_CHECK_AS(DataError, m.gamma >= 0, "[cost model] gamma is negative: ", m.gamma);
  return m;
}

std::string CostModel::path_for(const std::string& host_id) {
  std::string name;
  for (char c : host_id) name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return config::cache_dir() + "/tune/" + name + ".json";
}

CostModel CostModel::load_or_defaults(const HostTopology& host) {
  const std::string path = path_for(host.machine());
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return defaults(host);
  return from_json(Json::parse(io::read_file(path), path));
}

void CostModel::save() const {
  const std::string path = path_for(host_id);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  io::atomic_write_file(path, to_json().dump(2) + "\n");
}

ClusterTopology synthetic_cluster(const HostTopology& host, int ranks, int hosts) {
  LOOM_CHECK(ranks >= 1 && hosts >= 1 && hosts <= ranks, "[cost model] ", ranks,
             " rank(s) cannot spread over ", hosts, " host(s)");
  ClusterTopology c;
  for (int h = 0; h < hosts; ++h) {
    HostTopology t = host;
    if (h > 0) {
      t.hostname += "#" + std::to_string(h);
      t.host_id += "#" + std::to_string(h);
    }
    c.hosts.push_back(t);
  }
  const int per = (ranks + hosts - 1) / hosts;
  for (int r = 0; r < ranks; ++r) {
    RankPlacement p;
    p.host = std::min(r / per, hosts - 1);
    c.ranks.push_back(p);
  }
  return c;
}

std::vector<Prediction> predict(const CostModel& m, const ClusterTopology& t, Collective op,
                                size_t bytes, const PredictOptions& o) {
  const int p = static_cast<int>(t.ranks.size());
  LOOM_CHECK(p >= 1, "[cost model] a cluster without ranks");
  const double n = static_cast<double>(bytes);
  const bool shm = o.shared_memory;
  const double share = core_share(t);
  std::vector<Prediction> out;
  // Adds one algorithm's predictions over its links' channel counts and the chunk sizes;
  // `time(terms_of)` computes the prediction given a function from a link class to its terms.
  double algo_share = share;  // the tree sets its own (only inner nodes are busy)
  auto add = [&](const std::string& algo, LinkClass slowest,
                 const std::function<double(const std::function<Terms(LinkClass)>&)>& time,
                 const std::function<std::string()>& formula) {
    const std::vector<int> one = {1};
    const std::vector<int>& channels = uses_channels(slowest) ? o.channels : one;
    for (int ch : channels) {
      for (size_t chunk : o.chunks) {
        Prediction r;
        r.algo = algo;
        r.channels = ch;
        r.chunk_bytes = chunk;
        r.link = link_class_name(slowest);
        r.seconds = time([&](LinkClass c) { return terms(m, c, ch, chunk, algo_share); });
        r.formula = formula();
        out.push_back(r);
      }
    }
  };
  if (p == 1) {
    Prediction r;
    r.algo = "none";
    r.link = link_class_name(LinkClass::Self);
    r.formula = "one rank: nothing moves";
    return {r};
  }
  std::vector<std::pair<int, int>> ring, everyone;
  for (int r = 0; r < p; ++r) ring.push_back({r, (r + 1) % p});
  for (int a = 0; a < p; ++a)
    for (int b = a + 1; b < p; ++b) everyone.push_back({a, b});
  const LinkClass ring_link = worst(t, ring, shm), all_link = worst(t, everyone, shm);
  const int ring_streams = streams(t, ring);
  const std::string pm1 = std::to_string(p - 1);
  const std::string block = format_bytes(n / p);
  // Binomial trees rooted at 0: at round j, rank r < 2^j sends to r + 2^j.
  std::vector<std::pair<int, int>> binomial;
  for (int d = 1; d < p; d *= 2)
    for (int r = 0; r < d && r + d < p; ++r) binomial.push_back({r, r + d});
  const LinkClass binomial_link = worst(t, binomial, shm);
  const int rounds = log2_ceil(p);

  switch (op) {
    case Collective::Allreduce: {
      add(
          "ring", ring_link,
          [&](const auto& tm) {
            const Terms k = shared(tm(ring_link), m, ring_link, ring_streams, share);
            return (p - 1) * (k.xr(n / p) + k.x(n / p));
          },
          [&] { return pm1 + " x (x_r(" + block + ") + x(" + block + "))"; });
      // Halving-doubling over q = 2^floor(log2 p) ranks, the rest folded in.
      int q = 1;
      while (q * 2 <= p) q *= 2;
      const int extra = p - q;
      auto real = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
      std::vector<LinkClass> level;  // by distance d = q/2, q/4, ..., 1
      std::vector<int> level_streams;
      for (int d = q / 2; d >= 1; d /= 2) {
        std::vector<std::pair<int, int>> pairs;
        for (int v = 0; v < q; ++v) pairs.push_back({real(v), real(v ^ d)});
        level.push_back(worst(t, pairs, shm));
        level_streams.push_back(streams(t, pairs));
      }
      std::vector<std::pair<int, int>> folds;
      for (int r = 0; r < extra; ++r) folds.push_back({2 * r, 2 * r + 1});
      const LinkClass fold_link = worst(t, folds, shm);
      const int fold_streams = streams(t, folds);
      LinkClass rhd_link = fold_link;
      for (LinkClass c : level) rhd_link = std::max(rhd_link, c);
      add(
          "rhd", rhd_link,
          [&](const auto& tm) {
            double s = 0, part = n;
            for (size_t j = 0; j < level.size(); ++j) {
              part /= 2;
              const Terms k = shared(tm(level[j]), m, level[j], level_streams[j], share);
              s += k.xr(part) + k.x(part);
            }
            if (extra > 0) {
              const Terms k = shared(tm(fold_link), m, fold_link, fold_streams, share);
              s += k.xr(n) + k.x(n);
            }
            return s;
          },
          [&] {
            std::string f =
                "sum over " + std::to_string(level.size()) + " levels of x_r(n/2^j) + x(n/2^j)";
            if (extra > 0) f += " + fold x_r(" + format_bytes(n) + ") + x(" + format_bytes(n) + ")";
            return f;
          });
      // Trees: NCCL's binary tree and its complement.
      std::vector<std::pair<int, int>> edges, edges2;
      for (int r = 0; r < p; ++r) {
        const TreeNode a = btree_node(p, r), b = btree_complement_node(p, r);
        if (a.parent >= 0) edges.push_back({r, a.parent});
        if (b.parent >= 0) edges2.push_back({r, b.parent});
      }
      const LinkClass tree_link = worst(t, edges, shm);
      const LinkClass dbt_link = std::max(tree_link, worst(t, edges2, shm));
      const int depth = btree_depth(p);
      // The busiest inner node, per piece: it copies and adds its children's pieces (c of them)
      // on the way up and copies its parent's on the way down (the root has none).
      const double c = p > 2 ? 2 : 1, copies = c + (p > 2 ? 1 : 0);
      const std::string per = std::to_string(static_cast<int>(copies)) + "b + " +
                              std::to_string(static_cast<int>(c)) + "g";
      // Only the tree's inner nodes work in every piece-step: they are the ranks that share cores.
      {
        std::vector<int> inner(t.hosts.size(), 0);
        for (int r = 0; r < p; ++r) {
          if (btree_node(p, r).num_children > 0)
            ++inner[static_cast<size_t>(t.ranks[static_cast<size_t>(r)].host)];
        }
        algo_share = 1;
        for (size_t h = 0; h < t.hosts.size(); ++h) {
          if (t.hosts[h].logical_cpus > 0)
            algo_share =
                std::max(algo_share, static_cast<double>(inner[h]) / t.hosts[h].logical_cpus);
        }
      }
      add(
          "tree", tree_link,
          [&](const auto& tm) {
            const Terms k = tm(tree_link);
            const double pieces = k.pieces(n), s = n / pieces;
            return (2 * depth + pieces - 1) * (k.alpha + s * (copies * k.beta + c * k.gamma));
          },
          [&] {
            return "(2 x depth " + std::to_string(depth) + " + pieces - 1) x (a + piece x (" + per +
                   "))";
          });
      // Each tree carries half; a rank is inner in one (as above) and a leaf in the other (one
      // copy down).
      algo_share = share;
      add(
          "dbt", dbt_link,
          [&](const auto& tm) {
            const Terms k = tm(dbt_link);
            const double pieces = k.pieces(n / 2), s = n / 2 / pieces;
            return (2 * depth + pieces - 1) *
                   (2 * k.alpha + s * ((copies + 1) * k.beta + c * k.gamma));
          },
          [&] {
            return "(2 x depth " + std::to_string(depth) +
                   " + pieces of n/2 - 1) x (2a + piece x (" +
                   std::to_string(static_cast<int>(copies) + 1) + "b + " +
                   std::to_string(static_cast<int>(c)) + "g))";
          });
      // Across hosts (Note [Hierarchical allreduce]): only when some host runs several ranks and
      // there are several hosts.
      {
        std::vector<std::vector<int>> by_host(t.hosts.size());
        for (int r = 0; r < p; ++r)
          by_host[static_cast<size_t>(t.ranks[static_cast<size_t>(r)].host)].push_back(r);
        std::erase_if(by_host, [](const std::vector<int>& v) { return v.empty(); });
        const int H = static_cast<int>(by_host.size());
        size_t most = 0;
        bool even = true;
        for (const auto& v : by_host) {
          most = std::max(most, v.size());
          even &= v.size() == by_host[0].size();
        }
        if (H > 1 && most > 1) {
          std::vector<std::pair<int, int>> intra, across, leaders;
          for (int h = 0; h < H; ++h) {
            const auto& v = by_host[static_cast<size_t>(h)];
            const auto& next = by_host[static_cast<size_t>((h + 1) % H)];
            for (size_t i = 0; i + 1 < v.size(); ++i) intra.push_back({v[i], v[i + 1]});
            for (size_t i = 0; i < std::min(v.size(), next.size()); ++i)
              across.push_back({v[i], next[i]});
            leaders.push_back({v[0], next[0]});
          }
          const LinkClass intra_link = worst(t, intra, shm), across_link = worst(t, across, shm);
          const LinkClass leader_link = worst(t, leaders, shm);
          const double Lf = static_cast<double>(most), Hf = H;
          const int across_streams = streams(t, across);
          if (even) {
            add(
                "hier", across_link,
                [&](const auto& tm) {
                  const Terms ki = tm(intra_link),
                              kx = shared(tm(across_link), m, across_link, across_streams, share);
                  const double blk = n / Lf, part = blk / Hf;
                  return (Lf - 1) * (ki.xr(blk) + ki.x(blk)) +
                         (Hf - 1) * (kx.xr(part) + kx.x(part));
                },
                [&] {
                  const std::string blk = format_bytes(n / Lf), part = format_bytes(n / Lf / Hf);
                  return std::to_string(most - 1) + " x (x_r(" + blk + ") + x(" + blk +
                         ")) in each host + " + std::to_string(H - 1) + " x (x_r(" + part +
                         ") + x(" + part + ")) across, " + std::to_string(across_streams) +
                         " streams a host";
                });
          }
          const double rounds_in = log2_ceil(static_cast<int>(most));
          // Between hosts only the leaders work: they alone share the machines' cores then.
          double leader_share = 1;
          for (size_t h = 0; h < t.hosts.size(); ++h) {
            if (t.hosts[h].logical_cpus <= 0) continue;
            int leaders_here = 0;
            for (size_t o = 0; o < t.hosts.size(); ++o)
              leaders_here += t.hosts[o].machine() == t.hosts[h].machine() &&
                              t.ranks_on_host(static_cast<int>(o)) > 0;
            leader_share =
                std::max(leader_share, static_cast<double>(leaders_here) / t.hosts[h].logical_cpus);
          }
          add(
              "hier_tree", leader_link,
              [&](const auto& tm) {
                const Terms ki = tm(intra_link);
                Terms kx = tm(leader_link);
                const double f = leader_share / share;
                kx.alpha *= f;
                kx.beta *= f;
                kx.gamma *= f;
                return rounds_in * (ki.xr(n) + ki.x(n)) + (Hf - 1) * (kx.xr(n / Hf) + kx.x(n / Hf));
              },
              [&] {
                return std::to_string(static_cast<int>(rounds_in)) + " x (x_r(" + format_bytes(n) +
                       ") + x(" + format_bytes(n) + ")) in each host + " + std::to_string(H - 1) +
                       " x (x_r(" + format_bytes(n / Hf) + ") + x(" + format_bytes(n / Hf) +
                       ")) between leaders";
              });
        }
      }
      add(
          "oneshot", all_link,
          [&](const auto& tm) {
            const Terms k = tm(all_link);
            return (p - 1) * (k.alpha + n * k.beta) + (p - 1) * n * k.gamma;
          },
          [&] { return pm1 + " x (a + " + format_bytes(n) + " x b) + " + pm1 + " x n x g"; });
      break;
    }
    case Collective::Allgather:
      add(
          "ring", ring_link, [&](const auto& tm) { return (p - 1) * tm(ring_link).x(n / p); },
          [&] { return pm1 + " x x(" + block + ")"; });
      break;
    case Collective::ReduceScatter:
      add(
          "ring", ring_link, [&](const auto& tm) { return (p - 1) * tm(ring_link).xr(n / p); },
          [&] { return pm1 + " x x_r(" + block + ")"; });
      break;
    case Collective::Broadcast:
      add(
          "binomial", binomial_link,
          [&](const auto& tm) { return rounds * tm(binomial_link).x(n); },
          [&] { return std::to_string(rounds) + " x x(" + format_bytes(n) + ")"; });
      break;
    case Collective::Reduce:
      add(
          "binomial", binomial_link,
          [&](const auto& tm) { return rounds * tm(binomial_link).xr(n); },
          [&] { return std::to_string(rounds) + " x x_r(" + format_bytes(n) + ")"; });
      break;
    case Collective::Alltoall:
      add(
          "pairwise", all_link, [&](const auto& tm) { return (p - 1) * tm(all_link).x(n / p); },
          [&] { return pm1 + " x x(" + block + ")"; });
      break;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Prediction& a, const Prediction& b) { return a.seconds < b.seconds; });
  return out;
}

}  // namespace loom::dist
