// The CUDA DeviceInterface (src/cuda/cuda_runtime.cpp) on a real GPU, checked against the CUDA
// runtime called directly. Label `cuda`: every test skips, saying so, where no GPU is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "loom/build_info.h"
#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/stream.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

TEST(CudaRuntime, CountsAndNamesDevicesAsTheRuntimeDoes) {
  REQUIRE_GPU();
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  DeviceInterface& cuda = device_interface(DeviceType::CUDA);
  EXPECT_EQ(cuda.device_count(), n);
  EXPECT_EQ(cuda::device_count(), n);
  // "cuda" is the current device, so it equals the device with that index.
  EXPECT_EQ(Device("cuda"), Device(DeviceType::CUDA, cuda.current_device()));
  EXPECT_THROW(cuda.set_device(static_cast<DeviceIndex>(n)), ValueError);
}

TEST(CudaRuntime, MemoryInfoMatchesTheRuntime) {
  REQUIRE_GPU();
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  const DeviceMemoryInfo info = device_interface(DeviceType::CUDA).memory_info(0);
  EXPECT_EQ(info.total_bytes, total_b);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_GT(info.free_bytes, 0u);
}

TEST(CudaRuntime, CopiesRoundTripOnASideStreamOrderedByEvents) {
  REQUIRE_GPU();
  const Device gpu(DeviceType::CUDA, 0);
  const size_t n = (1 << 20) + 3;
  std::vector<float> host(n), back(n, -1.0f);
  std::iota(host.begin(), host.end(), 0.5f);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  const Stream side = new_stream(gpu);
  EXPECT_FALSE(side.is_default());
  {
    StreamGuard guard(side);
    EXPECT_EQ(current_stream(gpu), side);
    // host -> a, then a -> b on the side stream (device to device through the same interface).
    copy_bytes(a, gpu, host.data(), Device(DeviceType::CPU), n * sizeof(float),
               /*non_blocking=*/true);
    copy_bytes(b, gpu, a, gpu, n * sizeof(float), /*non_blocking=*/true);
    Event done(DeviceType::CUDA);
    done.record(side);
    EXPECT_TRUE(done.was_recorded());
    done.synchronize();
    EXPECT_TRUE(done.query());
    EXPECT_TRUE(side.query());
  }
  EXPECT_TRUE(current_stream(gpu).is_default());
  // b -> host on the default stream, blocking.
  copy_bytes(back.data(), Device(DeviceType::CPU), b, gpu, n * sizeof(float));
  EXPECT_EQ(back, host);
  cudaFree(a);
  cudaFree(b);
}

TEST(CudaRuntime, AnEventBlocksAnotherStream) {
  REQUIRE_GPU();
  const Device gpu(DeviceType::CUDA, 0);
  const Stream s1 = new_stream(gpu), s2 = new_stream(gpu);
  EXPECT_NE(s1, s2);
  Event e(DeviceType::CUDA);
  e.record(s1);
  e.block(s2);  // s2's later work waits for s1's work so far
  s2.synchronize();
  EXPECT_TRUE(e.query());
  device_interface(DeviceType::CUDA).synchronize_device(0);
}

TEST(CudaRuntime, TheSelfCheckKernelRuns) {
  REQUIRE_GPU();
  EXPECT_EQ(cuda::self_check(), "");
}

}  // namespace
}  // namespace loom
