// Topology detection (Note [Topology] in loom/distributed/topology.h) on a hand-made sysfs and
// procfs tree: two sockets of two cores with two hardware threads each, one NUMA node per socket,
// per-core L1/L2 and a per-socket L3, a PCIe tree with two bridges, a NIC and a GPU, and network
// interfaces of every kind. Every field is checked against the tree as written here; then the JSON
// round trip, the XML, the machine's own detection and the exchange through a store.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "loom/distributed/store.h"
#include "loom/distributed/topology.h"
#include "temp_dir.h"

namespace loom::dist {
namespace {

namespace fs = std::filesystem;
using loom::testing::TempDir;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text << "\n";
}

void link(const std::string& target, const std::string& at) {
  fs::create_directories(fs::path(at).parent_path());
  fs::create_symlink(target, at);
}

// The fake machine: cpus 0-7; cpu c is socket c / 4, core (c / 2) % 2, thread c % 2.
class FakeSysfs {
 public:
  FakeSysfs() {
    const std::string sys = dir_ / "sys", proc = dir_ / "proc";
    write(sys + "/devices/system/cpu/online", "0-7");
    for (int c = 0; c < 8; ++c) {
      const std::string cpu = sys + "/devices/system/cpu/cpu" + std::to_string(c);
      write(cpu + "/topology/physical_package_id", std::to_string(c / 4));
      write(cpu + "/topology/core_id", std::to_string((c / 2) % 2));
      const int first = c - c % 2;
      const std::string pair = std::to_string(first) + "-" + std::to_string(first + 1);
      const std::string socket = c < 4 ? "0-3" : "4-7";
      struct Cache {
        const char *index, *level, *type, *size, *shared;
      };
      const Cache caches[] = {{"index0", "1", "Data", "48K", pair.c_str()},
                              {"index1", "1", "Instruction", "32K", pair.c_str()},
                              {"index2", "2", "Unified", "2048K", pair.c_str()},
                              {"index3", "3", "Unified", "32M", socket.c_str()}};
      for (const Cache& k : caches) {
        const std::string d = cpu + "/cache/" + k.index;
        write(d + "/level", k.level);
        write(d + "/type", k.type);
        write(d + "/size", k.size);
        write(d + "/coherency_line_size", "64");
        write(d + "/shared_cpu_list", k.shared);
      }
    }
    for (int n = 0; n < 2; ++n) {
      const std::string node = sys + "/devices/system/node/node" + std::to_string(n);
      write(node + "/cpulist", n == 0 ? "0-3" : "4-7");
      write(node + "/distance", n == 0 ? "10 21" : "21 10");
      write(node + "/meminfo", "Node " + std::to_string(n) + " MemTotal:       " +
                                   (n == 0 ? "16384000" : "8192000") + " kB\nNode 0 MemFree: 1 kB");
    }
    write(sys + "/devices/system/node/online", "0-1");
    // PCI: pci0000:00 / bridge 00:01.0 / NIC 01:00.0; pci0000:80 / bridge 80:02.0 / GPU 81:00.0.
    const std::string root0 = sys + "/devices/pci0000:00", root1 = sys + "/devices/pci0000:80";
    auto pci = [&](const std::string& dir, const char* cls, const char* vendor, const char* device,
                   int numa, const char* speed, int width) {
      write(dir + "/class", cls);
      write(dir + "/vendor", vendor);
      write(dir + "/device", device);
      write(dir + "/numa_node", std::to_string(numa));
      if (speed != nullptr) {
        write(dir + "/current_link_speed", speed);
        write(dir + "/current_link_width", std::to_string(width));
      }
      link(fs::relative(dir, sys + "/bus/pci/devices"),
           sys + "/bus/pci/devices/" + fs::path(dir).filename().string());
    };
    pci(root0 + "/0000:00:01.0", "0x060400", "0x8086", "0x2030", 0, "8.0 GT/s PCIe", 16);
    pci(root0 + "/0000:00:01.0/0000:01:00.0", "0x020000", "0x15b3", "0x1017", 0, "8.0 GT/s PCIe",
        8);
    fs::create_directories(sys + "/bus/pci/drivers/mlx5_core");
    link("../../../bus/pci/drivers/mlx5_core", root0 + "/0000:00:01.0/0000:01:00.0/driver");
    pci(root1 + "/0000:80:02.0", "0x060400", "0x8086", "0x2031", 1, "16.0 GT/s PCIe", 16);
    pci(root1 + "/0000:80:02.0/0000:81:00.0", "0x030200", "0x10de", "0x2335", 1, "16.0 GT/s PCIe",
        16);
    // Network: eth0 on the NIC, lo, a veth (its peer's index differs), a bridge, a dummy.
    auto net = [&](const std::string& real, const std::string& name, int type, int ifindex,
                   int iflink, const char* state, const char* speed, int mtu) {
      write(real + "/type", std::to_string(type));
      write(real + "/ifindex", std::to_string(ifindex));
      write(real + "/iflink", std::to_string(iflink));
      write(real + "/operstate", state);
      if (speed != nullptr) write(real + "/speed", speed);
      write(real + "/mtu", std::to_string(mtu));
      link(fs::relative(real, sys + "/class/net"), sys + "/class/net/" + name);
    };
    const std::string nic = root0 + "/0000:00:01.0/0000:01:00.0";
    net(nic + "/net/eth0", "eth0", 1, 2, 2, "up", "25000", 9000);
    link("../../../0000:01:00.0", nic + "/net/eth0/device");
    net(sys + "/devices/virtual/net/lo", "lo", 772, 1, 1, "unknown", nullptr, 65536);
    net(sys + "/devices/virtual/net/veth0", "veth0", 1, 5, 6, "up", "10000", 1500);
    net(sys + "/devices/virtual/net/br0", "br0", 1, 7, 7, "down", nullptr, 1500);
    fs::create_directories(sys + "/devices/virtual/net/br0/bridge");
    net(sys + "/devices/virtual/net/dummy0", "dummy0", 1, 8, 8, "down", nullptr, 1500);
    write(proc + "/cpuinfo",
          "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU @ 2.0GHz\n\n"
          "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU @ 2.0GHz\n");
    write(proc + "/meminfo", "MemTotal:       24576000 kB\nMemFree:        1000 kB");
    write(proc + "/sys/kernel/hostname", "node-a");
    write(proc + "/sys/kernel/random/boot_id", "1234-boot");
  }
  TopologyOptions options() const {
    TopologyOptions o;
    o.sys_root = dir_ / "sys";
    o.proc_root = dir_ / "proc";
    o.gpus = false;
    o.network_addresses = false;
    return o;
  }

