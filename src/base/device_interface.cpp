// The device-interface registry and the built-in interfaces: CPU, Meta, and the CUDA slot's
// "not available" interface (src/cuda/cuda_runtime.cpp registers a real one when a GPU is visible).
#include "loom/device_interface.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "loom/cuda.h"
#include "loom/error.h"

namespace loom {
namespace {

// CPU and Meta: one device, synchronous streams (work has finished when it returns), so events
// need no handle and every query is true. Streams other than the default are allowed (ids handed
// out by new_stream) so that stream-aware code runs unchanged on the CPU.
class HostLikeInterface : public DeviceInterface {
 public:
  explicit HostLikeInterface(DeviceType type) : type_(type) {}
  DeviceType type() const override { return type_; }
  int device_count() const override { return 1; }
  DeviceIndex current_device() const override { return 0; }
  void set_device(DeviceIndex index) override {
    LOOM_CHECK(index == 0, "[device] ", device_type_name(type_), " has only device 0 but got ",
               static_cast<int>(index));
  }
  Stream new_stream(DeviceIndex index) override {
    set_device(index);
    return Stream(Device(type_, index), next_.fetch_add(1, std::memory_order_relaxed));
  }
  void check_stream(const Stream& s) const override {
    LOOM_CHECK(
        s.device_type() == type_ && s.id() >= 0 && s.id() < next_.load(std::memory_order_relaxed),
        "[stream] ", s, " is not a stream of ", device_type_name(type_),
        " (streams come from new_stream)");
  }
  bool query_stream(const Stream&) override { return true; }
  void synchronize_stream(const Stream&) override {}
  void synchronize_device(DeviceIndex) override {}
  void record_event(void**, const Stream&) override {}
  void block_stream(void*, const Stream&) override {}
  bool query_event(void*) override { return true; }
  void synchronize_event(void*) override {}
  void destroy_event(void*) noexcept override {}

 private:
  DeviceType type_;
  std::atomic<StreamId> next_{1};
};

class CpuInterface final : public HostLikeInterface {
 public:
  CpuInterface() : HostLikeInterface(DeviceType::CPU) {}
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
            const Stream&, bool) override {
    LOOM_CHECK(dst_device.is_cpu() && src_device.is_cpu(), "[cpu] cannot copy ", n, " bytes from ",
               src_device, " to ", dst_device, " (only CPU to CPU here)");
    if (n > 0) std::memmove(dst, src, n);
  }
  DeviceMemoryInfo memory_info(DeviceIndex) override {
    const long page = sysconf(_SC_PAGESIZE);
    const long total = sysconf(_SC_PHYS_PAGES);
    const long avail = sysconf(_SC_AVPHYS_PAGES);
    DeviceMemoryInfo info;
    if (page > 0 && total > 0)
      info.total_bytes = static_cast<size_t>(total) * static_cast<size_t>(page);
    if (page > 0 && avail > 0)
      info.free_bytes = static_cast<size_t>(avail) * static_cast<size_t>(page);
    return info;
  }
};

class MetaInterface final : public HostLikeInterface {
 public:
  MetaInterface() : HostLikeInterface(DeviceType::Meta) {}
  void copy(void*, Device dst_device, const void*, Device src_device, size_t n, const Stream&,
            bool) override {
    LOOM_THROW(NotImplementedError, "[meta] cannot copy ", n, " bytes from ", src_device, " to ",
               dst_device, ": meta tensors have no data");
  }
  DeviceMemoryInfo memory_info(DeviceIndex) override { return {}; }
};

// The CUDA slot until the CUDA backend registers an interface: no devices; anything that needs
// one says why there is none.
class CudaUnavailableInterface final : public DeviceInterface {
 public:
  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return 0; }
  DeviceIndex current_device() const override { return 0; }
  void set_device(DeviceIndex) override { fail("set_device"); }
  Stream new_stream(DeviceIndex) override { fail("new_stream"); }
  void check_stream(const Stream&) const override { fail("streams"); }
  bool query_stream(const Stream&) override { fail("query_stream"); }
  void synchronize_stream(const Stream&) override { fail("synchronize_stream"); }
  void synchronize_device(DeviceIndex) override { fail("synchronize"); }
  void record_event(void**, const Stream&) override { fail("record_event"); }
  void block_stream(void*, const Stream&) override { fail("block_stream"); }
  bool query_event(void*) override { fail("query_event"); }
  void synchronize_event(void*) override { fail("synchronize_event"); }
  void destroy_event(void*) noexcept override {}
  void copy(void*, Device, const void*, Device, size_t, const Stream&, bool) override {
    fail("copy");
  }
  DeviceMemoryInfo memory_info(DeviceIndex) override { fail("memory_info"); }

 private:
  [[noreturn]] static void fail(const char* what) {
    if (cuda::is_built()) {
      LOOM_THROW(NotImplementedError, "[cuda] ", what,
                 ": no CUDA device is visible to this process");
    }
    LOOM_THROW(NotImplementedError, "[cuda] ", what,
               ": CUDA is not available in this build (configure with -DLOOM_CUDA=ON on a machine "
               "with the CUDA toolkit)");
  }
};

CpuInterface g_cpu;
MetaInterface g_meta;
CudaUnavailableInterface g_cuda_unavailable;
DeviceInterface* const g_builtin[kNumDeviceTypes] = {&g_cpu, &g_cuda_unavailable, &g_meta};
std::atomic<DeviceInterface*> g_registered[kNumDeviceTypes] = {};

}  // namespace

DeviceInterface& device_interface(DeviceType type) {
  DeviceInterface* i = g_registered[static_cast<int>(type)].load(std::memory_order_acquire);
  if (i != nullptr) return *i;
  if (type == DeviceType::CUDA) {
    // The CUDA runtime's interface, asked for once (see cuda::detail::runtime_interface).
    static DeviceInterface* const runtime = cuda::detail::runtime_interface();
    if (runtime != nullptr) return *runtime;
  }
  return *g_builtin[static_cast<int>(type)];
}

void register_device_interface(DeviceType type, DeviceInterface* interface) {
  LOOM_CHECK(interface == nullptr || interface->type() == type, "[device] an interface for ",
             device_type_name(interface ? interface->type() : type), " cannot serve ",
             device_type_name(type));
  g_registered[static_cast<int>(type)].store(interface, std::memory_order_release);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
                bool non_blocking) {
  const Device owner = !dst_device.is_cpu() ? dst_device : src_device;
  device_interface(owner.type())
      .copy(dst, dst_device, src, src_device, n, current_stream(owner), non_blocking);
}

namespace detail {
DeviceIndex current_device_index(DeviceType type) {
  if (type != DeviceType::CUDA) return 0;
  return device_interface(type).current_device();
}
}  // namespace detail

void DeviceInterface::create_timing_event(void**, DeviceIndex) {
  LOOM_THROW(NotImplementedError, "[event] timing events are not supported on ",
             device_type_name(type()));
}

double DeviceInterface::elapsed_ms(void*, void*) {
  LOOM_THROW(NotImplementedError, "[event] timing events are not supported on ",
             device_type_name(type()));
}

}  // namespace loom
