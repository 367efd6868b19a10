// Reading the machine's topology from sysfs and procfs (Note [Topology] in
// loom/distributed/topology.h), and measuring memory bandwidth.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "distributed/settings.h"
#include "distributed/topology/topology_internal.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"

namespace loom::dist {
namespace fs = std::filesystem;

namespace topo {

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line)) return std::string();
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r'))
    line.pop_back();
  return line;
}

std::optional<int64_t> read_int(const std::string& path, int base) {
  const auto s = read_line(path);
  if (!s || s->empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s->c_str(), &end, base);
  if (errno != 0 || end == s->c_str()) return std::nullopt;
  return v;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t dash = item.find('-');
    char* end = nullptr;
    const long a = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || a < 0) return {};
    long b = a;
    if (dash != std::string::npos) {
      b = std::strtol(item.c_str() + dash + 1, &end, 10);
      if (b < a) return {};
    }
    for (long c = a; c <= b && c - a < 65536; ++c) out.push_back(static_cast<int>(c));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string cpu_list_str(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

int64_t parse_size(const std::string& text) {
  // "32K", "1024K", "32M", "12345" (bytes).
  if (text.empty()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || v < 0) return 0;
  switch (*end) {
    case 'K':
    case 'k':
      return v << 10;
    case 'M':
    case 'm':
      return v << 20;
    case 'G':
    case 'g':
      return v << 30;
    default:
      return v;
  }
}

}  // namespace topo

