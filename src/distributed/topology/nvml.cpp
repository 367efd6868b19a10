// GPUs and their links through NVML, loaded at run time (Note [Topology] in
// loom/distributed/topology.h): a build needs neither NVML's header nor its library, and a machine
// without an NVIDIA driver answers with a reason instead of an error.
#include <dlfcn.h>

#include <string>

#include "distributed/topology/topology_internal.h"

namespace loom::dist::topo {
namespace {

// The few NVML types used here, as the NVML API reference defines them.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS

struct Nvml {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*capability)(NvmlDevice, int*, int*) = nullptr;
  NvmlReturn (*pcie_gen)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*pcie_width)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*link_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*link_remote)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*link_version)(NvmlDevice, unsigned, unsigned*) = nullptr;

  template <class F>
  bool load(F& f, const char* symbol) {
    f = reinterpret_cast<F>(dlsym(lib, symbol));
    return f != nullptr;
  }
};

}  // namespace

std::string read_nvml_gpus(std::vector<GpuInfo>& gpus) {
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n.lib == nullptr) return "no NVML (libnvidia-ml.so.1 not found: no NVIDIA driver here)";
  const bool ok =
      n.load(n.init, "nvmlInit_v2") && n.load(n.shutdown, "nvmlShutdown") &&
      n.load(n.error_string, "nvmlErrorString") && n.load(n.count, "nvmlDeviceGetCount_v2") &&
      n.load(n.handle, "nvmlDeviceGetHandleByIndex_v2") && n.load(n.name, "nvmlDeviceGetName") &&
      n.load(n.pci, "nvmlDeviceGetPciInfo_v3") && n.load(n.memory, "nvmlDeviceGetMemoryInfo");
  if (!ok) {
    dlclose(n.lib);
    return "NVML is too old (a required function is missing)";
  }
  // Optional: older drivers or GPUs without NVLink leave these out.
  n.load(n.capability, "nvmlDeviceGetCudaComputeCapability");
  n.load(n.pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
  n.load(n.pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
  n.load(n.link_state, "nvmlDeviceGetNvLinkState");
  n.load(n.link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  n.load(n.link_version, "nvmlDeviceGetNvLinkVersion");
  std::string note;
  if (const NvmlReturn r = n.init(); r != 0) {
    note = std::string("NVML did not start: ") + n.error_string(r);
    dlclose(n.lib);
    return note;
  }
  unsigned count = 0;
  if (const NvmlReturn r = n.count(&count); r != 0) {
    note = std::string("NVML could not count devices: ") + n.error_string(r);
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice d = nullptr;
    if (n.handle(i, &d) != 0) continue;
    GpuInfo g;
    g.index = static_cast<int>(i);
    char name[96] = {};
    if (n.name(d, name, sizeof(name)) == 0) g.name = name;
    NvmlPciInfo pci{};
    if (n.pci(d, &pci) == 0) g.bus_id = pci.bus_id;
    NvmlMemory mem{};
    if (n.memory(d, &mem) == 0) g.memory_bytes = static_cast<int64_t>(mem.total);
    if (n.capability) n.capability(d, &g.sm_major, &g.sm_minor);
    unsigned v = 0;
    if (n.pcie_gen && n.pcie_gen(d, &v) == 0) g.pcie_generation = static_cast<int>(v);
    if (n.pcie_width && n.pcie_width(d, &v) == 0) g.pcie_width = static_cast<int>(v);
    for (unsigned l = 0; n.link_state && l < kMaxNvLinks; ++l) {
      int active = 0;
      if (n.link_state(d, l, &active) != 0 || active == 0) continue;
      NvLink link;
      link.link = static_cast<int>(l);
      NvmlPciInfo remote{};
      if (n.link_remote && n.link_remote(d, l, &remote) == 0) link.remote_bus_id = remote.bus_id;
      if (n.link_version && n.link_version(d, l, &v) == 0) link.version = static_cast<int>(v);
      g.nvlinks.push_back(link);
    }
    gpus.push_back(g);
  }
  if (count == 0 && note.empty()) note = "NVML sees no GPU";
  n.shutdown();
  dlclose(n.lib);
  return note;
}

}  // namespace loom::dist::topo
