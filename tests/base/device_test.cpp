// Devices, streams, events, guards and device interfaces (loom/device.h, stream.h,
// device_interface.h).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "loom/cuda.h"
#include "loom/device.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "loom/stream.h"
#include "test_errors.h"

namespace loom {
namespace {

using testing::error_of;

// A CUDA interface for tests: `count` devices, a per-thread current device, any number of streams
// (synchronous, like the CPU's), events that are ids.
class FakeCudaInterface final : public DeviceInterface {
 public:
  explicit FakeCudaInterface(int count) : count_(count) {}
  DeviceType type() const override { return DeviceType::CUDA; }
  int device_count() const override { return count_; }
  DeviceIndex current_device() const override { return current_; }
  void set_device(DeviceIndex index) override {
    LOOM_CHECK(index >= 0 && index < count_, "[fake cuda] no device ", static_cast<int>(index));
    current_ = index;
    ++set_device_calls;
  }
  Stream new_stream(DeviceIndex index) override {
    return Stream(Device(DeviceType::CUDA, index), next_++);
  }
  void check_stream(const Stream& s) const override {
    LOOM_CHECK(s.id() < next_, "[fake cuda] unknown ", s);
  }
  bool query_stream(const Stream&) override { return true; }
  void synchronize_stream(const Stream&) override { ++synchronize_calls; }
  void synchronize_device(DeviceIndex) override {}
  void record_event(void** event, const Stream&) override {
    if (*event == nullptr) *event = new int(0);
    ++*static_cast<int*>(*event);
  }
  void block_stream(void*, const Stream&) override { ++block_calls; }
  bool query_event(void*) override { return true; }
  void synchronize_event(void*) override {}
  void destroy_event(void* event) noexcept override {
    delete static_cast<int*>(event);
    ++destroyed;
  }
  void copy(void* dst, Device, const void* src, Device, size_t n, const Stream& stream,
            bool) override {
    std::memcpy(dst, src, n);
    last_copy_stream = stream;
  }
  DeviceMemoryInfo memory_info(DeviceIndex) override { return {1, 2}; }

  std::atomic<int> set_device_calls{0}, synchronize_calls{0}, block_calls{0}, destroyed{0};
  Stream last_copy_stream;