namespace {

using topo::read_int;
using topo::read_line;

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// The number after `prefix` in a name like "cpu12" or "node1", or -1.
int index_after(const std::string& name, const std::string& prefix) {
  if (!starts_with(name, prefix) || name.size() == prefix.size()) return -1;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::atoi(name.c_str() + prefix.size());
}

// "0000:00:03.0"
bool is_bus_id(const std::string& s) {
  return s.size() == 12 && s[4] == ':' && s[7] == ':' && s[10] == '.';
}

void read_cpus(const TopologyOptions& o, HostTopology& t) {
  const std::string cpu_dir = o.sys_root + "/devices/system/cpu";
  std::vector<int> online;
  if (auto s = read_line(cpu_dir + "/online")) online = topo::parse_cpu_list(*s);
  if (online.empty()) {
    for (const std::string& n : list_dir(cpu_dir))
      if (int c = index_after(n, "cpu"); c >= 0) online.push_back(c);
    std::sort(online.begin(), online.end());
    if (!online.empty()) t.notes.push_back("cpus: no online list; every cpuN folder counted");
  }
  t.logical_cpus = static_cast<int>(online.size());
  std::map<std::pair<int, int>, CpuCore> cores;  // (package, core id)
  std::set<int> sockets;
  for (int c : online) {
    const std::string d = cpu_dir + "/cpu" + std::to_string(c) + "/topology/";
    const int pkg = static_cast<int>(read_int(d + "physical_package_id").value_or(0));
    const int core = static_cast<int>(read_int(d + "core_id").value_or(c));
    sockets.insert(pkg);
    CpuCore& k = cores[{pkg, core}];
    k.socket = pkg;
    k.core = core;
    k.cpus.push_back(c);
  }
  t.sockets = static_cast<int>(sockets.size());
  for (auto& [key, core] : cores) t.cores.push_back(core);
  std::sort(t.cores.begin(), t.cores.end(),
            [](const CpuCore& a, const CpuCore& b) { return a.cpus.front() < b.cpus.front(); });

  // Caches: every index folder of every CPU, one instance per distinct sharing set.
  std::map<std::pair<int, std::string>, CpuCache> caches;
  std::set<std::tuple<int, std::string, std::string>> seen;
  for (int c : online) {
    const std::string base = cpu_dir + "/cpu" + std::to_string(c) + "/cache";
    for (const std::string& idx : list_dir(base)) {
      if (index_after(idx, "index") < 0) continue;
      const std::string d = base + "/" + idx + "/";
      const int level = static_cast<int>(read_int(d + "level").value_or(0));
      const std::string type = read_line(d + "type").value_or("");
      if (level <= 0) continue;
      const std::string shared = read_line(d + "shared_cpu_list").value_or(std::to_string(c));
      CpuCache& k = caches[{level, type}];
      if (k.level == 0) {
        k.level = level;
        k.type = type;
        k.size_bytes = topo::parse_size(read_line(d + "size").value_or(""));
        k.line_bytes = read_int(d + "coherency_line_size").value_or(0);
        k.cpus = topo::parse_cpu_list(shared);
      }
      if (seen.insert({level, type, shared}).second) ++k.instances;
    }
  }
  for (auto& [key, cache] : caches) t.caches.push_back(cache);
  if (t.caches.empty() && o.sys_root == "/sys") {
    // Some VMs expose no cache folders; the C library reads CPUID.
    struct Level {
      int level;
      const char* type;
      int size_name, line_name;
    };
    const Level levels[] = {
        {1, "Data", _SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL1_DCACHE_LINESIZE},
        {1, "Instruction", _SC_LEVEL1_ICACHE_SIZE, _SC_LEVEL1_ICACHE_LINESIZE},
        {2, "Unified", _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL2_CACHE_LINESIZE},
        {3, "Unified", _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL3_CACHE_LINESIZE},
    };
    for (const Level& l : levels) {
      const long size = sysconf(l.size_name);
      if (size <= 0) continue;
      CpuCache k;
      k.level = l.level;
      k.type = l.type;
      k.size_bytes = size;
      k.line_bytes = std::max<long>(sysconf(l.line_name), 0);
      t.caches.push_back(k);
    }
    t.notes.push_back(
        "caches: sysfs has no cache folders; sizes from the C library (CPUID), sharing unknown");
  }
}

void read_numa(const TopologyOptions& o, HostTopology& t) {
  const std::string node_dir = o.sys_root + "/devices/system/node";
  for (const std::string& n : list_dir(node_dir)) {
    const int id = index_after(n, "node");
    if (id < 0) continue;
    NumaNode node;
    node.id = id;
    const std::string d = node_dir + "/" + n + "/";
    node.cpus = topo::parse_cpu_list(read_line(d + "cpulist").value_or(""));
    if (auto dist = read_line(d + "distance")) {
      std::stringstream ss(*dist);
      int v = 0;
      while (ss >> v) node.distances.push_back(v);
    }
    std::ifstream mem(d + "meminfo");
    std::string line;
    while (std::getline(mem, line)) {
      const size_t at = line.find("MemTotal:");
      if (at == std::string::npos) continue;
      node.memory_bytes = std::strtoll(line.c_str() + at + 9, nullptr, 10) * 1024;
      break;
    }
    t.numa_nodes.push_back(node);
  }
  std::sort(t.numa_nodes.begin(), t.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  if (t.numa_nodes.empty()) t.notes.push_back("numa: no node folders; NUMA nodes unknown");
  for (CpuCore& core : t.cores) {
    for (const NumaNode& node : t.numa_nodes) {
      if (std::find(node.cpus.begin(), node.cpus.end(), core.cpus.front()) != node.cpus.end())
        core.numa = node.id;
    }
  }
}

void read_proc(const TopologyOptions& o, HostTopology& t) {
  std::ifstream cpuinfo(o.proc_root + "/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && (t.cpu_model.empty() || t.cpu_vendor.empty())) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (key == "model name" && t.cpu_model.empty()) t.cpu_model = value;
    if (key == "vendor_id" && t.cpu_vendor.empty()) t.cpu_vendor = value;
  }
  std::ifstream meminfo(o.proc_root + "/meminfo");
  while (std::getline(meminfo, line)) {
    if (starts_with(line, "MemTotal:")) {
      t.memory_bytes = std::strtoll(line.c_str() + 9, nullptr, 10) * 1024;
      break;
    }
  }
  char host[256] = {};
  if (o.sys_root == "/sys" && gethostname(host, sizeof(host) - 1) == 0) {
    t.hostname = host;
  } else {
    t.hostname = read_line(o.proc_root + "/sys/kernel/hostname").value_or("unknown");
  }
  t.host_id = host_identity(o.proc_root);
}

std::string pci_kind(uint32_t class_code, uint16_t vendor) {
  const uint32_t base = class_code >> 16;
  if (base == 0x06) return "bridge";
  if (base == 0x02) return "network";
  if (base == 0x03 || (base == 0x12 && vendor == 0x10de)) return "gpu";
  if (base == 0x01) return "storage";
  return "other";
}

void read_pci(const TopologyOptions& o, HostTopology& t) {
  const std::string dir = o.sys_root + "/bus/pci/devices";
  for (const std::string& id : list_dir(dir)) {
    if (!is_bus_id(id)) continue;
    PciDevice p;
    p.bus_id = id;
    const std::string d = dir + "/" + id + "/";
    std::error_code ec;
    const fs::path real = fs::canonical(dir + "/" + id, ec);
    if (!ec) {
      // .../devices/pci0000:00/0000:00:01.0/0000:01:00.0: the component before is the bridge.
      std::vector<std::string> parts;
      for (const auto& part : real) parts.push_back(part.string());
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        if (starts_with(parts[i], "pci") && parts[i].find(':') != std::string::npos)
          p.root = parts[i];
      }
      if (parts.size() >= 2 && is_bus_id(parts[parts.size() - 2]))
        p.parent = parts[parts.size() - 2];
    }
    p.class_code = static_cast<uint32_t>(topo::read_int(d + "class", 16).value_or(0));
    p.vendor = static_cast<uint16_t>(topo::read_int(d + "vendor", 16).value_or(0));
    p.device = static_cast<uint16_t>(topo::read_int(d + "device", 16).value_or(0));
    p.numa = static_cast<int>(read_int(d + "numa_node").value_or(-1));
    p.link_speed = read_line(d + "current_link_speed").value_or("");
    if (p.link_speed == "Unknown") p.link_speed.clear();
    p.link_width = static_cast<int>(read_int(d + "current_link_width").value_or(0));
    const fs::path drv = fs::read_symlink(d + "driver", ec);
    if (!ec) p.driver = drv.filename();
    p.kind = pci_kind(p.class_code, p.vendor);
    t.pci.push_back(p);
  }
}

void read_net(const TopologyOptions& o, HostTopology& t) {
  const std::string dir = o.sys_root + "/class/net";
  std::map<std::string, std::vector<std::string>> addresses;
  if (o.network_addresses) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) == 0) {
      for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
        if (a->ifa_addr == nullptr) continue;
        char text[INET6_ADDRSTRLEN] = {};
        const int family = a->ifa_addr->sa_family;
        const void* src = nullptr;
        if (family == AF_INET) src = &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
        if (family == AF_INET6) src = &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr;
        if (src != nullptr && inet_ntop(family, src, text, sizeof(text)) != nullptr)
          addresses[a->ifa_name].push_back(text);
      }
      freeifaddrs(list);
    }
  }
  for (const std::string& name : list_dir(dir)) {
    NetInterface n;
    n.name = name;
    const std::string d = dir + "/" + name + "/";
    const int64_t type = read_int(d + "type").value_or(1);
    std::error_code ec;
    const fs::path real = fs::canonical(dir + "/" + name, ec);
    const bool is_virtual = !ec && real.string().find("/virtual/") != std::string::npos;
    const bool peer = read_int(d + "iflink").value_or(0) != read_int(d + "ifindex").value_or(0);
    if (type == 772) {
      n.kind = "loopback";
    } else if (type == 32) {
      n.kind = "infiniband";
    } else if (fs::exists(d + "bridge", ec)) {
      n.kind = "bridge";
    } else if (is_virtual && peer) {
      n.kind = "veth";
    } else if (is_virtual) {
      n.kind = "virtual";
    } else {
      n.kind = "ethernet";
    }
    const std::string state = read_line(d + "operstate").value_or("");
    n.up = state == "up" || (n.kind == "loopback" && state == "unknown");
    const auto speed = read_int(d + "speed");
    n.speed_mbps = speed.has_value() && *speed > 0 ? *speed : -1;
    n.mtu = static_cast<int>(read_int(d + "mtu").value_or(0));
    const fs::path dev = fs::canonical(d + "device", ec);
    if (!ec) {
      // The PCI function behind a virtio interface is the virtio device's parent.
      for (fs::path p = dev; !p.empty() && p != p.root_path(); p = p.parent_path()) {
        if (is_bus_id(p.filename())) {
          n.pci_bus_id = p.filename();
          break;
        }
      }
    }
    for (const PciDevice& p : t.pci)
      if (p.bus_id == n.pci_bus_id) n.numa = p.numa;
    if (auto it = addresses.find(name); it != addresses.end()) n.addresses = it->second;
    t.nics.push_back(n);
  }
}

}  // namespace

