// Memory snapshots as JSON: a round trip that keeps everything, and corrupt or truncated
// documents rejected with a DataError naming the source and the problem.
#include <gtest/gtest.h>

#include <functional>

#include "loom/error.h"
#include "loom/json.h"
#include "loom/memory/caching_allocator.h"
#include "loom/memory/snapshot_json.h"
#include "memory/allocator_test_util.h"
#include "test_errors.h"

namespace loom::memory {
namespace {

using loom::testing::error_of;
using namespace loom::memory::testing;

void expect_same(const Stat& a, const Stat& b) {
  EXPECT_EQ(a.current, b.current);
  EXPECT_EQ(a.peak, b.peak);
  EXPECT_EQ(a.allocated, b.allocated);
  EXPECT_EQ(a.freed, b.freed);
}

void expect_same(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.capacity, b.capacity);
  EXPECT_EQ(a.config, b.config);
  expect_same(a.stats.allocated_bytes, b.stats.allocated_bytes);
  expect_same(a.stats.requested_bytes, b.stats.requested_bytes);
  expect_same(a.stats.reserved_bytes, b.stats.reserved_bytes);
  expect_same(a.stats.active_bytes, b.stats.active_bytes);
  expect_same(a.stats.inactive_split_bytes, b.stats.inactive_split_bytes);
  expect_same(a.stats.allocations, b.stats.allocations);
  expect_same(a.stats.segments, b.stats.segments);
  EXPECT_EQ(a.stats.num_ooms, b.stats.num_ooms);
  EXPECT_EQ(a.stats.num_alloc_retries, b.stats.num_alloc_retries);
  EXPECT_EQ(a.stats.num_device_mallocs, b.stats.num_device_mallocs);
  EXPECT_EQ(a.stats.num_device_frees, b.stats.num_device_frees);
  EXPECT_EQ(a.stats.largest_free_block, b.stats.largest_free_block);
  ASSERT_EQ(a.segments.size(), b.segments.size());
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const SegmentInfo& x = a.segments[i];
    const SegmentInfo& y = b.segments[i];
    EXPECT_EQ(x.address, y.address);
    EXPECT_EQ(x.size, y.size);
    EXPECT_EQ(x.small_pool, y.small_pool);
    EXPECT_EQ(x.stream, y.stream);
    ASSERT_EQ(x.blocks.size(), y.blocks.size());
    for (size_t j = 0; j < x.blocks.size(); ++j) {
      EXPECT_EQ(x.blocks[j].address, y.blocks[j].address);
      EXPECT_EQ(x.blocks[j].size, y.blocks[j].size);
      EXPECT_EQ(x.blocks[j].requested, y.blocks[j].requested);
      EXPECT_EQ(x.blocks[j].allocated, y.blocks[j].allocated);
      EXPECT_EQ(x.blocks[j].pending, y.blocks[j].pending);
      EXPECT_EQ(x.blocks[j].stream, y.blocks[j].stream);
      EXPECT_EQ(x.blocks[j].context, y.blocks[j].context);
    }
  }
  ASSERT_EQ(a.history.size(), b.history.size());
  for (size_t i = 0; i < a.history.size(); ++i) {
    EXPECT_EQ(a.history[i].kind, b.history[i].kind);
    EXPECT_EQ(a.history[i].address, b.history[i].address);
    EXPECT_EQ(a.history[i].size, b.history[i].size);
    EXPECT_EQ(a.history[i].stream, b.history[i].stream);
    EXPECT_EQ(a.history[i].time_ns, b.history[i].time_ns);
    EXPECT_EQ(a.history[i].context, b.history[i].context);
  }
}

// A snapshot with every kind of block and event: allocated, free, pending, two streams, both
// pools, contexts with characters JSON must escape, an OOM.
Snapshot busy_snapshot() {
  SimulatedDevice dev(64 * MiB, false, /*auto_complete=*/false);
  CachingAllocator a(dev);
  int n = 0;
  a.set_context_provider([&n] { return "op \"" + std::to_string(n++) + "\"\n\t\\"; });
  void* p = a.allocate(3000);
  void* q = a.allocate(5 * MiB, on(1));
  void* r = a.allocate(100);
  void* k = a.allocate(KiB);
  a.record_stream(r, on(2));
  a.free(p);
  a.free(r);  // pending
  EXPECT_THROW(a.allocate(60 * MiB), OutOfMemoryError);
  a.free(q);
  void* big = a.allocate(2 * MiB);
  Snapshot s = a.snapshot();
  a.free(k);
  a.free(big);
  dev.complete();
  return s;
}

