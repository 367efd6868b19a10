// `loom tune`: measures the collective cost model's constants on this host (Note [Collective cost
// model] in loom/distributed/cost_model.h) and stores them in the cache directory, where every
// process group and `loom topo --predict` read them.
//
// Note [Calibrating the cost model]
//   gamma: the reduction kernel the collectives use (float32 sum into a buffer) over 16 MiB, the
//   median of several runs, per byte of one operand. alpha and beta, per link class this host has:
//   two ranks (processes forked here, a process group over a file store) exchange tensors of 8 B
//   to 16 MiB through the process group's send and recv, both sending at once; the time of one
//   exchange (median of the repetitions) is one step's. alpha and beta are the weighted
//   least-squares fit of t(b) = alpha + b * beta that minimises the relative error over the sizes
//   (a small message's microseconds count as much as a large one's milliseconds). The ranks
//   exchange rather than take turns: each step of a ring or of halving-doubling has every rank send
//   and receive at once, so the copies compete for the memory and the cores as they do in a
//   collective (on the 2-core VM a one-way 16 MiB transfer reached 26 GB/s, helped by the idle
//   peer, and an exchange about half). Shared memory within a NUMA node: both ranks pinned to node
//   0's CPUs; across NUMA nodes or sockets: the second rank pinned to another node, when the
//   machine has one. TCP on this host: the transport forced to TCP, one socket per peer for beta
//   and four for the aggregate. TCP between hosts cannot be measured from one host: it keeps the
//   default from the interfaces' speeds, and the table says so.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>

#include "cli.h"
#include "collective_sweep.h"
#include "distributed/algorithms/algorithms.h"
#include "job.h"
#include "loom/distributed/cost_model.h"
#include "loom/distributed/process_group.h"
#include "loom/distributed/store.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/parse.h"
#include "loom/text.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  double bytes, seconds;
};

