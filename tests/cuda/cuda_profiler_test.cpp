// The profiler's GPU timeline on a real GPU (CUPTI): kernels and copies of a few CUDA operations
// appear on device lanes, each linked to the operator that launched it and inside the step that ran
// it, with their device time in the operator table and the step's GPU busy time. Label `cuda`:
// every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "loom/cuda.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "loom/profiler.h"
#include "loom/tensor.h"

namespace loom {
namespace {

using profiler::Event;
using profiler::EventKind;

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);
// The CUPTI and host clocks are matched to well under a microsecond (Note [GPU clock]); a launch
// can also be recorded a little after its operator's end timestamp was taken.
constexpr int64_t kSlackNs = 20'000;

bool has_cuda_kernel(const std::string& op) {
  auto h = Dispatcher::singleton().find(op);
  return h && h->has_kernel(DispatchKey::CUDA);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Runs the operations under test once; returns the host copy of the result.
Tensor run_ops(const Tensor& host, bool with_add) {
  Tensor dev = host.to(kCuda);  // host -> device copy
  Tensor filled = empty({host.numel()}, TensorOptions(kFloat32).with_device(kCuda));
  filled.fill_(3.0);  // a fill kernel
  Tensor copy = empty_like(dev);
  copy.copy_(dev);  // device -> device
  if (with_add) copy = add(copy, filled);
  return copy.to(kCPU);  // device -> host, synchronises
}

struct Linked {
  const Event* device_event;
  const Event* launcher;  // nullptr: not linked
};

std::vector<Linked> device_events(const profiler::Trace& t) {
  std::unordered_map<uint64_t, const Event*> by_id;
  for (const Event& e : t.events) {
    if (e.device < 0 && e.correlation_id != 0) by_id.emplace(e.correlation_id, &e);
  }
  std::vector<Linked> out;
  for (const Event& e : t.events) {
    if (e.device < 0) continue;
    auto it = by_id.find(e.correlation_id);
    out.push_back({&e, it == by_id.end() ? nullptr : it->second});
  }
  return out;
}

TEST(CudaProfiler, KernelsAndCopiesAreLinkedToTheirOperators) {
  REQUIRE_GPU();
  ASSERT_EQ(profiler::gpu_tracing_unavailable_reason(), "");
  const bool with_add = has_cuda_kernel("loom::add");
  Tensor host = arange(0, 1 << 20).to(kFloat32);
  run_ops(host, with_add);  // warm up: context, module loading, allocator segments

  profiler::ProfileOptions o;
  o.gpu = true;
  profiler::Profile p(o);
  p.start();
  Tensor back = run_ops(host, with_add);
  p.step();
  p.stop();
  Tensor want = with_add ? add(host, 3.0) : host;
  EXPECT_TRUE(equal(back, want));

  const profiler::Trace& t = p.trace();
  const Event* step = nullptr;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Step) step = &e;
  }
  ASSERT_NE(step, nullptr);
  const std::vector<Linked> dev = device_events(t);
  ASSERT_FALSE(dev.empty()) << "no device activity was recorded";

  bool fill_kernel = false, htod = false, dtoh = false, add_kernel = false;
  for (const Linked& l : dev) {
    const Event& e = *l.device_event;
    EXPECT_EQ(e.device, 0) << e.name;
    if (e.kind == EventKind::GpuSync) continue;
    ASSERT_NE(l.launcher, nullptr) << e.name << " is linked to no operator";
    const Event& op = *l.launcher;
    // Launched while its operator ran, on the thread that ran it; it ran inside the step.
    EXPECT_GE(e.start_ns + kSlackNs, op.start_ns) << e.name << " / " << op.name;
    EXPECT_GE(e.start_ns + kSlackNs, step->start_ns) << e.name;
    EXPECT_LE(e.end_ns, step->end_ns + kSlackNs) << e.name;
    if (e.kind == EventKind::Kernel && starts_with(op.name, "loom::fill_")) fill_kernel = true;
    if (e.kind == EventKind::Kernel && starts_with(op.name, "loom::add")) add_kernel = true;
    if (e.kind == EventKind::Memcpy && e.name == "Memcpy HtoD") htod = true;
    if (e.kind == EventKind::Memcpy && e.name == "Memcpy DtoH") dtoh = true;
  }
  EXPECT_TRUE(fill_kernel) << "no kernel linked to loom::fill_";
  EXPECT_TRUE(htod);
  EXPECT_TRUE(dtoh);
  if (with_add) {
    EXPECT_TRUE(add_kernel) << "no kernel linked to loom::add";
  }

  // The table gives fill_ its kernel's time; the step counts the device busy.
  bool fill_row = false;
  for (const profiler::OpStats& s : profiler::key_averages(t)) {
    if (starts_with(s.name, "loom::fill_")) {
      fill_row = true;
      EXPECT_GT(s.self_cuda_ns, 0);
      EXPECT_GE(s.cuda_total_ns, s.self_cuda_ns);
    }
  }
  EXPECT_TRUE(fill_row);
  EXPECT_NE(profiler::format_table(profiler::key_averages(t)).find("CUDA total"),
            std::string::npos);
  const auto steps = profiler::step_breakdown(t);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].has_gpu);
  EXPECT_GT(steps[0].gpu_busy_ns, 0);
  EXPECT_EQ(steps[0].gpu_busy_ns + steps[0].gpu_idle_ns, steps[0].duration_ns);
  const std::string json = profiler::chrome_trace_json(t);
  EXPECT_NE(json.find("\"cat\": \"ac2g\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"GPU 0\""), std::string::npos);
}

TEST(CudaProfiler, EveryScheduledCycleTracesTheGpu) {
  REQUIRE_GPU();
  Tensor host = arange(0, 4096).to(kFloat32);
  run_ops(host, false);
  std::vector<size_t> device_counts;
  profiler::ProfileOptions o;
  o.gpu = true;
  o.schedule = profiler::Schedule{0, 1, 1, 2};  // warm up 1, record 1, twice
  o.on_trace_ready = [&](const profiler::Trace& t) {
    device_counts.push_back(device_events(t).size());
  };
  profiler::Profile p(o);
  p.start();
  for (int i = 0; i < 4; ++i) {
    run_ops(host, false);
    p.step();
  }
  p.stop();
  ASSERT_EQ(device_counts.size(), 2u);
  EXPECT_GT(device_counts[0], 0u);
  EXPECT_GT(device_counts[1], 0u);
}

TEST(CudaProfiler, WithoutTheGpuOptionNoDeviceEvents) {
  REQUIRE_GPU();
  Tensor host = arange(0, 4096).to(kFloat32);
  profiler::Profile p;
  p.start();
  run_ops(host, false);
  p.stop();
  EXPECT_TRUE(device_events(p.trace()).empty());
  for (const Event& e : p.trace().events) EXPECT_EQ(e.correlation_id, 0u) << e.name;
}

}  // namespace
}  // namespace loom