 private:
  TempDir dir_{"loom-topo"};
};

const PciDevice& pci_named(const HostTopology& t, const std::string& id) {
  for (const PciDevice& p : t.pci)
    if (p.bus_id == id) return p;
  throw std::runtime_error("no pci device " + id);
}

const NetInterface& nic_named(const HostTopology& t, const std::string& name) {
  for (const NetInterface& n : t.nics)
    if (n.name == name) return n;
  throw std::runtime_error("no interface " + name);
}

TEST(Topology, CpusCoresCachesAndNumaFromSysfs) {
  FakeSysfs fake;
  const HostTopology t = detect_topology(fake.options());
  EXPECT_EQ(t.hostname, "node-a");
  EXPECT_EQ(t.host_id, "node-a:1234-boot");
  EXPECT_EQ(t.cpu_model, "Test CPU @ 2.0GHz");
  EXPECT_EQ(t.cpu_vendor, "GenuineIntel");
  EXPECT_EQ(t.memory_bytes, int64_t{24576000} * 1024);
  EXPECT_EQ(t.logical_cpus, 8);
  EXPECT_EQ(t.sockets, 2);
  ASSERT_EQ(t.cores.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const CpuCore& c = t.cores[k];
    EXPECT_EQ(c.socket, static_cast<int>(k / 2)) << k;
    EXPECT_EQ(c.core, static_cast<int>(k % 2)) << k;
    EXPECT_EQ(c.numa, static_cast<int>(k / 2)) << k;
    EXPECT_EQ(c.cpus, (std::vector<int>{static_cast<int>(2 * k), static_cast<int>(2 * k + 1)}));
  }
  ASSERT_EQ(t.caches.size(), 4u);  // L1d, L1i, L2, L3, sorted by (level, type)
  EXPECT_EQ(t.caches[0].level, 1);
  EXPECT_EQ(t.caches[0].type, "Data");
  EXPECT_EQ(t.caches[0].size_bytes, 48 * 1024);
  EXPECT_EQ(t.caches[0].line_bytes, 64);
  EXPECT_EQ(t.caches[0].instances, 4);  // one per core
  EXPECT_EQ(t.caches[1].type, "Instruction");
  EXPECT_EQ(t.caches[2].size_bytes, 2 << 20);
  EXPECT_EQ(t.caches[3].level, 3);
  EXPECT_EQ(t.caches[3].size_bytes, 32 << 20);
  EXPECT_EQ(t.caches[3].instances, 2);  // one per socket
  EXPECT_EQ(t.caches[3].cpus, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[1].id, 1);
  EXPECT_EQ(t.numa_nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.numa_nodes[1].memory_bytes, int64_t{8192000} * 1024);
  EXPECT_EQ(t.numa_nodes[1].distances, (std::vector<int>{21, 10}));
  EXPECT_TRUE(t.notes.empty()) << t.notes.front();
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_NE(t.gpu_note.find("not asked"), std::string::npos) << t.gpu_note;
}

TEST(Topology, PciTreeAndNetworkInterfaces) {
  FakeSysfs fake;
  const HostTopology t = detect_topology(fake.options());
  ASSERT_EQ(t.pci.size(), 4u);
  const PciDevice& nic = pci_named(t, "0000:01:00.0");
  EXPECT_EQ(nic.parent, "0000:00:01.0");
  EXPECT_EQ(nic.root, "pci0000:00");
  EXPECT_EQ(nic.kind, "network");
  EXPECT_EQ(nic.vendor, 0x15b3);
  EXPECT_EQ(nic.device, 0x1017);
  EXPECT_EQ(nic.link_speed, "8.0 GT/s PCIe");
  EXPECT_EQ(nic.link_width, 8);
  EXPECT_EQ(nic.driver, "mlx5_core");
  const PciDevice& bridge = pci_named(t, "0000:80:02.0");
  EXPECT_EQ(bridge.kind, "bridge");
  EXPECT_EQ(bridge.parent, "");
  EXPECT_EQ(bridge.root, "pci0000:80");
  const PciDevice& gpu = pci_named(t, "0000:81:00.0");
  EXPECT_EQ(gpu.kind, "gpu");
  EXPECT_EQ(gpu.class_code, 0x030200u);
  EXPECT_EQ(gpu.numa, 1);
  EXPECT_EQ(gpu.parent, "0000:80:02.0");

  ASSERT_EQ(t.nics.size(), 5u);
  const NetInterface& eth = nic_named(t, "eth0");
  EXPECT_EQ(eth.kind, "ethernet");
  EXPECT_TRUE(eth.up);
  EXPECT_EQ(eth.speed_mbps, 25000);
  EXPECT_EQ(eth.mtu, 9000);
  EXPECT_EQ(eth.pci_bus_id, "0000:01:00.0");
  EXPECT_EQ(eth.numa, 0);
  const NetInterface& lo = nic_named(t, "lo");
  EXPECT_EQ(lo.kind, "loopback");
  EXPECT_TRUE(lo.up);
  EXPECT_EQ(lo.speed_mbps, -1);
  EXPECT_EQ(nic_named(t, "veth0").kind, "veth");
  EXPECT_EQ(nic_named(t, "veth0").speed_mbps, 10000);
  EXPECT_EQ(nic_named(t, "br0").kind, "bridge");
  EXPECT_FALSE(nic_named(t, "br0").up);
  EXPECT_EQ(nic_named(t, "dummy0").kind, "virtual");
}

TEST(Topology, JsonRoundTripsAndTheXmlHasNcclsShape) {
  FakeSysfs fake;
  HostTopology t = detect_topology(fake.options());
  t.memory_bandwidth = 1.5e10;
  GpuInfo g;
  g.index = 0;
  g.name = "Test GPU";
  g.bus_id = "00000000:81:00.0";
  g.sm_major = 9;
  g.numa = 1;
  g.nvlinks = {{0, "00000000:C1:00.0", 4}, {1, "00000000:C1:00.0", 4}};
  t.gpus.push_back(g);
  const Json j = t.to_json();
  const HostTopology back = HostTopology::from_json(Json::parse(j.dump(), "round trip"));
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.caches[3].cpus, t.caches[3].cpus);
  EXPECT_EQ(*back.memory_bandwidth, 1.5e10);
  EXPECT_FALSE(back.memory_bandwidth_one_core.has_value());

