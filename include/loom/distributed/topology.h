// Machine topology (distributed layer): what the machine a rank runs on is made of — sockets, NUMA
// nodes, cores, caches, memory bandwidth, the PCIe tree, network interfaces and GPUs with their
// links — as `loom topo` prints it and as the collective cost model reads it (Note [Topology]).
//
// Note [Topology]
//   Detection reads Linux's sysfs and procfs, as hwloc and NCCL's topology code do:
//   /sys/devices/system/cpu/cpuN/topology (package, die and core of each logical CPU),
//   /sys/devices/system/cpu/cpuN/cache/indexK (level, type, size, sharing), /sys/devices/system/
//   node/nodeN (CPUs, memory and the distance row of each NUMA node), /sys/bus/pci/devices (class,
//   vendor, device, link speed and width, NUMA node; the bridge above each device from the device's
//   real path), /sys/class/net (speed, MTU, state, the PCI device behind each interface) and
//   getifaddrs for the addresses. Where sysfs says nothing (a VM without cache folders) the cache
//   sizes come from the C library (sysconf), and every such fallback is named in `notes`. GPUs
//   come from NVML, loaded at run time (libnvidia-ml.so.1): names, PCI bus ids, memory, compute
//   capability, PCIe generation and width, and each active NVLink with the PCI bus id of its far
//   end; without NVML or a GPU the list is empty and `gpu_note` says why. Memory bandwidth is
//   measured only when asked (a few hundred milliseconds of streaming copies on every core).
//
//   The root folders are options, so tests detect a hand-made sysfs tree and check every field.
//   A process group exchanges each rank's HostTopology through its store (exchange_topology): ranks
//   with the same host id (hostname and boot id) are one host, and the ClusterTopology names, for
//   every pair of ranks, the link class between them — the input of the cost model.
//
// Thread-safety: the functions are pure (they read the file system and return values); the result
// types are plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/export.h"
#include "loom/json.h"

namespace loom::dist {

class Store;

struct CpuCache {
  int level = 0;           // 1, 2, 3
  std::string type;        // "Data", "Instruction", "Unified"
  int64_t size_bytes = 0;  // per instance
  int64_t line_bytes = 0;  // 0 when unknown
  std::vector<int> cpus;   // logical CPUs sharing one instance (from cpu 0's view when unknown)
  int instances = 0;       // how many of this cache the machine has
};

struct CpuCore {
  int socket = 0;         // physical_package_id
  int core = 0;           // core_id within the package
  int numa = -1;          // NUMA node, -1 when the machine has no NUMA information
  std::vector<int> cpus;  // its logical CPUs (hardware threads)
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
  int64_t memory_bytes = 0;    // MemTotal of the node
  std::vector<int> distances;  // the SLIT row: relative access cost to every node (10 = local)
};

struct PciDevice {
  std::string bus_id;       // "0000:00:03.0"
  std::string parent;       // the bridge above it, "" under a root complex
  std::string root;         // the root complex folder, "pci0000:00"
  uint32_t class_code = 0;  // 0x020000
  std::string kind;         // "bridge", "network", "gpu", "storage", "other"
  uint16_t vendor = 0, device = 0;
  int numa = -1;
  std::string link_speed;  // "16.0 GT/s PCIe", "" when not reported (virtual devices)
  int link_width = 0;      // lanes, 0 when not reported
  std::string driver;      // the bound driver's name, "" when none
};

struct NetInterface {
  std::string name;         // "eth0"
  std::string kind;         // "loopback", "ethernet", "veth", "bridge", "virtual", "infiniband"
  bool up = false;          // operstate "up" (loopback: "unknown" counts as up)
  int64_t speed_mbps = -1;  // -1 when the driver does not say (virtio, veth, loopback)
  int mtu = 0;
  std::string pci_bus_id;  // the device behind it, "" for virtual interfaces
  int numa = -1;
  std::vector<std::string> addresses;  // IPv4 and IPv6, as text
};

struct NvLink {
  int link = 0;               // the link's index on its GPU
  std::string remote_bus_id;  // the far end: another GPU's bus id or an NVSwitch's
  int version = 0;            // NVLink version, 0 when unknown
};

struct GpuInfo {
  int index = 0;  // NVML's (and, with default ordering, CUDA's) device index
  std::string name;
  std::string bus_id;
  int64_t memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
  int pcie_generation = 0, pcie_width = 0;  // current link, 0 when unknown
  int numa = -1;                            // from the PCI device, -1 when unknown
  std::vector<NvLink> nvlinks;              // active links only
};

struct LOOM_API HostTopology {
  std::string hostname;
  std::string host_id;  // host_identity(): two containers with one name stay apart
  std::string cpu_model;
  std::string cpu_vendor;  // "GenuineIntel", "AuthenticAMD", ...
  int logical_cpus = 0;    // online logical CPUs
  int sockets = 0;
  std::vector<CpuCore> cores;
  std::vector<CpuCache> caches;  // one entry per (level, type)
  std::vector<NumaNode> numa_nodes;
  int64_t memory_bytes = 0;  // MemTotal
  // Streaming bandwidth of the whole machine (all cores copying), bytes/s; absent unless measured.
  std::optional<double> memory_bandwidth;
  std::optional<double> memory_bandwidth_one_core;  // the same from one thread
  std::vector<PciDevice> pci;
  std::vector<NetInterface> nics;
  std::vector<GpuInfo> gpus;
  std::string gpu_note;            // why `gpus` is empty, when it is
  std::vector<std::string> notes;  // fallbacks taken: "caches: sysfs has none; sysconf"

