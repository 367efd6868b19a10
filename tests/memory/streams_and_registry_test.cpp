// Allocators registered per device (type, index) and the caching allocator's streams.
#include <gtest/gtest.h>

#include <vector>

#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/memory.h"
#include "loom/memory/alloc_trace.h"
#include "loom/memory/caching_allocator.h"
#include "loom/stream.h"
#include "loom/tensor.h"
#include "memory/allocator_test_util.h"
#include "test_errors.h"

namespace loom::memory {
namespace {

using namespace loom::memory::testing;
using loom::testing::error_of;

// Host memory labelled as `device`; counts its calls and the stream each allocation was for.
class LabelledAllocator final : public Allocator {
 public:
  explicit LabelledAllocator(Device device) : device_(device) {}
  DataPtr allocate(size_t nbytes) override { return allocate_on(nbytes, current_stream(device_)); }
  DataPtr allocate_on(size_t nbytes, const Stream& stream) override {
    ++calls;
    streams.push_back(stream);
    return DataPtr(storage_, nullptr, nullptr, device_);  // no deleter: the storage is ours
  }
  int calls = 0;
  std::vector<Stream> streams;

 private:
  Device device_;
  char storage_[256] = {};
};

TEST(AllocatorRegistry, PerDeviceTypeAndIndex) {
  LabelledAllocator cuda1(cuda_device(1)), cuda3(cuda_device(3));
  // Each CUDA device starts with its own built-in slot (Note in src/memory/allocator.cpp).
  Allocator* const builtin_cuda = get_allocator(cuda_device(3));
  Allocator* const builtin_cuda2 = get_allocator(cuda_device(2));
  set_allocator(cuda_device(1), &cuda1);
  set_allocator(cuda_device(3), &cuda3);
  EXPECT_EQ(get_allocator(cuda_device(1)), &cuda1);
  EXPECT_EQ(get_allocator(cuda_device(3)), &cuda3);
  EXPECT_EQ(get_allocator(cuda_device(2)), builtin_cuda2);  // no own allocator
  EXPECT_NE(get_allocator(kCPU), &cuda1);
  // Tensors take the allocator of their device.
  Tensor t = empty_tensor({4}, kFloat32, cuda_device(3));
  EXPECT_EQ(cuda3.calls, 1);
  EXPECT_EQ(cuda1.calls, 0);
  EXPECT_EQ(t.device(), cuda_device(3));
  ASSERT_EQ(cuda3.streams.size(), 1u);
  EXPECT_EQ(cuda3.streams[0], default_stream(cuda_device(3)));
  t = Tensor();
  // nullptr restores the built-in one (an error for CUDA in a build or machine without device 3:
  // NotImplementedError without the CUDA backend, ValueError naming the device with it).
  set_allocator(cuda_device(1), nullptr);
  set_allocator(cuda_device(3), nullptr);
  EXPECT_EQ(get_allocator(cuda_device(3)), builtin_cuda);
  if (cuda::device_count() < 4) EXPECT_THROW(empty_tensor({4}, kFloat32, cuda_device(3)), Error);
  // The DeviceType overloads name the canonical device.
  EXPECT_EQ(get_allocator(DeviceType::CPU), get_allocator(kCPU));
  EXPECT_EQ(get_allocator(DeviceType::Meta), get_allocator(Device("meta")));
}

TEST(AllocatorRegistry, StreamlessAllocatorsIgnoreTheStream) {
  Allocator* cpu = get_allocator(kCPU);
  const Stream s = new_stream(kCPU);
  DataPtr p = cpu->allocate_on(1000, s);
  ASSERT_TRUE(p);
  EXPECT_EQ(p.device(), kCPU);
}

TEST(CachingAllocatorStreams, BlocksAreReusedOnlyOnTheirStream) {
  SimulatedDevice dev(GiB, /*backed=*/false, /*auto_complete=*/false);
  CachingAllocator a(dev);
  const Stream s1(kCPU, 1), s2(kCPU, 2);
  void* p = a.allocate(4 * KiB, s1);
  a.free(p);
  EXPECT_NE(a.allocate(4 * KiB, s2), p);  // s1's cached block is not s2's
  void* q = a.allocate(4 * KiB, s1);
  EXPECT_EQ(q, p);
  // q is also used on s2: after free it waits for s2's work before s1 may reuse it.
  a.record_stream(q, s2);
  a.free(q);
  void* r = a.allocate(4 * KiB, s1);
  EXPECT_NE(r, q);
  EXPECT_EQ(a.snapshot().segments.size(), 2u);
  dev.complete(s2);
  void* again = a.allocate(4 * KiB, s1);
  EXPECT_EQ(again, q);  // s2's work has finished: the block is back in s1's pool
  for (const SegmentInfo& seg : a.snapshot().segments) {
    for (const BlockInfo& b : seg.blocks) {
      if (b.allocated) {
        EXPECT_TRUE(b.stream == 1 || b.stream == 2);
      }
    }
  }
}

// Note [Kept streams]: a kept stream's cached segments survive empty_cache and the retry after a
// failed device malloc, until the stream is released as many times as it was kept.
TEST(CachingAllocatorStreams, AKeptStreamKeepsItsCachedMemory) {
  SimulatedDevice dev(8 * MiB);
  CachingAllocator a(dev);
  const Stream kept(kCPU, 1), other(kCPU, 2);
  a.keep_stream(kept);
  a.keep_stream(kept);
  void* p = a.allocate(3 * MiB, kept);
  void* q = a.allocate(3 * MiB, other);
  a.free(p);
  a.free(q);
  a.empty_cache();
  ASSERT_EQ(a.snapshot().segments.size(), 1u);
  EXPECT_EQ(a.snapshot().segments[0].stream, kept.id());
  // Another stream's request cannot take the kept block, nor evict it: out of memory.
  EXPECT_THROW(a.allocate(6 * MiB, other), OutOfMemoryError);
  EXPECT_EQ(a.allocate(3 * MiB, kept), p);  // the stream's own request takes it back
  a.free(p);
  a.release_stream(kept);
  a.empty_cache();
  EXPECT_EQ(a.snapshot().segments.size(), 1u);  // kept once more
  a.release_stream(kept);
  a.empty_cache();
  EXPECT_TRUE(a.snapshot().segments.empty());
  EXPECT_CONTAINS(error_of<ValueError>([&] { a.release_stream(kept); }), "is not kept");
}

TEST(CachingAllocatorStreams, OneAllocatorServesOneDevice) {
  SimulatedDevice dev(GiB);
  CachingAllocator a(dev);
  void* p = a.allocate(KiB, Stream(kCPU, 1));
  EXPECT_CONTAINS(error_of<ValueError>([&] { a.allocate(KiB, Stream(cuda_device(0), 1)); }),
                  "[caching allocator] allocate on cuda:0 stream 1: this allocator serves the "
                  "streams of cpu (simulated device");
  EXPECT_CONTAINS(error_of<ValueError>([&] { a.record_stream(p, Stream(kMeta, 2)); }),
                  "record_stream on meta stream 2");
  a.free(p);
}

TEST(CachingAllocatorStreams, AdapterAllocatesOnTheCurrentStream) {
  SimulatedDevice dev(GiB, /*backed=*/true, /*auto_complete=*/false);
  CachingAllocator a(dev);
  CachingAllocatorAdapter adapter(a, kCPU);
  const Stream side = new_stream(kCPU);
  void* on_default = nullptr;
  {
    DataPtr d = adapter.allocate(4 * KiB);
    on_default = d.get();
  }
  {
    StreamGuard g(side);
    DataPtr d = adapter.allocate(4 * KiB);  // the default stream's cached block is not reused
    EXPECT_NE(d.get(), on_default);
    bool found = false;
    for (const SegmentInfo& seg : a.snapshot().segments) {
      for (const BlockInfo& b : seg.blocks) {
        if (b.allocated) {
          EXPECT_EQ(b.stream, side.id());
          found = true;
        }
      }
    }
    EXPECT_TRUE(found);
  }
  DataPtr back = adapter.allocate(4 * KiB);
  EXPECT_EQ(back.get(), on_default);
  DataPtr explicit_side = adapter.allocate_on(4 * KiB, side);
  EXPECT_NE(explicit_side.get(), on_default);
  EXPECT_THROW(adapter.allocate_on(4 * KiB, Stream(kMeta, 0)), ValueError);
}

TEST(RecordingAllocatorStreams, LogsTheStreamOfEachAllocation) {
  RecordingAllocator rec(*get_allocator(kCPU), "streams");
  const Stream side = new_stream(kCPU);
  {
    DataPtr a = rec.allocate(64);  // the default stream
    StreamGuard g(side);
    DataPtr b = rec.allocate(64);                           // the current stream
    DataPtr c = rec.allocate_on(64, default_stream(kCPU));  // the stream asked for
  }
  std::vector<StreamId> streams;
  for (const AllocEvent& e : rec.trace().events) {
    if (e.op == AllocEvent::Op::Alloc) streams.push_back(e.stream);
  }
  EXPECT_EQ(streams, (std::vector<StreamId>{0, side.id(), 0}));
}

}  // namespace
}  // namespace loom::memory