  const std::string xml = topology_xml(t);
  EXPECT_EQ(xml.rfind("<system version=\"1\">", 0), 0u) << xml;
  EXPECT_NE(xml.find("<cpu numaid=\"0\" affinity=\"0000000f\" arch=\"x86_64\" "
                     "vendor=\"GenuineIntel\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<cpu numaid=\"1\" affinity=\"000000f0\""), std::string::npos) << xml;
  // The NIC nests in its bridge, under node 0; the GPU in its bridge, under node 1.
  const size_t bridge = xml.find("<pci busid=\"0000:00:01.0\"");
  const size_t nic = xml.find("<pci busid=\"0000:01:00.0\"");
  const size_t eth = xml.find("<net name=\"eth0\" speed=\"25000\" mtu=\"9000\"/>");
  ASSERT_NE(bridge, std::string::npos) << xml;
  EXPECT_LT(bridge, nic);
  EXPECT_LT(nic, eth);
  EXPECT_LT(xml.find("numaid=\"1\""), xml.find("<gpu dev=\"0\" sm=\"90\""));
  EXPECT_NE(xml.find("<nvlink target=\"00000000:C1:00.0\" count=\"2\"/>"), std::string::npos)
      << xml;

  const std::string tree = topology_tree(t);
  EXPECT_NE(tree.find("2 socket(s), 4 core(s), 8 logical CPU(s)"), std::string::npos) << tree;
  EXPECT_NE(tree.find("L3 32 MiB x2 (shared by cpus 0-3)"), std::string::npos) << tree;
  EXPECT_NE(tree.find("      0000:01:00.0 network 0x15b3:0x1017, 8.0 GT/s PCIe x8, numa 0, "
                      "driver mlx5_core"),
            std::string::npos)
      << tree;
  EXPECT_NE(tree.find("nvlink x2 to 00000000:C1:00.0"), std::string::npos) << tree;
}