// Weighted least squares of t = alpha + b * beta with weights 1 / t^2 (relative error).
void fit(const std::vector<Sample>& s, double* alpha, double* beta) {
  double sw = 0, sb = 0, st = 0, sbb = 0, sbt = 0;
  for (const Sample& x : s) {
    const double w = 1.0 / (x.seconds * x.seconds);
    sw += w;
    sb += w * x.bytes;
    st += w * x.seconds;
    sbb += w * x.bytes * x.bytes;
    sbt += w * x.bytes * x.seconds;
  }
  const double det = sw * sbb - sb * sb;
  *beta = det > 0 ? (sw * sbt - sb * st) / det : 0;
  *alpha = (st - *beta * sb) / sw;
  if (*alpha < 0) *alpha = 0;
  if (*beta < 0) *beta = 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double measure_gamma(bool quick) {
  const size_t n = size_t{4} << 20;  // floats: 16 MiB an operand
  std::vector<float> dst(n, 1.0f), src(n, 2.0f);
  std::vector<double> t;
  for (int i = 0; i < (quick ? 3 : 7); ++i) {
    const auto t0 = Clock::now();
    dist::reduce_into(dst.data(), src.data(), n, kFloat32, dist::ReduceOp::Sum);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(t) / static_cast<double>(n * sizeof(float));
}

struct Setup {
  std::string name;  // what the table calls it
  dist::LinkClass link;
  std::string transport;  // "shm" or "tcp"
  int channels = 1;
  std::vector<int> cpus0, cpus1;  // affinity of rank 0 and rank 1 (empty: any)
  bool exchange = true;           // both send at once (else a ping-pong)
};

void pin(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// One rank of the exchanges (Note [Calibrating the cost model]): rank 0 prints "pp BYTES SECONDS".
int exchange_rank(const Setup& s, int rank, const std::string& store_path,
                  const std::vector<size_t>& sizes, bool quick) {
  pin(rank == 0 ? s.cpus0 : s.cpus1);
  auto store = std::make_shared<dist::FileStore>(store_path);
  dist::ProcessGroupOptions po;
  po.name = "tune";
  po.transport = s.transport;
  po.tcp_channels = s.channels;
  po.timeout = dist::Duration(60000);
  store->set_timeout(po.timeout);
  auto pg = dist::ProcessGroup::create(store, rank, 2, po);
  for (size_t bytes : sizes) {
    Tensor t = zeros({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, TensorOptions(kUInt8));
    const int reps = bytes >= (size_t{4} << 20) ? (quick ? 3 : 7) : (quick ? 20 : 100);
    std::vector<double> one_way;
    Tensor in = zeros({t.numel()}, TensorOptions(kUInt8));
    for (int i = -2; i < reps; ++i) {  // two warm-up round trips
      const auto t0 = Clock::now();
      if (s.exchange) {
        // Both ranks send and receive at once, as every step of a ring or halving-doubling does.
        auto w = pg->send(t, 1 - rank, {.async_op = true});
        pg->recv(in, 1 - rank)->wait();
        w->wait();
      } else if (rank == 0) {
        pg->send(t, 1)->wait();
        pg->recv(t, 1)->wait();
      } else {
        pg->recv(t, 0)->wait();
        pg->send(t, 0)->wait();
      }
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      if (i >= 0) one_way.push_back(s.exchange ? sec : sec / 2);
    }
    if (rank == 0) {
      char line[96];
      std::snprintf(line, sizeof(line), "pp %zu %.9g", bytes, median(one_way));
      bench::coll::emit(line);
    }
  }
  pg->barrier()->wait();
  return 0;
}

// Runs the exchanges of `s` in two forked ranks; one step's time per size.
std::vector<Sample> run_exchange(const Setup& s, const std::vector<size_t>& sizes, bool quick,
                                 const std::string& tmp, int round) {
  const std::string store = tmp + "/store-" + std::to_string(round);
  std::vector<bench::JobProcess> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back({"rank " + std::to_string(r), [s, r, store, sizes, quick] {
                       return exchange_rank(s, r, store, sizes, quick);
                     }});
  }
  std::vector<Sample> out;
  bench::JobOptions jo;
  jo.deadline_s = quick ? 60 : 180;
  const bench::JobResult res = bench::run_job(
      ranks, jo,
      [&](size_t, const std::string& line) {
        size_t bytes = 0;
        double sec = 0;
        if (std::sscanf(line.c_str(), "pp %zu %lf", &bytes, &sec) == 2 && sec > 0)
          out.push_back({static_cast<double>(bytes), sec});
      },
      [](size_t, const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  LOOM_CHECK_AS(DistError, res.ok(), "[loom tune] the exchanges over ", s.name,
                " failed: ", res.reason());
  return out;
}

int run_tune(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "quick", "dry-run"}, {"repeats"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom tune [--quick] [--dry-run]\n"
        "  Measures the collective cost model's constants on this host and stores them in the\n"
        "  cache directory (LOOM_CACHE_DIR/tune/HOST.json), where process groups and\n"
        "  `loom topo --predict` read them: gamma (the reduction kernel's seconds per byte) and,\n"
        "  per link class this host has, alpha and beta fitted to exchanges between two\n"
        "  processes over 8 B to 16 MiB (shared memory on one NUMA node and across nodes, TCP on\n"
        "  this host with one and four sockets). Prints each size's measured and fitted time.\n"
        "  --quick    fewer repetitions and sizes (about 10 s)\n"
        "  --repeats N  measure each link N times (3; 1 with --quick) and keep the medians\n"
        "  --dry-run  measure and print, store nothing\n");
    return 0;
  }
  const bool quick = args.flag("quick");
  const int repeats = static_cast<int>(args.get_int("repeats", quick ? 1 : 3, 1, 100));
  dist::TopologyOptions to;
  to.measure_bandwidth = true;
  to.gpus = false;
  const dist::HostTopology host = dist::detect_topology(to);
  dist::CostModel m = dist::CostModel::defaults(host);
  std::printf("loom tune on %s (%s, %d logical CPUs, %zu NUMA node(s))\n", host.hostname.c_str(),
              host.cpu_model.c_str(), host.logical_cpus, host.numa_nodes.size());
  m.gamma = measure_gamma(quick);
  std::printf("gamma: %.3g ns per byte reduced (float32 sum, 16 MiB)\n", m.gamma * 1e9);

  std::vector<size_t> sizes = {8, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  if (quick) sizes = {8, 4 << 10, 64 << 10, 1 << 20, 8 << 20};
  std::vector<Setup> setups;
  std::vector<int> node0, other;
  int other_socket = -1, socket0 = -1;
  if (host.numa_nodes.size() >= 2) {
    node0 = host.numa_nodes[0].cpus;
    other = host.numa_nodes[1].cpus;
    for (const dist::CpuCore& c : host.cores) {
      if (!node0.empty() && c.cpus.front() == node0.front()) socket0 = c.socket;
      if (!other.empty() && c.cpus.front() == other.front()) other_socket = c.socket;
    }
  }
  setups.push_back(
      {"shared memory, one NUMA node", dist::LinkClass::SharedNuma, "shm", 1, node0, node0});
  if (!other.empty()) {
    const dist::LinkClass c =
        other_socket != socket0 ? dist::LinkClass::CrossSocket : dist::LinkClass::SharedSocket;
    setups.push_back({"shared memory, across NUMA nodes", c, "shm", 1, node0, other});
  }
  setups.push_back({"TCP on this host, one socket", dist::LinkClass::LocalTcp, "tcp", 1, {}, {}});
  setups.push_back({"TCP on this host, four sockets", dist::LinkClass::LocalTcp, "tcp", 4, {}, {}});

  std::string tmp = (std::filesystem::temp_directory_path() / "loom-tune-XXXXXX").string();
  LOOM_CHECK(::mkdtemp(tmp.data()) != nullptr, "[loom tune] mkdtemp failed");
  int round = 0;
  // Prints a fit against its samples; returns the median relative error.
  auto show = [](const char* what, const std::vector<Sample>& samples, double alpha, double beta) {
    std::printf("  %s: alpha %.2f us, beta %.3g ns/B (%.2f GB/s)\n", what, alpha * 1e6, beta * 1e9,
                beta > 0 ? 1e-9 / beta : 0.0);
    std::vector<double> errors;
    for (const Sample& x : samples) {
      const double model = alpha + x.bytes * beta;
      errors.push_back(std::abs(model - x.seconds) / x.seconds);
      std::printf("    %9s  measured %10.2f us  fitted %10.2f us  (%+.0f %%)\n",
                  format_bytes(x.bytes).c_str(), x.seconds * 1e6, model * 1e6,
                  100 * (model - x.seconds) / x.seconds);
    }
    std::printf("    median fit error %.0f %%\n", 100 * median(errors));
  };
  for (Setup s : setups) {
    // alpha from turns (a message's fixed cost, without the async send's thread hand-off), beta
    // from exchanges (both ranks copying at once, as in a collective's step).
    std::printf("%s\n", s.name.c_str());
    // Each measurement `repeats` times (fresh ranks each time); the constants are the medians of
    // the fits, so that one disturbed run does not set them.
    std::vector<double> alphas, betas, alphas_x, betas_x;
    for (int rep = 0; rep < repeats; ++rep) {
      s.exchange = false;
      const std::vector<Sample> turns = run_exchange(s, sizes, quick, tmp, round++);
      s.exchange = true;
      const std::vector<Sample> both = run_exchange(s, sizes, quick, tmp, round++);
      LOOM_CHECK_AS(DistError, turns.size() == sizes.size() && both.size() == sizes.size(),
                    "[loom tune] ", s.name, ": not every size was measured");
      double a = 0, b = 0, ax = 0, bx = 0;
      fit(turns, &a, &b);
      fit(both, &ax, &bx);
      if (rep == 0) {
        show("one way (ping-pong)", turns, a, b);
        show("both ways at once (exchange)", both, ax, bx);
      }
      alphas.push_back(a);
      betas.push_back(b);
      alphas_x.push_back(ax);
      betas_x.push_back(bx);
    }
    const double alpha = median(alphas), beta_x = median(betas_x);
    if (repeats > 1) {
      std::printf(
          "  over %d runs: alpha %.2f us (from %.2f to %.2f), exchange beta %.3g ns/B (from "
          "%.3g to %.3g): the medians are kept\n",
          repeats, alpha * 1e6, *std::min_element(alphas.begin(), alphas.end()) * 1e6,
          *std::max_element(alphas.begin(), alphas.end()) * 1e6, beta_x * 1e9,
          *std::min_element(betas_x.begin(), betas_x.end()) * 1e9,
          *std::max_element(betas_x.begin(), betas_x.end()) * 1e9);
    }
    dist::LinkCost& l = m.link(s.link);
    if (s.channels == 1) {
      l = {alpha, beta_x, 0,
           "measured by loom tune (" + s.name + "): alpha one way, beta of exchanges"};
    } else if (beta_x > 0) {
      l.beta_aggregate = std::min(l.beta, beta_x);
      l.source += "; aggregate with " + std::to_string(s.channels) + " sockets";
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  // Not measured here: shared memory classes this machine lacks take the nearest measured one's
  // constants scaled as the defaults are; TCP between hosts keeps its default.
  if (host.numa_nodes.size() < 2) {
    const dist::LinkCost& numa = m.link(dist::LinkClass::SharedNuma);
    m.link(dist::LinkClass::SharedSocket) = {
        numa.alpha * 1.3, numa.beta * 1.2, 0,
        "not measurable here (one NUMA node): 1.2x one node's"};
    m.link(dist::LinkClass::CrossSocket) = {numa.alpha * 2, numa.beta * 1.5, 0,
                                            "not measurable here (one socket): 1.5x one node's"};
  }
  std::printf(
      "tcp between hosts: not measurable from one host; kept: alpha %.0f us, %.2f GB/s (%s)\n",
      m.link(dist::LinkClass::NetworkTcp).alpha * 1e6,
      1e-9 / m.link(dist::LinkClass::NetworkTcp).beta,
      m.link(dist::LinkClass::NetworkTcp).source.c_str());
  char when[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  m.source = std::string("calibrated by loom tune") + (quick ? " --quick" : "") + " at " + when;
  if (args.flag("dry-run")) {
    std::printf("--dry-run: nothing stored\n");
  } else {
    m.save();
    std::printf("stored in %s\n", dist::CostModel::path_for(m.host_id).c_str());
  }
  return 0;
}

const RegisterCommand kTune("tune",
                            "measure the collective cost model's constants on this host and store "
                            "them",
                            run_tune);

}  // namespace
}  // namespace loom::cli
