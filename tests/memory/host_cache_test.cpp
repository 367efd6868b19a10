// The CPU allocator's large-block cache (Note [Large host blocks]): a freed large block is handed
// out again for the same size, nothing else shares it, its contents are the caller's, and
// empty_host_cache gives everything back.
#include <gtest/gtest.h>

#include <cstring>

#include "loom/memory.h"
#include "loom/ops.h"

namespace loom {
namespace {

TEST(HostCache, LargeBlocksAreReusedAndReleased) {
  empty_host_cache();
  const HostCacheStats s0 = host_cache_stats();
  EXPECT_EQ(s0.cached_bytes, 0u);
  EXPECT_GT(s0.limit_bytes, 0u);
  void* first = nullptr;
  {
    Tensor a = empty({int64_t{4} << 20});  // 16 MiB
    first = a.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (size_t{2} << 20), 0u) << "2 MiB aligned";
    std::memset(first, 0x5a, a.nbytes());
  }
  EXPECT_EQ(host_cache_stats().cached_bytes, size_t{16} << 20);
  {
    // Slightly smaller: the same block; two alive at once: the second is a new one.
    Tensor b = empty({(int64_t{4} << 20) - 1000});
    Tensor c = empty({int64_t{4} << 20});
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_NE(c.data_ptr(), first);
    // A much smaller large request does not take a block 8x its size.
    Tensor d = empty({int64_t{1} << 19});
    EXPECT_NE(d.data_ptr(), first);
    // The contents of a reused block are the new owner's to write: ops on it are right.
    Tensor x = full({(int64_t{4} << 20) - 1000}, 1.5);
    b.copy_(x);
    EXPECT_TRUE(equal(b, x));
  }
  const HostCacheStats s1 = host_cache_stats();
  EXPECT_GT(s1.hits, s0.hits);
  EXPECT_GT(s1.cached_bytes, 0u);
  EXPECT_LE(s1.cached_bytes, s1.limit_bytes);
  empty_host_cache();
  EXPECT_EQ(host_cache_stats().cached_bytes, 0u);
}

TEST(HostCache, TheLimitEvictsTheOldestBlocks) {
  empty_host_cache();
  const size_t limit = host_cache_stats().limit_bytes;
  const int64_t floats = static_cast<int64_t>(limit / 4 / 3) + 1;  // a third of the limit, and more
  { Tensor a = empty({floats}), b = empty({floats}), c = empty({floats}), d = empty({floats}); }
  EXPECT_LE(host_cache_stats().cached_bytes, limit);
  empty_host_cache();
}

}  // namespace
}  // namespace loom
