// `loom topo`: the machine's topology (Note [Topology] in loom/distributed/topology.h) as a tree,
// JSON or NCCL-shaped XML.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli.h"
#include "loom/distributed/cost_model.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"
#include "loom/file.h"
#include "loom/parse.h"

namespace loom::cli {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "64K" / "1M" / "512" -> bytes; ValueError naming the option otherwise.
size_t parse_bytes(const std::string& text) {
  size_t scale = 1;
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) scale = size_t{1} << 10;
  if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) scale = size_t{1} << 20;
  if (!digits.empty() && (digits.back() == 'G' || digits.back() == 'g')) scale = size_t{1} << 30;
  if (scale != 1) digits.pop_back();
  return static_cast<size_t>(
             parse_int(digits, "[loom topo] --bytes (sizes like 64K,1M)", 0, int64_t{1} << 40)) *
         scale;
}

std::string size_str(size_t b) {
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// Note [Collective cost model]: the constants, then per size every algorithm's best prediction
// (over channels and chunk sizes) and the choice.
int print_predictions(const dist::HostTopology& host, const Args& args) {
  const std::string op_name = *args.get("predict");
  dist::Collective op = dist::Collective::Allreduce;
  bool known = false;
  for (dist::Collective c :
       {dist::Collective::Allreduce, dist::Collective::Allgather, dist::Collective::ReduceScatter,
        dist::Collective::Broadcast, dist::Collective::Reduce, dist::Collective::Alltoall}) {
    if (op_name == dist::collective_name(c)) {
      op = c;
      known = true;
    }
  }
  LOOM_CHECK(known, "[loom topo] --predict ", op_name,
             ": expected allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall");
  const int np = static_cast<int>(args.get_int("np", 4, 1, 4096));
  const int hosts = static_cast<int>(args.get_int("hosts", 1, 1, np));
  const dist::CostModel model = dist::CostModel::load_or_defaults(host);
  const dist::ClusterTopology cluster = dist::synthetic_cluster(host, np, hosts);
  std::vector<size_t> sizes;
  for (const std::string& item : split_commas(args.get_or("bytes", "64K,256K,1M,4M,16M,64M")))
    sizes.push_back(parse_bytes(item));
  std::printf("cost model of %s: %s\n", host.hostname.c_str(), model.source.c_str());
  std::printf("  gamma (reduction) %.3g ns/B\n", model.gamma * 1e9);
  for (dist::LinkClass c :
       {dist::LinkClass::SharedNuma, dist::LinkClass::SharedSocket, dist::LinkClass::CrossSocket,
        dist::LinkClass::LocalTcp, dist::LinkClass::NetworkTcp}) {
    const dist::LinkCost& l = model.link(c);
    std::printf("  %-22s alpha %7.2f us  beta %.3g ns/B (%.2f GB/s a stream)  %s\n",
                dist::link_class_name(c), l.alpha * 1e6, l.beta * 1e9, 1e-9 / l.beta,
                l.source.c_str());
  }
  std::printf("%s on %d rank(s) over %d host(s):\n", dist::collective_name(op), np, hosts);
  for (size_t bytes : sizes) {
    const std::vector<dist::Prediction> all = dist::predict(model, cluster, op, bytes);
    std::printf("  %s\n", size_str(bytes).c_str());
    std::vector<std::string> shown;
    for (const dist::Prediction& r : all) {
      if (std::find(shown.begin(), shown.end(), r.algo) != shown.end()) continue;
      shown.push_back(r.algo);
      std::printf("    %s %-8s %10.1f us  (%d channel(s), %s pieces; %s: %s)\n",
                  shown.size() == 1 ? "*" : " ", r.algo.c_str(), r.seconds * 1e6, r.channels,
                  size_str(r.chunk_bytes).c_str(), r.link.c_str(), r.formula.c_str());
    }
  }
  std::printf(
      "(* the choice; a, b, g: alpha, beta, gamma; x(b) and x_r(b): a transfer, and one "
      "reduced as it arrives)\n");
  return 0;
}

int run_topo(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "json", "xml", "measure", "no-gpus"},
            {"sys-root", "proc-root", "out", "predict", "np", "hosts", "bytes"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom topo [--json | --xml] [--measure] [--no-gpus] [--out FILE]\n"
        "  What this machine is made of, as the collective cost model sees it: sockets, NUMA\n"
        "  nodes (memory, distances), cores and their hardware threads, caches, the PCIe tree\n"
        "  (class, link speed and width, NUMA node, driver), network interfaces (kind, state,\n"
        "  speed, MTU, addresses) and GPUs through NVML (PCIe link, NVLinks and their far ends).\n"
        "  --json       the same as JSON (what ranks exchange through the store)\n"
        "  --xml        an XML document shaped like NCCL's topology dump\n"
        "  --measure    also measure memory bandwidth (streaming copies, all cores and one)\n"
        "  --no-gpus    do not load NVML\n"
        "  --sys-root DIR, --proc-root DIR   read another sysfs/procfs tree (for tests)\n"
        "  --out FILE   write to FILE instead of standard output\n"
        "  --predict OP [--np N] [--hosts H] [--bytes 64K,1M,...]\n"
        "               the cost model's constants (this host's calibration or defaults from its\n"
        "               hardware) and, per size, every algorithm's predicted time for OP\n"
        "               (allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall) on N\n"
        "               ranks spread over H hosts like this one, and the choice\n");
    return 0;
  }
  dist::TopologyOptions o;
  o.sys_root = args.get_or("sys-root", "/sys");
  o.proc_root = args.get_or("proc-root", "/proc");
  o.gpus = !args.flag("no-gpus");
  o.measure_bandwidth = args.flag("measure");
  o.network_addresses = !args.get("sys-root").has_value();
  const dist::HostTopology t = dist::detect_topology(o);
  if (args.get("predict")) return print_predictions(t, args);
  const std::string text = args.flag("json")  ? t.to_json().dump(2) + "\n"
                           : args.flag("xml") ? dist::topology_xml(t)
                                              : dist::topology_tree(t);
  if (auto out = args.get("out")) {
    io::atomic_write_file(*out, text);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

const RegisterCommand kTopo("topo",
                            "the machine's topology: CPUs, caches, NUMA, PCIe, network, GPUs",
                            run_topo);

}  // namespace
}  // namespace loom::cli