 private:
  int count_;
  std::atomic<StreamId> next_{1};
  static thread_local DeviceIndex current_;
};
thread_local DeviceIndex FakeCudaInterface::current_ = 0;

// Registers a FakeCudaInterface for the test's duration.
class FakeCuda : public ::testing::Test {
 protected:
  void SetUp() override { register_device_interface(DeviceType::CUDA, &fake_); }
  void TearDown() override { register_device_interface(DeviceType::CUDA, nullptr); }
  FakeCudaInterface fake_{4};
};

TEST(Device, CanonicalForms) {
  // CPU and Meta have one device, index 0, however they are named.
  EXPECT_EQ(Device(DeviceType::CPU).index(), 0);
  EXPECT_EQ(Device(DeviceType::CPU, -1), Device(DeviceType::CPU, 0));
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("meta"), kMeta);
  EXPECT_NE(kCPU, kMeta);
  EXPECT_EQ(kCPU.str(), "cpu");
  // "cuda" is the current CUDA device (0 here, with no CUDA interface registered).
  EXPECT_EQ(Device("cuda"), Device("cuda:0"));
  EXPECT_EQ(Device(DeviceType::CUDA), cuda_device(0));
  EXPECT_EQ(Device(DeviceType::CUDA).index(), 0);
  EXPECT_NE(Device("cuda:1"), Device("cuda:0"));
  EXPECT_EQ(Device("cuda:3").str(), "cuda:3");
  std::ostringstream os;
  os << Device("cuda");
  EXPECT_EQ(os.str(), "cuda:0");
  static_assert(Device(DeviceType::CPU, -1) == Device(DeviceType::CPU, 0));
}

TEST(Device, BadIndicesAndNames) {
  EXPECT_CONTAINS(error_of<ValueError>([] { Device(DeviceType::CPU, 1); }), "only index 0");
  EXPECT_CONTAINS(error_of<ValueError>([] { Device(DeviceType::CUDA, -2); }), "got -2");
  EXPECT_CONTAINS(error_of<ValueError>([] { Device(DeviceType::CUDA, kMaxDeviceIndex); }),
                  "cuda device index");
  EXPECT_CONTAINS(error_of<ValueError>([] { Device("cpu:1"); }), "only cuda devices take an index");
  EXPECT_CONTAINS(error_of<ValueError>([] { Device("cuda:x"); }), "bad device index in 'cuda:x'");
  EXPECT_CONTAINS(error_of<ValueError>([] { Device("tpu"); }), "unknown device 'tpu'");
}

TEST_F(FakeCuda, CudaMeansTheCurrentDevice) {
  DeviceGuard g(cuda_device(2));
  EXPECT_EQ(Device("cuda"), cuda_device(2));
  EXPECT_EQ(Device(DeviceType::CUDA), Device("cuda:2"));
  EXPECT_EQ(Device(DeviceType::CUDA).str(), "cuda:2");
  // Resolved at construction: a Device keeps naming the device it meant.
  const Device d("cuda");
  {
    DeviceGuard inner(cuda_device(1));
    EXPECT_EQ(d, cuda_device(2));
    EXPECT_EQ(Device("cuda"), cuda_device(1));
  }
}

TEST_F(FakeCuda, DeviceGuardsNestAndRestore) {
  EXPECT_EQ(fake_.current_device(), 0);
  {
    DeviceGuard a(cuda_device(1));
    EXPECT_EQ(a.original_device(), cuda_device(0));
    EXPECT_EQ(fake_.current_device(), 1);
    {
      DeviceGuard b(cuda_device(3));
      EXPECT_EQ(b.original_device(), cuda_device(1));
      EXPECT_EQ(fake_.current_device(), 3);
      DeviceGuard same(cuda_device(3));  // already current: no call
      EXPECT_EQ(fake_.set_device_calls, 2);
    }
    EXPECT_EQ(fake_.current_device(), 1);
  }
  EXPECT_EQ(fake_.current_device(), 0);
  EXPECT_THROW(DeviceGuard(cuda_device(7)), ValueError);
  EXPECT_EQ(fake_.current_device(), 0);
  // The CPU guard is a no-op.
  DeviceGuard cpu(kCPU);
  EXPECT_EQ(cpu.current_device(), kCPU);
}

TEST_F(FakeCuda, StreamGuardsSetStreamAndDevice) {
  const Stream s1 = new_stream(cuda_device(1));
  const Stream s2 = new_stream(cuda_device(1));
  const Stream t = new_stream(cuda_device(2));
  EXPECT_EQ(current_stream(cuda_device(1)), default_stream(cuda_device(1)));
  {
    StreamGuard g(s1);
    EXPECT_EQ(fake_.current_device(), 1);
    EXPECT_EQ(current_stream(cuda_device(1)), s1);
    EXPECT_EQ(current_stream(Device("cuda")), s1);
    {
      StreamGuard h(t);  // another device: both current streams are kept per device
      EXPECT_EQ(fake_.current_device(), 2);
      EXPECT_EQ(current_stream(cuda_device(2)), t);
      EXPECT_EQ(current_stream(cuda_device(1)), s1);
      StreamGuard k(s2);
      EXPECT_EQ(current_stream(cuda_device(1)), s2);
    }
    EXPECT_EQ(fake_.current_device(), 1);
    EXPECT_EQ(current_stream(cuda_device(1)), s1);
    EXPECT_EQ(current_stream(cuda_device(2)), default_stream(cuda_device(2)));
  }
  EXPECT_EQ(fake_.current_device(), 0);
  EXPECT_EQ(current_stream(cuda_device(1)), default_stream(cuda_device(1)));
  // Copies go through the interface of the device side, on its current stream.
  float src[3] = {1, 2, 3}, dst[3] = {};
  {
    StreamGuard g(s2);
    copy_bytes(dst, kCPU, src, cuda_device(1), sizeof(src));
  }
  EXPECT_EQ(fake_.last_copy_stream, s2);
  EXPECT_EQ(dst[2], 3.0f);
  EXPECT_THROW(set_current_stream(Stream(cuda_device(0), 999)), ValueError);
}

TEST(Stream, CurrentStreamIsPerThread) {
  const Stream mine = new_stream(kCPU);
  ASSERT_NE(mine, default_stream(kCPU));
  StreamGuard g(mine);
  EXPECT_EQ(current_stream(kCPU), mine);
  Stream seen;
  Stream seen_inside;
  const Stream theirs = new_stream(kCPU);
  std::thread t([&] {
    seen = current_stream(kCPU);  // a new thread starts on the default stream
    StreamGuard h(theirs);
    seen_inside = current_stream(kCPU);
  });
  t.join();
  EXPECT_EQ(seen, default_stream(kCPU));
  EXPECT_EQ(seen_inside, theirs);
  EXPECT_EQ(current_stream(kCPU), mine);  // untouched by the other thread
}

TEST(Stream, ValuesAndText) {
  const Stream s(kCPU, 0);
  EXPECT_EQ(s, Stream());
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(Stream(cuda_device(1), 3).str(), "cuda:1 stream 3");
  EXPECT_NE(Stream(cuda_device(1), 3), Stream(cuda_device(0), 3));
  EXPECT_NE(Stream(kCPU, 1), Stream(kCPU, 2));
  EXPECT_THROW(set_current_stream(Stream(kCPU, 1 << 30)), ValueError);  // never handed out
}

TEST(Event, CpuEventsHaveFinishedAtOnce) {
  Event e;
  EXPECT_FALSE(e.was_recorded());
  EXPECT_TRUE(e.query());
  const Stream s = new_stream(kCPU);
  e.record(s);
  EXPECT_TRUE(e.was_recorded());
  EXPECT_TRUE(e.query());
  e.synchronize();
  e.block(default_stream(kCPU));
  EXPECT_TRUE(s.query());
  s.synchronize();
  Event moved(std::move(e));
  EXPECT_TRUE(moved.was_recorded());
  EXPECT_FALSE(e.was_recorded());  // NOLINT(bugprone-use-after-move): moved-from is reset
  EXPECT_CONTAINS(error_of<ValueError>([&] { moved.record(Stream(kMeta, 0)); }),
                  "cannot be recorded on meta");
}

TEST_F(FakeCuda, EventsUseTheirInterface) {
  {
    Event e(DeviceType::CUDA);
    const Stream s = new_stream(cuda_device(1));
    e.record(s);
    e.record(s);
    EXPECT_EQ(e.device(), cuda_device(1));
    e.block(new_stream(cuda_device(1)));
    EXPECT_EQ(fake_.block_calls, 1);
    EXPECT_CONTAINS(error_of<ValueError>([&] { e.record(new_stream(cuda_device(2))); }),
                    "an event created on cuda:1 cannot be recorded on cuda:2");
    Event other(DeviceType::CUDA);
    other = std::move(e);  // the handle moves; only one destroy
  }
  EXPECT_EQ(fake_.destroyed, 1);
}

TEST(DeviceInterface, CpuCopiesSynchronizeAndMemoryInfo) {
  DeviceInterface& cpu = device_interface(DeviceType::CPU);
  EXPECT_EQ(cpu.type(), DeviceType::CPU);
  EXPECT_EQ(cpu.device_count(), 1);
  std::vector<int> src = {1, 2, 3, 4}, dst(4, 0);
  cpu.copy(dst.data(), kCPU, src.data(), kCPU, sizeof(int) * 4, default_stream(kCPU), false);
  EXPECT_EQ(dst, src);
  std::vector<int> more(4, 0);
  copy_bytes(more.data(), kCPU, src.data(), kCPU, sizeof(int) * 4);
  EXPECT_EQ(more, src);
  cpu.synchronize_device(0);
  cpu.synchronize_stream(default_stream(kCPU));
  EXPECT_TRUE(cpu.query_stream(default_stream(kCPU)));
  const DeviceMemoryInfo info = cpu.memory_info(0);
  EXPECT_GT(info.total_bytes, size_t{1} << 20);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    cpu.copy(dst.data(), kCPU, src.data(), kMeta, 4, default_stream(kCPU), false);
                  }),
                  "[cpu] cannot copy 4 bytes from meta to cpu");
  EXPECT_CONTAINS(error_of<ValueError>([&] { cpu.set_device(1); }), "cpu has only device 0");
  EXPECT_THROW(copy_bytes(dst.data(), kMeta, src.data(), kCPU, 4), NotImplementedError);
}

