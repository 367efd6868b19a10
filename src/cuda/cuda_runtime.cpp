// Built when CMake found the CUDA toolkit: whether devices exist, their properties, and CUDA's
// DeviceInterface over the runtime API: the current device, streams (ids from 1, made on demand or
// by the pool; 0 is the legacy default stream), events, copies and memory information. Every
// failing runtime call becomes a DeviceError through throw_error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/scoped_device.h"
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

void graph_capture_begin(const Stream& stream) {
  LOOM_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(raw_stream(stream)),
                                         cudaStreamCaptureModeRelaxed),
                  "cuda graph capture");
}

RecordedGraph graph_capture_end(const Stream& stream) {
  cudaGraph_t graph = nullptr;
  LOOM_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(raw_stream(stream)), &graph),
                  "cuda graph capture");
  RecordedGraph g;
  g.graph = graph;
  cudaGraphGetNodes(graph, nullptr, &g.nodes);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) cudaGraphDestroy(graph);
  LOOM_CUDA_CHECK(e, "cuda graph instantiate");
  g.exec = exec;
  return g;
}

void graph_capture_abort(const Stream& stream) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(static_cast<cudaStream_t>(raw_stream(stream)), &graph) == cudaSuccess &&
      graph != nullptr)
    cudaGraphDestroy(graph);
  cudaGetLastError();
}

void graph_launch(const RecordedGraph& g, const Stream& stream) {
  LOOM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g.exec),
                                  static_cast<cudaStream_t>(raw_stream(stream))),
                  "cuda graph launch");
}

void graph_destroy(RecordedGraph& g) {
  if (g.exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g.exec));
  if (g.graph != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(g.graph));
  g = RecordedGraph();
}

void* graph_copy_node(const RecordedGraph& g, const void* dst) {
  size_t n = g.nodes;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n == 0 ||
      cudaGraphGetNodes(static_cast<cudaGraph_t>(g.graph), nodes.data(), &n) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != cudaGraphNodeTypeMemcpy)
      continue;
    cudaMemcpy3DParms p{};
    if (cudaGraphMemcpyNodeGetParams(nodes[i], &p) == cudaSuccess && p.dstPtr.ptr == dst &&
        p.kind != cudaMemcpyHostToDevice && p.kind != cudaMemcpyHostToHost)
      return nodes[i];
  }
  cudaGetLastError();
  return nullptr;
}

bool graph_set_copy(const RecordedGraph& g, void* node, const void* src) {
  auto exec = static_cast<cudaGraphExec_t>(g.exec);
  auto n = static_cast<cudaGraphNode_t>(node);
  if (src != nullptr) {
    // The recorded copy with its source changed: its kind (cudaMemcpyDefault), sizes and
    // destination stay as recorded.
    cudaMemcpy3DParms p{};
    if (cudaGraphMemcpyNodeGetParams(n, &p) == cudaSuccess) {
      p.srcPtr.ptr = const_cast<void*>(src);
      if (cudaGraphExecMemcpyNodeSetParams(exec, n, &p) == cudaSuccess) {
        LOOM_CUDA_CHECK(cudaGraphNodeSetEnabled(exec, n, 1), "cuda graph: enabling an input copy");
        return true;
      }
    }
    cudaGetLastError();
  }
  LOOM_CUDA_CHECK(cudaGraphNodeSetEnabled(exec, n, 0), "cuda graph: skipping an input copy");
  return src == nullptr;
}

