// The topology as JSON, a tree and NCCL-shaped XML; a cluster of hosts through the store (Note
// [Topology] in loom/distributed/topology.h).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "distributed/topology/topology_internal.h"
#include "loom/distributed/store.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"
#include "loom/text.h"

namespace loom::dist {
namespace {

Json ints(const std::vector<int>& v) {
  Json a = Json::array();
  for (int x : v) a.push_back(x);
  return a;
}

std::vector<int> ints_of(const Json& j) {
  std::vector<int> v;
  for (const Json& x : j.as_array()) v.push_back(static_cast<int>(x.as_int()));
  return v;
}

Json strings(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const std::string& x : v) a.push_back(x);
  return a;
}

std::vector<std::string> strings_of(const Json& j) {
  std::vector<std::string> v;
  for (const Json& x : j.as_array()) v.push_back(x.as_string());
  return v;
}

std::string hex(uint32_t v, int digits) {
  char s[16];
  std::snprintf(s, sizeof(s), "0x%0*x", digits, v);
  return s;
}

// NCCL writes link speeds as "16.0 GT/s PCIe" and widths as lane counts, as sysfs does.
std::string numa_affinity_mask(const std::vector<int>& cpus) {
  // A hexadecimal mask in 32-bit groups, as sysfs's cpumap (what NCCL's "affinity" holds).
  int top = cpus.empty() ? 0 : cpus.back();
  std::vector<uint32_t> words(static_cast<size_t>(top / 32 + 1), 0);
  for (int c : cpus) words[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
  std::string s;
  for (size_t i = words.size(); i-- > 0;) {
    char w[16];
    std::snprintf(w, sizeof(w), "%08x", words[i]);
    if (!s.empty()) s += ",";
    s += w;
  }
  return s;
}

}  // namespace

Json HostTopology::to_json() const {
  Json j = Json::object();
  j.set("hostname", hostname);
  j.set("host_id", host_id);
  j.set("cpu_model", cpu_model);
  j.set("cpu_vendor", cpu_vendor);
  j.set("logical_cpus", logical_cpus);
  j.set("sockets", sockets);
  Json cs = Json::array();
  for (const CpuCore& c : cores)
    cs.push_back(Json::object(
        {{"socket", c.socket}, {"core", c.core}, {"numa", c.numa}, {"cpus", ints(c.cpus)}}));
  j.set("cores", cs);
  Json ks = Json::array();
  for (const CpuCache& c : caches)
    ks.push_back(Json::object({{"level", c.level},
                               {"type", c.type},
                               {"size_bytes", c.size_bytes},
                               {"line_bytes", c.line_bytes},
                               {"cpus", ints(c.cpus)},
                               {"instances", c.instances}}));
  j.set("caches", ks);
  Json ns = Json::array();
  for (const NumaNode& n : numa_nodes)
    ns.push_back(Json::object({{"id", n.id},
                               {"cpus", ints(n.cpus)},
                               {"memory_bytes", n.memory_bytes},
                               {"distances", ints(n.distances)}}));
  j.set("numa_nodes", ns);
  j.set("memory_bytes", memory_bytes);
  j.set("memory_bandwidth", memory_bandwidth ? Json(*memory_bandwidth) : Json());
  j.set("memory_bandwidth_one_core",
        memory_bandwidth_one_core ? Json(*memory_bandwidth_one_core) : Json());
  Json ps = Json::array();
  for (const PciDevice& p : pci)
    ps.push_back(Json::object({{"bus_id", p.bus_id},
                               {"parent", p.parent},
                               {"root", p.root},
                               {"class", static_cast<int64_t>(p.class_code)},
                               {"kind", p.kind},
                               {"vendor", static_cast<int64_t>(p.vendor)},
                               {"device", static_cast<int64_t>(p.device)},
                               {"numa", p.numa},
                               {"link_speed", p.link_speed},
                               {"link_width", p.link_width},
                               {"driver", p.driver}}));
  j.set("pci", ps);
  Json is = Json::array();
  for (const NetInterface& n : nics)
    is.push_back(Json::object({{"name", n.name},
                               {"kind", n.kind},
                               {"up", n.up},
                               {"speed_mbps", n.speed_mbps},
                               {"mtu", n.mtu},
                               {"pci_bus_id", n.pci_bus_id},
                               {"numa", n.numa},
                               {"addresses", strings(n.addresses)}}));
  j.set("nics", is);
  Json gs = Json::array();
  for (const GpuInfo& g : gpus) {
    Json links = Json::array();
    for (const NvLink& l : g.nvlinks)
      links.push_back(Json::object(
          {{"link", l.link}, {"remote_bus_id", l.remote_bus_id}, {"version", l.version}}));
    gs.push_back(
        Json::object({{"index", g.index},
                      {"name", g.name},
                      {"bus_id", g.bus_id},
                      {"memory_bytes", g.memory_bytes},
                      {"sm", std::to_string(g.sm_major) + "." + std::to_string(g.sm_minor)},
                      {"pcie_generation", g.pcie_generation},
                      {"pcie_width", g.pcie_width},
                      {"numa", g.numa},
                      {"nvlinks", links}}));
  }
  j.set("gpus", gs);
  j.set("gpu_note", gpu_note);
  j.set("notes", strings(notes));
  return j;
}

HostTopology HostTopology::from_json(const Json& j) {
  HostTopology t;
  auto opt_double = [](const Json& v) -> std::optional<double> {
    if (v.is_null()) return std::nullopt;
    return v.as_double();
  };
  t.hostname = j.at("hostname").as_string();
  t.host_id = j.at("host_id").as_string();
  t.cpu_model = j.at("cpu_model").as_string();
  t.cpu_vendor = j.at("cpu_vendor").as_string();
  t.logical_cpus = static_cast<int>(j.at("logical_cpus").as_int());
  t.sockets = static_cast<int>(j.at("sockets").as_int());
  for (const Json& c : j.at("cores").as_array()) {
    CpuCore k;
    k.socket = static_cast<int>(c.at("socket").as_int());
    k.core = static_cast<int>(c.at("core").as_int());
    k.numa = static_cast<int>(c.at("numa").as_int());
    k.cpus = ints_of(c.at("cpus"));
    t.cores.push_back(k);
  }
  for (const Json& c : j.at("caches").as_array()) {
    CpuCache k;
    k.level = static_cast<int>(c.at("level").as_int());
    k.type = c.at("type").as_string();
    k.size_bytes = c.at("size_bytes").as_int();
    k.line_bytes = c.at("line_bytes").as_int();
    k.cpus = ints_of(c.at("cpus"));
    k.instances = static_cast<int>(c.at("instances").as_int());
    t.caches.push_back(k);
  }
  for (const Json& n : j.at("numa_nodes").as_array()) {
    NumaNode k;
    k.id = static_cast<int>(n.at("id").as_int());
    k.cpus = ints_of(n.at("cpus"));
    k.memory_bytes = n.at("memory_bytes").as_int();
    k.distances = ints_of(n.at("distances"));
    t.numa_nodes.push_back(k);
  }
  t.memory_bytes = j.at("memory_bytes").as_int();
  t.memory_bandwidth = opt_double(j.at("memory_bandwidth"));
  t.memory_bandwidth_one_core = opt_double(j.at("memory_bandwidth_one_core"));
  for (const Json& p : j.at("pci").as_array()) {
    PciDevice k;
    k.bus_id = p.at("bus_id").as_string();
    k.parent = p.at("parent").as_string();
    k.root = p.at("root").as_string();
    k.class_code = static_cast<uint32_t>(p.at("class").as_int());
    k.kind = p.at("kind").as_string();
    k.vendor = static_cast<uint16_t>(p.at("vendor").as_int());
    k.device = static_cast<uint16_t>(p.at("device").as_int());
    k.numa = static_cast<int>(p.at("numa").as_int());
    k.link_speed = p.at("link_speed").as_string();
    k.link_width = static_cast<int>(p.at("link_width").as_int());
    k.driver = p.at("driver").as_string();
    t.pci.push_back(k);
  }
  for (const Json& n : j.at("nics").as_array()) {
    NetInterface k;
    k.name = n.at("name").as_string();
    k.kind = n.at("kind").as_string();
    k.up = n.at("up").as_bool();
    k.speed_mbps = n.at("speed_mbps").as_int();
    k.mtu = static_cast<int>(n.at("mtu").as_int());
    k.pci_bus_id = n.at("pci_bus_id").as_string();
    k.numa = static_cast<int>(n.at("numa").as_int());
    k.addresses = strings_of(n.at("addresses"));
    t.nics.push_back(k);
  }
  for (const Json& g : j.at("gpus").as_array()) {
    GpuInfo k;
    k.index = static_cast<int>(g.at("index").as_int());
    k.name = g.at("name").as_string();
    k.bus_id = g.at("bus_id").as_string();
    k.memory_bytes = g.at("memory_bytes").as_int();
    const std::string sm = g.at("sm").as_string();
    std::sscanf(sm.c_str(), "%d.%d", &k.sm_major, &k.sm_minor);
    k.pcie_generation = static_cast<int>(g.at("pcie_generation").as_int());
    k.pcie_width = static_cast<int>(g.at("pcie_width").as_int());
    k.numa = static_cast<int>(g.at("numa").as_int());
    for (const Json& l : g.at("nvlinks").as_array()) {
      NvLink link;
      link.link = static_cast<int>(l.at("link").as_int());
      link.remote_bus_id = l.at("remote_bus_id").as_string();
      link.version = static_cast<int>(l.at("version").as_int());
      k.nvlinks.push_back(link);
    }
    t.gpus.push_back(k);
  }
  t.gpu_note = j.at("gpu_note").as_string();
  t.notes = strings_of(j.at("notes"));
  return t;
}

std::string topology_tree(const HostTopology& t) {
  std::ostringstream os;
  os << "host " << t.hostname << ": " << (t.cpu_model.empty() ? "unknown CPU" : t.cpu_model) << " ("
     << t.cpu_vendor << "), " << t.sockets << " socket(s), " << t.cores.size() << " core(s), "
     << t.logical_cpus << " logical CPU(s), " << format_bytes(t.memory_bytes) << " of memory\n";
  if (t.memory_bandwidth) {
    char s[160];
    std::snprintf(
        s, sizeof(s),
        "  memory bandwidth (copy, read + write): %.1f GB/s all cores, %.1f GB/s one core\n",
        *t.memory_bandwidth / 1e9, t.memory_bandwidth_one_core.value_or(0) / 1e9);
    os << s;
  }
  os << "  caches:";
  for (const CpuCache& c : t.caches) {
    os << " L" << c.level
       << (c.type == "Data"          ? "d"
           : c.type == "Instruction" ? "i"
                                     : "")
       << " " << format_bytes(c.size_bytes);
    if (c.instances > 0) os << " x" << c.instances;
    if (!c.cpus.empty() && c.cpus.size() > 1)
      os << " (shared by cpus " << topo::cpu_list_str(c.cpus) << ")";
    os << ";";
  }
  os << "\n";
  std::set<int> sockets;
  for (const CpuCore& c : t.cores) sockets.insert(c.socket);
  for (int s : sockets) {
    os << "  socket " << s << "\n";
    std::set<int> nodes;
    for (const CpuCore& c : t.cores)
      if (c.socket == s) nodes.insert(c.numa);
    for (int n : nodes) {
      if (n >= 0) {
        os << "    numa node " << n;
        for (const NumaNode& node : t.numa_nodes) {
          if (node.id != n) continue;
          os << ": " << format_bytes(node.memory_bytes) << ", distances";
          for (int d : node.distances) os << " " << d;
        }
        os << "\n";
      }
      for (const CpuCore& c : t.cores) {
        if (c.socket != s || c.numa != n) continue;
        os << "      core " << c.core << ": cpus " << topo::cpu_list_str(c.cpus) << "\n";
      }
    }
  }
  // The PCI tree: roots, then bridges and their children, depth-first.
  std::map<std::string, std::vector<const PciDevice*>> children;
  for (const PciDevice& p : t.pci)
    children[p.parent.empty() ? "root:" + p.root : p.parent].push_back(&p);
  std::set<std::string> roots;
  for (const PciDevice& p : t.pci) roots.insert(p.root);
  std::function<void(const std::string&, int)> walk = [&](const std::string& key, int depth) {
    for (const PciDevice* p : children[key]) {
      os << std::string(static_cast<size_t>(4 + 2 * depth), ' ') << p->bus_id << " " << p->kind
         << " " << hex(p->vendor, 4) << ":" << hex(p->device, 4);
      if (!p->link_speed.empty()) os << ", " << p->link_speed << " x" << p->link_width;
      if (p->numa >= 0) os << ", numa " << p->numa;
      if (!p->driver.empty()) os << ", driver " << p->driver;
      os << "\n";
      walk(p->bus_id, depth + 1);
    }
  };
  if (!t.pci.empty()) os << "  pci\n";
  for (const std::string& r : roots) {
    os << "    " << (r.empty() ? "(no root)" : r) << "\n";
    walk("root:" + r, 1);
  }
  os << "  network\n";
  for (const NetInterface& n : t.nics) {
    os << "    " << n.name << ": " << n.kind << ", " << (n.up ? "up" : "down");
    if (n.speed_mbps > 0) {
      os << ", " << n.speed_mbps << " Mbit/s";
    } else {
      os << ", speed not reported";
    }
    os << ", mtu " << n.mtu;
    if (!n.pci_bus_id.empty()) os << ", pci " << n.pci_bus_id;
    for (const std::string& a : n.addresses) os << ", " << a;
    os << "\n";
  }
  os << "  gpus";
  if (t.gpus.empty()) os << ": none (" << t.gpu_note << ")";
  os << "\n";
  for (const GpuInfo& g : t.gpus) {
    os << "    gpu " << g.index << ": " << g.name << ", " << g.bus_id << ", "
       << format_bytes(g.memory_bytes) << ", sm " << g.sm_major << "." << g.sm_minor
       << ", PCIe gen " << g.pcie_generation << " x" << g.pcie_width << ", numa " << g.numa << ", "
       << g.nvlinks.size() << " NVLink(s)\n";
    std::map<std::string, int> peers;
    for (const NvLink& l : g.nvlinks) ++peers[l.remote_bus_id];
    for (const auto& [peer, n] : peers) os << "      nvlink x" << n << " to " << peer << "\n";
  }
  for (const std::string& n : t.notes) os << "  note: " << n << "\n";
  return os.str();
}

std::string topology_xml(const HostTopology& t) {
  std::ostringstream os;
  os << "<system version=\"1\">\n";
  std::vector<int> nodes;
  for (const NumaNode& n : t.numa_nodes) nodes.push_back(n.id);
  if (nodes.empty()) nodes.push_back(-1);
  std::map<std::string, std::vector<const PciDevice*>> children;
  for (const PciDevice& p : t.pci) children[p.parent].push_back(&p);
  std::function<void(const PciDevice&, int)> device = [&](const PciDevice& p, int depth) {
    const std::string pad(static_cast<size_t>(2 * depth), ' ');
    os << pad << "<pci busid=\"" << p.bus_id << "\" class=\"" << hex(p.class_code, 6)
       << "\" vendor=\"" << hex(p.vendor, 4) << "\" device=\"" << hex(p.device, 4)
       << "\" link_speed=\"" << xml_escape(p.link_speed) << "\" link_width=\"" << p.link_width
       << "\">\n";
    for (const GpuInfo& g : t.gpus) {
      std::string tail = g.bus_id.size() >= 7 ? g.bus_id.substr(g.bus_id.size() - 7) : g.bus_id;
      std::transform(tail.begin(), tail.end(), tail.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      if (p.bus_id.size() < 7 || p.bus_id.substr(p.bus_id.size() - 7) != tail) continue;
      os << pad << "  <gpu dev=\"" << g.index << "\" sm=\"" << g.sm_major * 10 + g.sm_minor
         << "\" name=\"" << xml_escape(g.name) << "\">\n";
      std::map<std::string, int> peers;
      for (const NvLink& l : g.nvlinks) ++peers[l.remote_bus_id];
      for (const auto& [peer, n] : peers)
        os << pad << "    <nvlink target=\"" << peer << "\" count=\"" << n << "\"/>\n";
      os << pad << "  </gpu>\n";
    }
    for (const NetInterface& n : t.nics) {
      if (n.pci_bus_id != p.bus_id) continue;
      os << pad << "  <nic>\n"
         << pad << "    <net name=\"" << n.name << "\" speed=\"" << n.speed_mbps << "\" mtu=\""
         << n.mtu << "\"/>\n"
         << pad << "  </nic>\n";
    }
    for (const PciDevice* c : children[p.bus_id]) device(*c, depth + 1);
    os << pad << "</pci>\n";
  };
  for (int node : nodes) {
    std::vector<int> cpus;
    for (const NumaNode& n : t.numa_nodes)
      if (n.id == node) cpus = n.cpus;
    if (node < 0)
      for (int c = 0; c < t.logical_cpus; ++c) cpus.push_back(c);
    const std::string vendor = t.cpu_vendor == "GenuineIntel"   ? "GenuineIntel"
                               : t.cpu_vendor == "AuthenticAMD" ? "AuthenticAMD"
                                                                : t.cpu_vendor;
    os << "  <cpu numaid=\"" << node << "\" affinity=\"" << numa_affinity_mask(cpus)
       << "\" arch=\"x86_64\" vendor=\"" << xml_escape(vendor) << "\">\n";
    for (const PciDevice& p : t.pci) {
      const bool here = p.numa == node || (p.numa < 0 && node == nodes.front());
      if (p.parent.empty() && here) device(p, 2);
    }
    // Interfaces without a PCI device (loopback, veth, bridges) sit under the first CPU.
    if (node == nodes.front()) {
      for (const NetInterface& n : t.nics) {
        if (!n.pci_bus_id.empty()) continue;
        os << "    <nic>\n      <net name=\"" << n.name << "\" speed=\"" << n.speed_mbps
           << "\" mtu=\"" << n.mtu << "\" kind=\"" << n.kind << "\"/>\n    </nic>\n";
      }
    }
    os << "  </cpu>\n";
  }
  os << "</system>\n";
  return os.str();
}

const char* link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::Self:
      return "self";
    case LinkClass::SharedNuma:
      return "shm, same NUMA node";
    case LinkClass::SharedSocket:
      return "shm, same socket";
    case LinkClass::CrossSocket:
      return "shm, across sockets";
    case LinkClass::LocalTcp:
      return "tcp, same host";
    case LinkClass::NetworkTcp:
      return "tcp, between hosts";
  }
  return "unknown";
}

