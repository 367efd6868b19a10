// The CUDA copy family and the device caching allocator on a real GPU, checked against the CPU
// kernels. Label `cuda`: every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <vector>

#include "loom/cuda.h"
#include "loom/memory/cuda_memory.h"
#include "loom/ops.h"
#include "loom/profiler.h"
#include "loom/tensor.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

TEST(CudaCopy, RoundTripKeepsEveryDtype) {
  REQUIRE_GPU();
  for (DType dt :
       {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    Tensor cpu = arange(0, 1000).to(dt);
    Tensor dev = cpu.to(kCuda);
    EXPECT_EQ(dev.device(), kCuda);
    EXPECT_EQ(dev.dtype(), dt);
    EXPECT_TRUE(equal(dev.to(kCPU), cpu)) << dt;
  }
}

TEST(CudaCopy, CastsOnTheDeviceAsTheCpuDoes) {
  REQUIRE_GPU();
  Tensor src = mul(randn({257, 3}), 100.0);
  for (DType from : {kFloat32, kFloat64, kInt64, kFloat16, kBFloat16, kBool}) {
    for (DType to : {kFloat32, kInt32, kUInt8, kFloat16, kBFloat16, kBool, kFloat64}) {
      Tensor a = src.to(from);
      Tensor want = a.to(to);
      Tensor got = a.to(kCuda).to(to).to(kCPU);
      EXPECT_TRUE(equal(got, want)) << from << " -> " << to;
    }
  }
}

TEST(CudaCopy, StridedAndBroadcastCopies) {
  REQUIRE_GPU();
  Tensor a = randn({64, 48});
  Tensor t = a.t();  // non-contiguous
  EXPECT_TRUE(equal(t.to(kCuda).to(kCPU), t));
  Tensor dev = empty({48, 64}, TensorOptions(kFloat32).with_device(kCuda));
  dev.copy_(t.to(kCuda));  // strided device -> device
  EXPECT_TRUE(equal(dev.to(kCPU), t.contiguous()));
  Tensor row = randn({1, 64});
  Tensor b = empty({48, 64}, TensorOptions(kFloat32).with_device(kCuda));
  b.copy_(row);  // host -> device with broadcast
  EXPECT_TRUE(equal(b.to(kCPU), row.expand({48, 64})));
  Tensor host = empty({64, 48});
  host.t().copy_(dev);  // device -> strided host
  EXPECT_TRUE(equal(host.t(), t));
}

TEST(CudaCopy, FillAndItem) {
  REQUIRE_GPU();
  Tensor z = zeros({1000}, TensorOptions(kFloat32).with_device(kCuda));
  EXPECT_EQ(to_vector<float>(z.to(kCPU)), std::vector<float>(1000, 0.0f));
  Tensor f = full({3, 5}, 2.5, TensorOptions(kFloat64).with_device(kCuda));
  EXPECT_EQ(to_vector<double>(f.to(kCPU)), std::vector<double>(15, 2.5));
  Tensor s = f.select(1, 2);  // strided fill
  s.fill_(-1.0);
  EXPECT_EQ(to_vector<double>(f.to(kCPU).select(1, 2)), std::vector<double>(3, -1.0));
  EXPECT_EQ(f.select(0, 1).select(0, 0).item().to<double>(), 2.5);
}

TEST(CudaAllocator, TensorsComeFromTheCachingAllocator) {
  REQUIRE_GPU();
  memory::CachingAllocator& a = cuda::caching_allocator(0);
  const int64_t before = a.stats().allocated_bytes.current;
  {
    Tensor t = empty({1 << 20}, TensorOptions(kFloat32).with_device(kCuda));
    EXPECT_GE(a.stats().allocated_bytes.current, before + (4 << 20));
  }
  EXPECT_EQ(a.stats().allocated_bytes.current, before);
  const int64_t mallocs = a.stats().num_device_mallocs;
  { Tensor t = empty({1 << 20}, TensorOptions(kFloat32).with_device(kCuda)); }
  EXPECT_EQ(a.stats().num_device_mallocs, mallocs);  // served from the cache
}

TEST(CudaAllocator, PinnedBlocksWaitForTheirStreams) {
  REQUIRE_GPU();
  Allocator* pinned = cuda::pinned_allocator();
  const Stream side = cuda::stream_from_pool(0);
  void* first = nullptr;
  {
    DataPtr p = pinned->allocate(1 << 20);
    first = p.get();
    EXPECT_TRUE(cuda::is_pinned(first));
    cuda::record_stream(p, side);
  }
  // Freed while its stream may still run: pending or (if it passed) cached, never lost.
  const cuda::PinnedStats st = cuda::pinned_stats();
  EXPECT_EQ(st.allocated_bytes, 0);
  side.synchronize();
  DataPtr again = pinned->allocate(1 << 20);
  EXPECT_EQ(again.get(), first);  // reused after its event passed
}

TEST(CudaAllocator, TheProfilerGetsTheDevicesMemoryTrack) {
  REQUIRE_GPU();
  profiler::ProfileOptions o;
  o.profile_memory = true;
  profiler::Profile p(o);
  p.start();
  { Tensor t = empty({1 << 20}, TensorOptions(kFloat32).with_device(kCuda)); }
  p.stop();
  int64_t cuda_allocs = 0;
  for (const profiler::MemorySample& m : p.trace().memory)
    if (m.device == kCuda && m.delta_bytes >= (4 << 20)) ++cuda_allocs;
  EXPECT_EQ(cuda_allocs, 1);
}

TEST(CudaErrors, RuntimeErrorsAreTyped) {
  REQUIRE_GPU();
  EXPECT_THROW(empty({int64_t{1} << 45}, TensorOptions(kFloat32).with_device(kCuda)), Error);
  EXPECT_THROW(cuda::device_properties(cuda::device_count()), ValueError);
  try {
    cuda::throw_error(2, "cudaMalloc(&p, n)", "loom::empty");
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc failed in loom::empty"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom
