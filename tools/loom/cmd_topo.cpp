// `loom topo`: the machine's topology (Note [Topology] in loom/distributed/topology.h) as a tree,
// JSON or NCCL-shaped XML.
#include <cstdio>
#include <string>

#include "cli.h"
#include "loom/distributed/topology.h"
#include "loom/file.h"

namespace loom::cli {
namespace {

int run_topo(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "json", "xml", "measure", "no-gpus"}, {"sys-root", "proc-root", "out"});
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
        "  --out FILE   write to FILE instead of standard output\n");
    return 0;
  }
  dist::TopologyOptions o;
  o.sys_root = args.get_or("sys-root", "/sys");
  o.proc_root = args.get_or("proc-root", "/proc");
  o.gpus = !args.flag("no-gpus");
  o.measure_bandwidth = args.flag("measure");
  o.network_addresses = !args.get("sys-root").has_value();
  const dist::HostTopology t = dist::detect_topology(o);
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
