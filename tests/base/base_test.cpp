#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "loom/config.h"
#include "loom/error.h"
#include "loom/parallel.h"

namespace loom {
namespace {

TEST(Error, ChecksThrowTypedErrorsWithMessages) {
  try {
    LOOM_CHECK(1 == 2, "[op] expected ", 1, " but got ", 2);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "[op] expected 1 but got 2");
    EXPECT_STREQ(e.kind(), "ValueError");
  }
  EXPECT_THROW(LOOM_CHECK_TYPE(false, "x"), TypeError);
  EXPECT_THROW(LOOM_CHECK_INDEX(false, "x"), IndexError);
  EXPECT_THROW(LOOM_INTERNAL_ASSERT(false, "bug"), InternalError);
  // Every typed error is a loom::Error.
  EXPECT_THROW(LOOM_THROW(DataError, "bad"), Error);
}

TEST(Parallel, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(10007);
    parallel_for(0, 10007, 100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  set_num_threads(2);
}

TEST(Parallel, NestedRunsSeriallyAndExceptionsPropagate) {
  set_num_threads(2);
  std::atomic<int> total{0};
  parallel_for(0, 4, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    parallel_for(0, 100, 1, [&](int64_t b2, int64_t e2) { total += static_cast<int>(e2 - b2); });
    (void)b;
    (void)e;
  });
  EXPECT_EQ(total.load() % 100, 0);
  EXPECT_FALSE(in_parallel_region());
  EXPECT_THROW(parallel_for(0, 1000, 1,
                            [&](int64_t b, int64_t) {
                              if (b > 0) throw ValueError("[test] chunk failed");
                            }),
               ValueError);
  // The pool still works after an exception.
  std::atomic<int64_t> sum{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
  EXPECT_THROW(set_num_threads(0), ValueError);
}

TEST(Config, ApiOverridesEnvironmentAndDefault) {
  config::declare("LOOM_TEST_KNOB", "7", "a test knob");
  EXPECT_EQ(config::get("LOOM_TEST_KNOB"), "7");
  setenv("LOOM_TEST_KNOB", "8", 1);
  EXPECT_EQ(config::get_int("LOOM_TEST_KNOB", 0), 8);
  config::set("LOOM_TEST_KNOB", "9");
  EXPECT_EQ(config::get_int("LOOM_TEST_KNOB", 0), 9);
  bool listed = false;
  for (const auto& e : config::list()) {
    if (e.name == "LOOM_TEST_KNOB") {
      listed = true;
      EXPECT_EQ(e.source, "api");
    }
  }
  EXPECT_TRUE(listed);
  config::set("LOOM_TEST_KNOB", "x");
  EXPECT_THROW(config::get_int("LOOM_TEST_KNOB", 0), ValueError);
}

}  // namespace
}  // namespace loom