  Json to_json() const;
  // The inverse of to_json (DataError naming the field for a malformed document).
  static HostTopology from_json(const Json& j);
  // The physical machine: host_id up to its first '/'. Hosts of one machine (network namespaces,
  // or LOOM_HOST_ID="<machine>/<name>") reach each other by TCP through the one kernel and share
  // its cores.
  std::string machine() const { return host_id.substr(0, host_id.find('/')); }
};

struct TopologyOptions {
  std::string sys_root = "/sys";    // where sysfs is mounted
  std::string proc_root = "/proc";  // where procfs is mounted
  bool gpus = true;                 // ask NVML
  bool network_addresses = true;    // getifaddrs (off for a hand-made tree)
  bool measure_bandwidth = false;   // stream copies for HostTopology::memory_bandwidth
};

// Which host this process runs on, as the group sees it: LOOM_HOST_ID when set (a name, or
// "<machine>/<name>" for a host emulated on a machine), else hostname + ":" + boot id + "/" + the
// network namespace ("net:[4026531833]"): processes in two network namespaces (containers,
// emulated hosts: namespaces joined by veth pairs, each with its own address) are two hosts of
// one machine. Ranks with one identity talk over shared memory, the others over TCP.
LOOM_API std::string host_identity(const std::string& proc_root = "/proc");

// Reads the machine's topology. Never throws for a missing or unreadable file: what cannot be
// read is left at its default and named in `notes`.
LOOM_API HostTopology detect_topology(const TopologyOptions& options = {});

// Measures streaming copy bandwidth with `threads` threads (0: one per online CPU) over buffers
// far larger than the last-level cache; bytes/s counting bytes read plus bytes written.
LOOM_API double measure_memory_bandwidth(int threads = 0);

// A readable tree (what `loom topo` prints).
LOOM_API std::string topology_tree(const HostTopology& t);
// An XML document in the shape of NCCL's topology dump (NCCL_TOPO_DUMP_FILE): <system> with a
// <cpu> per NUMA node holding its <pci> devices (bridges nest), <gpu> and <nic>/<net> elements,
// and <nvlink> elements under each GPU.
LOOM_API std::string topology_xml(const HostTopology& t);

// ---- several hosts ----

// How two ranks reach each other, from the fastest to the slowest.
enum class LinkClass : int8_t {
  Self = 0,      // the same rank
  SharedNuma,    // the same host and NUMA node: shared memory
  SharedSocket,  // the same host, other NUMA nodes of one socket: shared memory
  CrossSocket,   // the same host, other sockets: shared memory over the socket interconnect
  LocalTcp,      // the same host over TCP (shared memory not used)
  NetworkTcp,    // other hosts, TCP
};
LOOM_API const char* link_class_name(LinkClass c);

struct RankPlacement {
  int host = 0;   // index into ClusterTopology::hosts
  int numa = -1;  // the NUMA node the rank's process runs on, -1 when unknown
  int socket = -1;
};

struct LOOM_API ClusterTopology {
  std::vector<HostTopology> hosts;
  std::vector<RankPlacement> ranks;  // by rank
  // The class of the link between ranks a and b (Self on the diagonal); `shared_memory` says
  // whether ranks of one host talk through shared memory (else LocalTcp). Hosts on one machine
  // (HostTopology::machine) are LocalTcp apart, other hosts NetworkTcp.
  LinkClass link(int a, int b, bool shared_memory = true) const;
  int ranks_on_host(int host) const;
  Json to_json() const;
};

// The NUMA node and socket the calling thread runs on now (sched_getcpu), -1 when unknown.
LOOM_API RankPlacement current_placement(const HostTopology& t);

// Every rank publishes its HostTopology and placement under `prefix` in the store and reads the
// others': one ClusterTopology, the same on every rank (hosts ordered by their lowest rank).
LOOM_API ClusterTopology exchange_topology(Store& store, int rank, int world_size,
                                           const HostTopology& mine,
                                           const std::string& prefix = "loom/topology/");

}  // namespace loom::dist
