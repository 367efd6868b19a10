// warn_once: printed the first time a key is seen, counted after, recorded in order, from many
// threads at once.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "loom/warning.h"

namespace loom {
namespace {

const Warning* find(const std::vector<Warning>& all, const std::string& key) {
  for (const Warning& w : all)
    if (w.key == key) return &w;
  return nullptr;
}

TEST(Warning, PrintedOnceCountedAlways) {
  testing::internal::CaptureStderr();
  warn_once("test.printed", "the first message");
  warn_once("test.printed", "a second message with the same key");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "[loom] warning: the first message\n");
  const std::vector<Warning> all = warnings();
  const Warning* w = find(all, "test.printed");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->message, "the first message");
  EXPECT_EQ(w->count, 2);
}

TEST(Warning, SilencedStillRecordedAndOrderKept) {
  testing::internal::CaptureStderr();
  {
    WarningsToStderr quiet(false);
    warn_once("test.quiet.a", "a");
    warn_once("test.quiet.b", "b");
  }
  warn_once("test.loud", "loud again");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "[loom] warning: loud again\n");
  const std::vector<Warning> all = warnings();
  ASSERT_NE(find(all, "test.quiet.a"), nullptr);
  ASSERT_NE(find(all, "test.quiet.b"), nullptr);
  EXPECT_LT(find(all, "test.quiet.a"), find(all, "test.quiet.b"));
}

TEST(Warning, ManyThreadsOneRecord) {
  WarningsToStderr quiet(false);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) warn_once("test.threads", "from a thread");
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<Warning> all = warnings();
  const Warning* w = find(all, "test.threads");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->count, 8000);
}

}  // namespace
}  // namespace loom
