// Built when CMake found the CUDA toolkit. Kernels come with the CUDA backend; this file answers
// whether devices exist and provides CUDA's DeviceInterface over the runtime API: the current
// device, streams (created on demand, ids from 1; 0 is the legacy default stream), events,
// copies and memory information.
#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/error.h"

namespace loom::cuda {

int device_count() {
  static int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return count;
  }();
  return n;
}

bool is_available() {
  return device_count() > 0;
}
bool is_built() {
  return true;
}

bool host_register(void* p, size_t n) {
  if (!is_available()) return false;
  if (cudaHostRegister(p, n, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

void host_unregister(void* p) {
  if (is_available() && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    LOOM_THROW(Error, "[cuda] ", what, " failed: ", cudaGetErrorString(e));
  }
}

// Sets the device for the scope of a call that needs it (streams and events belong to one).
class ScopedDevice {
 public:
  explicit ScopedDevice(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
  }
  ~ScopedDevice() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
};

struct CudaEvent {
  cudaEvent_t event;
  int device;
};

class CudaInterface final : public DeviceInterface {
 public:
  explicit CudaInterface(int count) : count_(count), streams_(static_cast<size_t>(count)) {}
  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return count_; }
  DeviceIndex current_device() const override {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return static_cast<DeviceIndex>(d);
  }
  void set_device(DeviceIndex index) override {
    check_index(index);
    check(cudaSetDevice(index), "cudaSetDevice");
  }
  Stream new_stream(DeviceIndex index) override {
    check_index(index);
    ScopedDevice scope(index);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    std::lock_guard<std::mutex> lock(mutex_);
    auto& v = streams_[static_cast<size_t>(index)];
    v.push_back(s);
    return Stream(Device(DeviceType::CUDA, index), static_cast<StreamId>(v.size()));
  }
  void check_stream(const Stream& s) const override { (void)raw(s); }
  bool query_stream(const Stream& s) override {
    cudaError_t e = cudaStreamQuery(raw(s));
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(e, "cudaStreamQuery");
    return true;
  }
  void synchronize_stream(const Stream& s) override {
    check(cudaStreamSynchronize(raw(s)), "cudaStreamSynchronize");
  }
  void synchronize_device(DeviceIndex index) override {
    check_index(index);
    ScopedDevice scope(index);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void record_event(void** event, const Stream& s) override {
    ScopedDevice scope(s.device_index());
    if (*event == nullptr) {
      auto* e = new CudaEvent{nullptr, s.device_index()};
      cudaError_t r = cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming);
      if (r != cudaSuccess) {
        delete e;
        check(r, "cudaEventCreateWithFlags");
      }
      *event = e;
    }
    check(cudaEventRecord(static_cast<CudaEvent*>(*event)->event, raw(s)), "cudaEventRecord");
  }
  void block_stream(void* event, const Stream& s) override {
    ScopedDevice scope(s.device_index());
    check(cudaStreamWaitEvent(raw(s), static_cast<CudaEvent*>(event)->event, 0),
          "cudaStreamWaitEvent");
  }
  bool query_event(void* event) override {
    cudaError_t e = cudaEventQuery(static_cast<CudaEvent*>(event)->event);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(e, "cudaEventQuery");
    return true;
  }
  void synchronize_event(void* event) override {
    check(cudaEventSynchronize(static_cast<CudaEvent*>(event)->event), "cudaEventSynchronize");
  }
  void destroy_event(void* event) noexcept override {
    auto* e = static_cast<CudaEvent*>(event);
    cudaEventDestroy(e->event);
    delete e;
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
            const Stream& s, bool non_blocking) override {
    if (n == 0) return;
    // Unified addressing: the runtime tells host from device memory (dst_device and src_device
    // only say which interface was asked).
    ScopedDevice scope(s.device_index());
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, raw(s)), "cudaMemcpyAsync");
    if (!non_blocking) check(cudaStreamSynchronize(raw(s)), "cudaStreamSynchronize");
  }
  DeviceMemoryInfo memory_info(DeviceIndex index) override {
    check_index(index);
    ScopedDevice scope(index);
    size_t free_bytes = 0, total = 0;
    check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
    return {free_bytes, total};
  }

 private:
  void check_index(DeviceIndex index) const {
    LOOM_CHECK(index >= 0 && index < count_, "[cuda] no device ", static_cast<int>(index), " (",
               count_, " visible)");
  }
  cudaStream_t raw(const Stream& s) const {
    LOOM_CHECK(s.device_type() == DeviceType::CUDA, "[cuda] ", s, " is not a CUDA stream");
    check_index(s.device_index());
    if (s.id() == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto& v = streams_[static_cast<size_t>(s.device_index())];
    LOOM_CHECK(s.id() > 0 && static_cast<size_t>(s.id()) <= v.size(), "[cuda] unknown ", s,
               " (streams come from new_stream)");
    return v[static_cast<size_t>(s.id() - 1)];
  }

  const int count_;
  mutable std::mutex mutex_;
  std::vector<std::vector<cudaStream_t>> streams_;  // per device; guarded by mutex_; never freed
};

}  // namespace

loom::DeviceInterface* detail::runtime_interface() {
  if (!is_available()) return nullptr;
  static CudaInterface instance(device_count());
  return &instance;
}

}  // namespace loom::cuda