LinkClass ClusterTopology::link(int a, int b, bool shared_memory) const {
  LOOM_CHECK(
      a >= 0 && b >= 0 && a < static_cast<int>(ranks.size()) && b < static_cast<int>(ranks.size()),
      "[topology] ranks ", a, " and ", b, " are not both in a world of ", ranks.size());
  if (a == b) return LinkClass::Self;
  const RankPlacement& x = ranks[static_cast<size_t>(a)];
  const RankPlacement& y = ranks[static_cast<size_t>(b)];
  if (x.host != y.host) {
    return hosts[static_cast<size_t>(x.host)].machine() ==
                   hosts[static_cast<size_t>(y.host)].machine()
               ? LinkClass::LocalTcp
               : LinkClass::NetworkTcp;
  }
  if (!shared_memory) return LinkClass::LocalTcp;
  if (x.socket >= 0 && y.socket >= 0 && x.socket != y.socket) return LinkClass::CrossSocket;
  if (x.numa >= 0 && y.numa >= 0 && x.numa != y.numa) return LinkClass::SharedSocket;
  return LinkClass::SharedNuma;
}

int ClusterTopology::ranks_on_host(int host) const {
  return static_cast<int>(std::count_if(ranks.begin(), ranks.end(),
                                        [&](const RankPlacement& r) { return r.host == host; }));
}