void throw_error(int code, const char* call, const char* context) {
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  const auto e = static_cast<cudaError_t>(code);
  std::string name(call);
  if (auto paren = name.find('('); paren != std::string::npos) name.resize(paren);
  if (e == cudaErrorMemoryAllocation) {
    LOOM_THROW(OutOfMemoryError, "[cuda] ", name, " failed", context ? " in " : "",
               context ? context : "", ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  }
  LOOM_THROW(DeviceError, "[cuda] ", name, " failed", context ? " in " : "", context ? context : "",
             ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw_error(static_cast<int>(e), what, nullptr);
}

using detail::ScopedDevice;

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
  Stream new_stream(DeviceIndex index) override { return create_stream(index, 0); }
  Stream create_stream(DeviceIndex index, int priority) {
    check_index(index);
    ScopedDevice scope(index);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    // Loom's priority 0 is CUDA's least (default) priority; negative ones go towards greatest.
    const int p = std::clamp(least + priority, greatest, least);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, p),
          "cudaStreamCreateWithPriority");
    std::lock_guard<std::mutex> lock(mutex_);
    auto& v = streams_[static_cast<size_t>(index)];
    v.push_back(s);
    return Stream(Device(DeviceType::CUDA, index), static_cast<StreamId>(v.size()));
  }
  Stream pool_stream(DeviceIndex index, bool high) {
    check_index(index);
    Pool& pool = pools_[static_cast<size_t>(index)][high ? 1 : 0];
    std::call_once(pool.once, [&] {
      for (auto& id : pool.ids) id = create_stream(index, high ? -1 : 0).id();
    });
    const uint32_t k = pool.next.fetch_add(1, std::memory_order_relaxed) % kStreamPoolSize;
    return Stream(Device(DeviceType::CUDA, index), pool.ids[k]);
  }
  void* handle(const Stream& s) const { return raw(s); }
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
  void create_timing_event(void** event, DeviceIndex index) override {
    check_index(index);
    ScopedDevice scope(index);
    auto* e = new CudaEvent{nullptr, index};
    cudaError_t r = cudaEventCreateWithFlags(&e->event, cudaEventDefault);
    if (r != cudaSuccess) {
      delete e;
      check(r, "cudaEventCreateWithFlags");
    }
    *event = e;
  }
  double elapsed_ms(void* start, void* end) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<CudaEvent*>(start)->event,
                               static_cast<CudaEvent*>(end)->event),
          "cudaEventElapsedTime");
    return ms;
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

  struct Pool {
    std::once_flag once;
    std::array<StreamId, kStreamPoolSize> ids{};
    std::atomic<uint32_t> next{0};
  };

  const int count_;
  mutable std::mutex mutex_;
  std::vector<std::vector<cudaStream_t>> streams_;  // per device; guarded by mutex_; never freed
  std::vector<std::array<Pool, 2>> pools_{static_cast<size_t>(count_)};  // [device][high]
};

CudaInterface* interface_or_throw() {
  auto* i = static_cast<CudaInterface*>(detail::runtime_interface());
  LOOM_CHECK_AS(NotImplementedError, i != nullptr, "[cuda] no CUDA device is visible");
  return i;
}

}  // namespace

loom::DeviceInterface* detail::runtime_interface() {
  if (!is_available()) return nullptr;
  static CudaInterface instance(device_count());
  return &instance;
}

Stream stream_from_pool(DeviceIndex device, bool high_priority) {
  return interface_or_throw()->pool_stream(device, high_priority);
}

Stream new_stream(DeviceIndex device, int priority) {
  return interface_or_throw()->create_stream(device, priority);
}

void* raw_stream(const Stream& stream) {
  return interface_or_throw()->handle(stream);
}

void* current_raw_stream(DeviceIndex device) {
  return raw_stream(current_stream(Device(DeviceType::CUDA, device)));
}

DeviceProperties device_properties(int device) {
  LOOM_CHECK(device >= 0 && device < device_count(), "[cuda] no device ", device, " (",
             device_count(), " visible)");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  DeviceProperties d;
  d.index = device;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.total_memory = p.totalGlobalMem;
  d.multiprocessors = p.multiProcessorCount;
  d.max_threads_per_block = p.maxThreadsPerBlock;
  d.max_threads_per_multiprocessor = p.maxThreadsPerMultiProcessor;
  d.warp_size = p.warpSize;
  d.shared_memory_per_block = p.sharedMemPerBlockOptin;
  d.l2_cache_bytes = p.l2CacheSize;
  d.memory_bus_width = p.memoryBusWidth;
  int clock = 0;
  if (cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, device) == cudaSuccess)
    d.memory_clock_khz = clock;
  else
    cudaGetLastError();
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess)
    d.pci_bus_id = bus;
  else
    cudaGetLastError();
  return d;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

int runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return v;
}

bool can_access_peer(int device, int peer) {
  if (device == peer || device < 0 || peer < 0 || device >= device_count() ||
      peer >= device_count())
    return false;
  int ok = 0;
  check(cudaDeviceCanAccessPeer(&ok, device, peer), "cudaDeviceCanAccessPeer");
  return ok != 0;
}

namespace {
std::string version_string(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

std::vector<std::string> describe() {
  std::vector<std::string> lines;
  const int n = device_count();
  lines.push_back("driver " + version_string(driver_version()) + ", runtime " +
                  version_string(runtime_version()) + ", " + std::to_string(n) + " device(s)");
  for (int i = 0; i < n; ++i) {
    const DeviceProperties p = device_properties(i);
    lines.push_back("cuda:" + std::to_string(i) + " " + p.name + ", sm_" + std::to_string(p.major) +
                    std::to_string(p.minor) + ", " + std::to_string(p.total_memory >> 20) +
                    " MiB, " + std::to_string(p.multiprocessors) + " SMs, bus " + p.pci_bus_id);
  }
  return lines;
}

}  // namespace loom::cuda
