// The loader's device stage on a real GPU: batches arrive on the device with the host's values, in
// order, and a host buffer is never reused while a copy still reads it (the race test). Label
// `cuda`: every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "loom/cuda.h"
#include "loom/data/loader.h"
#include "loom/data/staging.h"
#include "loom/memory/caching_allocator.h"
#include "loom/memory/cuda_memory.h"
#include "loom/ops.h"
#include "loom/stream.h"
#include "loom/tensor.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);
constexpr int64_t kFloats = int64_t{4} << 20;  // 16 MiB per batch

// A source of `n` batches, batch k filled with the value k, each in a buffer of a small pinned pool
// that the source reuses as soon as it comes back.
data::DeviceStage::Source counting_source(std::shared_ptr<data::HostBufferPool> pool, int n,
                                          int* made) {
  return [pool, n, made]() -> std::optional<data::Batch> {
    if (*made == n) return std::nullopt;
    const int k = (*made)++;
    DataPtr buf = pool->acquire();
    float* p = static_cast<float*>(buf.get());
    for (int64_t i = 0; i < kFloats; ++i) p[i] = static_cast<float>(k);
    Storage st = make_intrusive<StorageImpl>(std::move(buf), pool->buffer_bytes(), nullptr);
    data::Batch b;
    b.names = {"x"};
    b.fields = {make_tensor(st, kFloat32, {kFloats}, {1}, 0)};
    b.ids = {k};
    b.index = k;
    return b;
  };
}

// Queues `bytes` of device-to-device copies on every stream of the pool, so that the stage's copies
// wait behind them: a stage that let its host buffers go before its copies ran would then copy
// buffers the source had already refilled.
std::vector<Tensor> stall_pool_streams(int64_t bytes) {
  std::vector<Tensor> keep;
  Tensor a = empty({bytes / 4}, TensorOptions(kFloat32).with_device(kCuda));
  Tensor b = empty({bytes / 4}, TensorOptions(kFloat32).with_device(kCuda));
  for (int i = 0; i < 2 * cuda::kStreamPoolSize; ++i) {
    StreamGuard g(cuda::stream_from_pool(0));
    for (int r = 0; r < 4; ++r) b.copy_(a);
  }
  keep.push_back(a);
  keep.push_back(b);
  return keep;
}

TEST(CudaDeviceStage, BatchesArriveInOrderWithTheHostValues) {
  REQUIRE_GPU();
  auto pool = data::HostBufferPool::create(kFloats * 4, 2, /*pin=*/true);
  int made = 0;
  data::DeviceStage stage(counting_source(pool, 12, &made), kCuda);
  int k = 0;
  while (auto b = stage.next()) {
    ASSERT_TRUE(b->fields[0].is_cuda());
    Tensor host = b->fields[0].to(kCPU);
    const float* p = static_cast<const float*>(host.data_ptr());
    EXPECT_EQ(p[0], static_cast<float>(k));
    EXPECT_EQ(p[kFloats - 1], static_cast<float>(k));
    EXPECT_EQ(b->index, k);
    ++k;
  }
  EXPECT_EQ(k, 12);
  const data::DeviceStageMetrics m = stage.metrics();
  EXPECT_EQ(m.batches, 12);
  EXPECT_EQ(m.bytes, static_cast<uint64_t>(12 * kFloats * 4));
  EXPECT_TRUE(m.pinned);
  EXPECT_GT(m.copy_gbps(), 1.0);
}

TEST(CudaDeviceStage, HostBuffersAreNotReusedWhileACopyReadsThem) {
  REQUIRE_GPU();
  auto pool = data::HostBufferPool::create(kFloats * 4, 1, /*pin=*/true);
  int made = 0;
  std::vector<Tensor> stall = stall_pool_streams(int64_t{1} << 30);
  data::DeviceStage stage(counting_source(pool, 8, &made), kCuda, /*depth=*/3);
  std::vector<Tensor> got;
  while (auto b = stage.next()) got.push_back(b->fields[0]);  // no host sync between batches
  ASSERT_EQ(got.size(), 8u);
  for (size_t k = 0; k < got.size(); ++k) {
    Tensor host = got[k].to(kCPU);
    const float* p = static_cast<const float*>(host.data_ptr());
    EXPECT_EQ(p[0], static_cast<float>(k)) << "batch " << k;
    EXPECT_EQ(p[kFloats / 2], static_cast<float>(k)) << "batch " << k;
  }
  // The pool had to allocate more buffers than it keeps: the stage held them until their copies
  // were done.
  EXPECT_GT(pool->stats().allocated, 1);
}

// The device memory of a batch belongs to the consumer's stream (Note [device stage]): a batch
// the consumer drops is reused for a later copy only after the consumer's work queued on it has
// run, and a second stage reuses the first one's memory instead of allocating.
TEST(CudaDeviceStage, MemoryDroppedByTheConsumerIsReusedOnlyAfterItsWork) {
  REQUIRE_GPU();
  auto pool = data::HostBufferPool::create(kFloats * 4, 4, /*pin=*/true);
  int made = 0;
  Tensor slow = rand({int64_t{1} << 26}, TensorOptions(kFloat32).with_device(kCuda));
  std::vector<Tensor> read;
  {
    data::DeviceStage stage(counting_source(pool, 10, &made), kCuda, /*depth=*/2);
    while (auto b = stage.next()) {
      // Slow work on the consumer stream, then a read of the batch, then the batch is dropped
      // while that work is still queued: the next copies must not land in its memory before.
      for (int i = 0; i < 8; ++i) slow.mul_(1.0);
      // (small results, so that they do not take the large blocks the batches cycle through)
      read.push_back(stack({amin(b->fields[0], {0}), amax(b->fields[0], {0})}));
    }
  }
  ASSERT_EQ(read.size(), 10u);
  for (size_t k = 0; k < read.size(); ++k) {
    const Tensor host = read[k].to(kCPU);
    const float* p = static_cast<const float*>(host.data_ptr());
    EXPECT_EQ(p[0], static_cast<float>(k)) << "smallest value of batch " << k;
    EXPECT_EQ(p[1], static_cast<float>(k)) << "largest value of batch " << k;
  }
  current_stream(kCuda).synchronize();
  const int64_t mallocs = cuda::caching_allocator(0).stats().num_device_mallocs;
  made = 0;
  {
    data::DeviceStage stage(counting_source(pool, 10, &made), kCuda, /*depth=*/2);
    while (auto b = stage.next()) {
    }
  }
  EXPECT_EQ(cuda::caching_allocator(0).stats().num_device_mallocs, mallocs)
      << "a second stage allocated device memory instead of reusing the first one's";
}

}  // namespace
}  // namespace loom