TEST(MemorySnapshot, JsonRoundTrip) {
  Snapshot s = busy_snapshot();
  ASSERT_GE(s.segments.size(), 2u);
  ASSERT_GE(s.history.size(), 8u);
  bool pending = false, oom = false;
  for (const SegmentInfo& seg : s.segments) {
    for (const BlockInfo& b : seg.blocks) pending |= b.pending;
  }
  for (const TraceEvent& e : s.history) oom |= e.kind == TraceEvent::Kind::Oom;
  EXPECT_TRUE(pending);
  EXPECT_TRUE(oom);

  Json j = to_json(s);
  EXPECT_EQ(j.at("format").as_string(), "loom-memory-snapshot");
  EXPECT_EQ(j.at("version").as_int(), 1);
  EXPECT_EQ(j.at("device").at("name").as_string(), "simulated device (64 MiB)");
  EXPECT_EQ(j.at("stats").at("allocated_bytes").at("current").as_int(),
            s.stats.allocated_bytes.current);
  EXPECT_NEAR(j.at("stats").at("fragmentation").as_double(), s.stats.fragmentation(), 1e-12);
  std::string text = j.dump(1);
  Snapshot back = snapshot_from_json(Json::parse(text, "snapshot.json"), "snapshot.json");
  expect_same(s, back);
  EXPECT_TRUE(to_json(back) == j);

  // An empty allocator's snapshot too.
  SimulatedDevice dev(MiB);
  AllocatorConfig config = AllocatorConfig::policy("gc-0.8");
  CachingAllocator empty(dev, config);
  Snapshot e = empty.snapshot();
  EXPECT_TRUE(e.segments.empty());
  EXPECT_CONTAINS(e.config, "policy=gc-0.8");
  expect_same(e, snapshot_from_json(to_json(e), "empty"));
}

TEST(MemorySnapshot, CorruptDocumentsAreDataErrors) {
  const Json good = to_json(busy_snapshot());
  struct Case {
    const char* what;
    std::function<void(Json&)> corrupt;
    const char* message;
  };
  std::vector<Case> cases = {
      {"not an object", [](Json& j) { j = Json::array(); }, "expected a JSON object but got array"},
      {"wrong format", [](Json& j) { j.set("format", "loom-alloc-trace"); },
       "not a memory snapshot"},
      {"no format",
       [](Json& j) {
         j = Json::object({{"version", 1}});
       },
       "not a memory snapshot"},
      {"future version", [](Json& j) { j.set("version", 2); }, "unsupported version 2"},
      {"no segments",
       [](Json& j) {
         Json copy = Json::object();
         for (auto& [k, v] : j.as_object()) {
           if (k != "segments") copy.set(k, v);
         }
         j = copy;
       },
       "segments"},
      {"negative size", [](Json& j) { j.at("segments").as_array()[0].set("size", -512); },
       "segment 0: 'size' must not be negative but is -512"},
      {"blocks do not cover",
       [](Json& j) {
         Json& seg = j.at("segments").as_array()[0];
         seg.set("size", seg.at("size").as_int() + 512);
       },
       "segment 0: its blocks cover"},
      {"gap between blocks",
       [](Json& j) {
         Json& b = j.at("segments").as_array()[0].at("blocks").as_array()[1];
         b.set("address", b.at("address").as_int() + 512);
       },
       "segment 0: block 1 at"},
      {"wrong block type",
       [](Json& j) {
         j.at("segments").as_array()[0].at("blocks").as_array()[0].set("allocated", 1);
       },
       "segment 0: block 0:"},
      {"unknown event kind", [](Json& j) { j.at("history").as_array()[2].set("kind", "realloc"); },
       "history event 2: unknown event kind 'realloc'"},
      {"bad stat", [](Json& j) { j.at("stats").at("segments").set("peak", "many"); },
       "stats: segments:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Json j = good;
    c.corrupt(j);
    std::string msg = error_of<DataError>([&] { snapshot_from_json(j, "bad.json"); });
    EXPECT_CONTAINS(msg, "[memory snapshot] bad.json: ");
    EXPECT_CONTAINS(msg, c.message);
  }
  // Truncated text never gets as far as a Json value: the parser names the file and offset.
  std::string text = good.dump();
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 3, text.size() - 1}) {
    std::string msg = error_of<DataError>(
        [&] { snapshot_from_json(Json::parse(text.substr(0, cut), "cut.json"), "cut.json"); });
    EXPECT_CONTAINS(msg, "cut.json");
  }
}

}  // namespace
}  // namespace loom::memory
