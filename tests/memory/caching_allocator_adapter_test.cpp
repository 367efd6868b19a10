// CachingAllocatorAdapter: loom tensors allocated through a caching allocator.
#include <gtest/gtest.h>

#include "loom/memory.h"
#include "loom/memory/caching_allocator.h"
#include "loom/ops.h"
#include "loom/tensor.h"
#include "memory/allocator_test_util.h"

namespace loom::memory {
namespace {

using namespace loom::memory::testing;

// Restores the CPU allocator even when a check fails.
struct CpuAllocatorGuard {
  Allocator* previous = get_allocator(DeviceType::CPU);
  ~CpuAllocatorGuard() { set_allocator(DeviceType::CPU, previous); }
};

TEST(CachingAllocatorAdapter, LoomTensorsComeFromTheCachingAllocator) {
  SimulatedDevice dev(GiB, /*backed=*/true);
  CachingAllocator a(dev);
  CachingAllocatorAdapter adapter(a, kCPU);
  {
    CpuAllocatorGuard guard;
    set_allocator(DeviceType::CPU, &adapter);
    Tensor x = loom::rand({64, 64});
    Tensor y = loom::add(x, x);
    MemoryStats s = a.stats();
    EXPECT_GE(s.allocations.current, 2);
    EXPECT_GE(s.requested_bytes.current, static_cast<int64_t>(2 * 64 * 64 * sizeof(float)));
    EXPECT_EQ(addr(x.data_ptr()) % kRoundBytes, 0u);
    const float* px = x.data_ptr<float>();
    const float* py = y.data_ptr<float>();
    for (int i = 0; i < 64 * 64; ++i) ASSERT_EQ(py[i], px[i] + px[i]);
    {
      Tensor z = loom::mul(y, y);  // freed at once: its block is cached and reused below
      EXPECT_EQ(a.stats().allocations.current, s.allocations.current + 1);
    }
    Tensor w = loom::mul(y, y);
    EXPECT_EQ(a.stats().num_device_mallocs, s.num_device_mallocs);
    EXPECT_EQ(adapter.allocate(0).get(), nullptr);
  }
  EXPECT_NE(get_allocator(DeviceType::CPU), &adapter);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocations.current, 0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_GT(s.allocations.allocated, 2);
  // Tensors made now use the previous allocator.
  Tensor t = loom::ones({16});
  EXPECT_EQ(a.stats().allocations.allocated, s.allocations.allocated);
  expect_consistent(a);
}

}  // namespace
}  // namespace loom::memory