Json ClusterTopology::to_json() const {
  Json hs = Json::array();
  for (const HostTopology& h : hosts) hs.push_back(h.to_json());
  Json rs = Json::array();
  for (const RankPlacement& r : ranks)
    rs.push_back(Json::object({{"host", r.host}, {"numa", r.numa}, {"socket", r.socket}}));
  return Json::object({{"hosts", hs}, {"ranks", rs}});
}

ClusterTopology exchange_topology(Store& store, int rank, int world_size, const HostTopology& mine,
                                  const std::string& prefix) {
  LOOM_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "[topology] rank ", rank,
             " is not in a world of ", world_size);
  const RankPlacement here = current_placement(mine);
  Json doc = Json::object({{"numa", here.numa}, {"socket", here.socket}, {"host", mine.to_json()}});
  store.set(prefix + std::to_string(rank), doc.dump());
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys);  // every rank's document, within the store's timeout
  const std::vector<std::string> values = store.multi_get(keys);
  ClusterTopology c;
  std::map<std::string, int> host_index;
  for (int r = 0; r < world_size; ++r) {
    const Json j = Json::parse(values[static_cast<size_t>(r)], keys[static_cast<size_t>(r)]);
    HostTopology h = HostTopology::from_json(j.at("host"));
    RankPlacement p;
    p.numa = static_cast<int>(j.at("numa").as_int());
    p.socket = static_cast<int>(j.at("socket").as_int());
    auto it = host_index.find(h.host_id);
    if (it == host_index.end()) {
      it = host_index.emplace(h.host_id, static_cast<int>(c.hosts.size())).first;
      c.hosts.push_back(std::move(h));
    }
    p.host = it->second;
    c.ranks.push_back(p);
  }
  return c;
}

}  // namespace loom::dist