std::string host_identity(const std::string& proc_root) {
  if (std::string id = settings::kHostId.get(); !id.empty()) return id;
  std::string name;
  char host[256] = {};
  if (proc_root == "/proc" && gethostname(host, sizeof(host) - 1) == 0) {
    name = host;
  } else {
    name = read_line(proc_root + "/sys/kernel/hostname").value_or("unknown");
  }
  std::string id = name + ":" + read_line(proc_root + "/sys/kernel/random/boot_id").value_or("");
  // The network namespace: processes in two of them (containers, emulated hosts) are two hosts.
  // Not compared with pid 1's: that link is unreadable from inside another namespace.
  std::error_code ec;
  const fs::path net = fs::read_symlink(proc_root + "/self/ns/net", ec);
  if (!ec) id += "/" + net.string();
  return id;
}

HostTopology detect_topology(const TopologyOptions& o) {
  HostTopology t;
  read_proc(o, t);
  read_cpus(o, t);
  read_numa(o, t);
  read_pci(o, t);
  read_net(o, t);
  if (o.gpus) {
    t.gpu_note = topo::read_nvml_gpus(t.gpus);
    for (GpuInfo& g : t.gpus) {
      for (const PciDevice& p : t.pci) {
        // NVML's bus ids have an 8-digit domain ("00000000:1B:00.0"); sysfs has 4, lower case.
        std::string tail = g.bus_id.size() >= 12 ? g.bus_id.substr(g.bus_id.size() - 12) : g.bus_id;
        std::transform(tail.begin(), tail.end(), tail.begin(),
                       [](unsigned char ch) { return std::tolower(ch); });
        if (p.bus_id.substr(p.bus_id.size() - 7) == tail.substr(tail.size() - 7)) g.numa = p.numa;
      }
    }
  } else {
    t.gpu_note = "not asked (TopologyOptions::gpus is off)";
  }
  if (o.measure_bandwidth) {
    t.memory_bandwidth = measure_memory_bandwidth(0);
    t.memory_bandwidth_one_core = measure_memory_bandwidth(1);
  }
  return t;
}

double measure_memory_bandwidth(int threads) {
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // 64 MiB a thread (source and destination each), well past any last-level cache.
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<std::unique_ptr<char[]>> src, dst;
  for (int i = 0; i < threads; ++i) {
    src.emplace_back(new char[kBytes]);
    dst.emplace_back(new char[kBytes]);
    std::memset(src.back().get(), i + 1, kBytes);
    std::memset(dst.back().get(), 0, kBytes);
  }
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] { std::memcpy(dst[i].get(), src[i].get(), kBytes); });
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(kBytes) * threads / s);
  }
  return best;
}

RankPlacement current_placement(const HostTopology& t) {
  RankPlacement r;
  const int cpu = sched_getcpu();
  if (cpu < 0) return r;
  for (const CpuCore& c : t.cores) {
    if (std::find(c.cpus.begin(), c.cpus.end(), cpu) != c.cpus.end()) {
      r.numa = c.numa;
      r.socket = c.socket;
    }
  }
  return r;
}

}  // namespace loom::dist
