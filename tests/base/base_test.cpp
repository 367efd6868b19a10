#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/config.h"
#include "loom/error.h"
#include "loom/parallel.h"

namespace loom {
namespace {

const config::IntSetting kTestInt("LOOM_TEST_INT", 5, 1, 10, "a test int");
const config::ChoiceSetting kTestChoice("LOOM_TEST_CHOICE", "auto", {"auto", "tcp", "shm"},
                                        "a test choice");
const config::FlagSetting kTestFlag("LOOM_TEST_FLAG", false, "a test flag");
const config::RealSetting kTestReal("LOOM_TEST_REAL", 2.5, 0.001, 100, "a test real");
const config::StringSetting kTestSecret("LOOM_TEST_SECRET", "", "a test secret", /*secret=*/true);

std::string value_error(void (*fn)()) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no ValueError";
}

// Sets an environment variable for one scope.
struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~Env() { ::unsetenv(name.c_str()); }
};

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
  config::set("LOOM_TEST_KNOB", "");  // removes the override: the environment applies again
  EXPECT_EQ(config::get("LOOM_TEST_KNOB"), "8");
  unsetenv("LOOM_TEST_KNOB");
}

TEST(Config, EverySettingIsListedBeforeItIsRead) {
  // Declared at load time by the layers that own them; nothing in this test binary has read them.
  std::set<std::string> names;
  for (const auto& e : config::list()) names.insert(e.name);
  for (const char* n :
       {"LOOM_NUM_THREADS", "LOOM_GEMM", "LOOM_TRANSPORT", "LOOM_TCP_CHANNELS", "LOOM_STORE_TOKEN",
        "LOOM_FLIGHT_DIR", "LOOM_FASHION_MNIST_DIR", "LOOM_CACHE_DIR", "LOOM_DIST_TIMEOUT"}) {
    EXPECT_TRUE(names.count(n)) << n << " is not declared";
  }
}

TEST(Config, TypedSettingsCheckValuesWhereTheyEnter) {
  EXPECT_EQ(kTestInt.get(), 5);
  EXPECT_EQ(kTestChoice.get(), "auto");
  EXPECT_FALSE(kTestFlag.get());
  EXPECT_DOUBLE_EQ(kTestReal.get(), 2.5);
  {
    Env env("LOOM_TEST_INT", "11");
    EXPECT_EQ(value_error([] { kTestInt.get(); }),
              "[config] LOOM_TEST_INT='11' (from the environment) is not valid: expected an "
              "integer from 1 to "
              "10 (a test int)");
    Env env2("LOOM_TEST_CHOICE", "SHM");  // any case
    EXPECT_EQ(kTestChoice.get(), "shm");
    Env env3("LOOM_TEST_FLAG", "yes");
    EXPECT_TRUE(kTestFlag.get());
    Env env4("LOOM_TEST_REAL", "1e9");
    EXPECT_NE(value_error([] { kTestReal.get(); }).find("expected a number from 0.001 to 100"),
              std::string::npos);
    // list() reports a bad value instead of throwing.
    bool seen = false;
    for (const auto& e : config::list()) {
      if (e.name != "LOOM_TEST_INT") continue;
      seen = true;
      EXPECT_EQ(e.value, "11");
      EXPECT_EQ(e.source, "env");
      EXPECT_EQ(e.error, "expected an integer from 1 to 10");
      EXPECT_EQ(e.type, "int");
    }
    EXPECT_TRUE(seen);
  }
  {
    Env env("LOOM_TEST_INT", "3x");
    EXPECT_NE(value_error([] { kTestInt.get(); }).find("LOOM_TEST_INT='3x'"), std::string::npos);
    Env env2("LOOM_TEST_FLAG", "maybe");
    EXPECT_NE(value_error([] { kTestFlag.get(); }).find("expected a flag"), std::string::npos);
  }
  // The API is checked when it sets, and wins over the environment.
  EXPECT_EQ(value_error([] { config::set("LOOM_TEST_CHOICE", "udp"); }),
            "[config] LOOM_TEST_CHOICE='udp' (set through config::set) is not valid: expected one "
            "of auto, "
            "tcp, shm (a test choice)");
  {
    Env env("LOOM_TEST_INT", "7");
    config::set("LOOM_TEST_INT", "9");
    EXPECT_EQ(kTestInt.get(), 9);
    EXPECT_TRUE(kTestInt.is_set());
    config::set("LOOM_TEST_INT", "");
    EXPECT_EQ(kTestInt.get(), 7);
  }
  EXPECT_FALSE(kTestInt.is_set());
}

TEST(Config, SecretsAreNeverShown) {
  Env env("LOOM_TEST_SECRET", "hunter2");
  EXPECT_EQ(kTestSecret.get(), "hunter2");
  for (const auto& e : config::list()) {
    if (e.name == "LOOM_TEST_SECRET") {
      EXPECT_EQ(e.value, "(set)");
    }
  }
}

TEST(ThreadName, NamedWhileAliveForgottenAfter) {
  uint64_t tid = 0;
  std::string seen;
  std::thread t([&] {
    set_thread_name("loader worker 12");
    tid = static_cast<uint64_t>(::gettid());
    seen = thread_name_of(tid);
  });
  t.join();
  EXPECT_EQ(seen, "loader worker 12");
  EXPECT_EQ(thread_name_of(tid), "");  // the thread is gone
}

}  // namespace
}  // namespace loom