TEST(Topology, MalformedDocumentsAreDataErrors) {
  FakeSysfs fake;
  Json j = detect_topology(fake.options()).to_json();
  j.set("sockets", "two");
  EXPECT_THROW(HostTopology::from_json(j), DataError);
}

// This machine, read for real: whatever it is, the counts agree with each other.
TEST(Topology, ThisMachineIsConsistent) {
  const HostTopology t = detect_topology({});
  EXPECT_GE(t.logical_cpus, 1);
  EXPECT_GE(t.sockets, 1);
  int cpus = 0;
  for (const CpuCore& c : t.cores) cpus += static_cast<int>(c.cpus.size());
  EXPECT_EQ(cpus, t.logical_cpus);
  EXPECT_GT(t.memory_bytes, 0);
  EXPECT_FALSE(t.host_id.empty());
  bool loopback = false;
  for (const NetInterface& n : t.nics) loopback = loopback || n.kind == "loopback";
  EXPECT_TRUE(loopback);
  EXPECT_TRUE(t.gpus.empty() == !t.gpu_note.empty()) << t.gpu_note;
}

// Three ranks, two of them on one host: one cluster on every rank, with the link classes.
TEST(Topology, ExchangeThroughTheStoreGroupsRanksByHost) {
  FakeSysfs fake;
  const HostTopology a = detect_topology(fake.options());
  HostTopology b = a;
  b.hostname = "node-b";
  b.host_id = "node-b:5678-boot";
  HashStore store;
  std::vector<ClusterTopology> got(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back(
        [&, r] { got[static_cast<size_t>(r)] = exchange_topology(store, r, 3, r == 1 ? b : a); });
  }
  for (std::thread& th : ranks) th.join();
  for (const ClusterTopology& c : got) {
    ASSERT_EQ(c.hosts.size(), 2u);
    EXPECT_EQ(c.hosts[0].hostname, "node-a");
    EXPECT_EQ(c.hosts[1].hostname, "node-b");
    EXPECT_EQ(c.ranks[0].host, 0);
    EXPECT_EQ(c.ranks[1].host, 1);
    EXPECT_EQ(c.ranks[2].host, 0);
    EXPECT_EQ(c.ranks_on_host(0), 2);
    EXPECT_EQ(c.to_json(), got[0].to_json());
  }
  ClusterTopology c = got[0];
  EXPECT_EQ(c.link(0, 0), LinkClass::Self);
  EXPECT_EQ(c.link(0, 1), LinkClass::NetworkTcp);
  c.ranks[0].numa = 0;
  c.ranks[0].socket = 0;
  c.ranks[2].numa = 0;
  c.ranks[2].socket = 0;
  EXPECT_EQ(c.link(0, 2), LinkClass::SharedNuma);
  EXPECT_EQ(c.link(0, 2, /*shared_memory=*/false), LinkClass::LocalTcp);
  c.ranks[2].numa = 1;
  EXPECT_EQ(c.link(0, 2), LinkClass::SharedSocket);
  c.ranks[2].socket = 1;
  EXPECT_EQ(c.link(2, 0), LinkClass::CrossSocket);
  EXPECT_STREQ(link_class_name(LinkClass::CrossSocket), "shm, across sockets");
  EXPECT_THROW(c.link(0, 3), Error);
}

}  // namespace
}  // namespace loom::dist