TEST(DeviceInterface, CudaSlotWithoutADeviceSaysSo) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  DeviceInterface& cuda = device_interface(DeviceType::CUDA);
  EXPECT_EQ(cuda.device_count(), 0);
  EXPECT_EQ(cuda.current_device(), 0);
  const std::string msg = error_of<NotImplementedError>([] { new_stream(cuda_device(0)); });
  EXPECT_CONTAINS(msg, "[cuda] new_stream");
  EXPECT_CONTAINS(msg,
                  cuda::is_built() ? "no CUDA device is visible" : "not available in this build");
  EXPECT_THROW(DeviceGuard(cuda_device(1)), NotImplementedError);
  EXPECT_THROW(cuda.memory_info(0), NotImplementedError);
  float x = 0;
  EXPECT_THROW(copy_bytes(&x, cuda_device(0), &x, kCPU, 4), NotImplementedError);
}

TEST(DeviceInterface, RegistrationChecksTheType) {
  FakeCudaInterface fake(1);
  EXPECT_THROW(register_device_interface(DeviceType::CPU, &fake), ValueError);
  EXPECT_EQ(&device_interface(DeviceType::CPU), &device_interface(DeviceType::CPU));
  EXPECT_EQ(device_interface(DeviceType::CPU).type(), DeviceType::CPU);
}

}  // namespace
}  // namespace loom
