// Store semantics: every Store (HashStore, FileStore, PrefixStore, TCPStore) against a reference
// model, timeouts and their messages, LOOM_DIST_TIMEOUT, and FileStore across fork()ed processes.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "distributed/store_test_util.h"
#include "loom/distributed/store.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::error_of;
using namespace std::chrono_literals;

// ---- default_timeout
// ------------------------------------------------------------------------------

TEST(StoreTimeout, DefaultTimeoutFromEnvironment) {
  {
    testing::ScopedEnv env{{"LOOM_DIST_TIMEOUT", std::nullopt}};
    EXPECT_EQ(default_timeout(), Duration(300000));
  }
  {
    testing::ScopedEnv env{{"LOOM_DIST_TIMEOUT", "2.5"}};
    EXPECT_EQ(default_timeout(), Duration(2500));
    EXPECT_EQ(HashStore().timeout(), Duration(2500));
  }
  {
    testing::ScopedEnv env{{"LOOM_DIST_TIMEOUT", "abc"}};
    EXPECT_CONTAINS(
        error_of<ValueError>([] { default_timeout(); }),
        "[config] LOOM_DIST_TIMEOUT='abc' (from the environment) is not valid: expected a "
        "number from 0.001 to 100000000");
  }
  {
    testing::ScopedEnv env{{"LOOM_DIST_TIMEOUT", "-1"}};
    EXPECT_CONTAINS(error_of<ValueError>([] { default_timeout(); }),
                    "[config] LOOM_DIST_TIMEOUT='-1' (from the environment) is not valid");
  }
}

// ---- every store against a reference model
// --------------------------------------------------------

struct StoreKind {
  const char* name;
  // Makes a fresh, empty store; `where` receives the text timeouts name it by.
  std::function<std::shared_ptr<Store>(const std::string& dir, std::string* where)> make;
};

std::shared_ptr<Store> make_tcp(std::string* where) {
  TCPStoreOptions o;
  o.port = 0;
  o.is_server = true;
  o.timeout = 2000ms;
  auto s = std::make_shared<TCPStore>(o);
  *where = "server 127.0.0.1:" + std::to_string(s->port());
  return s;
}

const StoreKind kKinds[] = {
    {"Hash",
     [](const std::string&, std::string* where) {
       *where = "HashStore";
       return std::make_shared<HashStore>();
     }},
    {"File",
     [](const std::string& dir, std::string* where) {
       *where = "file " + dir + "/store";
       return std::make_shared<FileStore>(dir + "/store");
     }},
    {"PrefixOverHash",
     [](const std::string&, std::string* where) {
       *where = "HashStore";
       return std::make_shared<PrefixStore>("pg", std::make_shared<HashStore>());
     }},
    {"TCP", [](const std::string&, std::string* where) { return make_tcp(where); }},
    {"PrefixOverTCP",
     [](const std::string&, std::string* where) {
       return std::make_shared<PrefixStore>("pg", make_tcp(where));
     }},
};

// Another handle on the same data (another client of the same server, another FileStore on the
// same file): a TCPStore serialises its requests, so a thread that sets a key another thread is
// blocked on needs its own client.
std::shared_ptr<Store> peer_of(const std::shared_ptr<Store>& s) {
  if (auto* p = dynamic_cast<PrefixStore*>(s.get())) {
    return std::make_shared<PrefixStore>("pg", peer_of(p->base()));
  }
  if (auto* t = dynamic_cast<TCPStore*>(s.get())) {
    TCPStoreOptions o;
    o.port = t->port();
    o.timeout = 2000ms;
    return std::make_shared<TCPStore>(o);
  }
  if (auto* f = dynamic_cast<FileStore*>(s.get())) return std::make_shared<FileStore>(f->path());
  return s;
}

// Sets the timeout of a store and of the base under a PrefixStore (so that get() reports itself).
void set_timeout_all(Store& s, Duration t) {
  s.set_timeout(t);
  if (auto* p = dynamic_cast<PrefixStore*>(&s)) p->base()->set_timeout(t);
}

void PrintTo(const StoreKind& k, std::ostream* os) {
  *os << k.name;
}

class StoreSemantics : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { store_ = GetParam().make(dir_.path(), &where_); }
  testing::TempDir dir_;
  std::string where_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreSemantics, BasicOperations) {
  Store& s = *store_;
  EXPECT_EQ(s.num_keys(), 0);
  s.set("a", "1");
  EXPECT_EQ(s.get("a"), "1");
  s.set("a", std::string("x\0y\xff", 4));  // binary-safe, overwrite
  EXPECT_EQ(s.get("a"), std::string("x\0y\xff", 4));
  s.set("empty", "");
  EXPECT_EQ(s.get("empty"), "");
  EXPECT_EQ(s.num_keys(), 2);
  EXPECT_TRUE(s.check({"a", "empty"}));
  EXPECT_FALSE(s.check({"a", "b"}));
  EXPECT_TRUE(s.check({}));

  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.get("n"), "-2");
  EXPECT_EQ(s.add("n", 0), -2);
  EXPECT_EQ(error_of<ValueError>([&] { s.add("a", 1); }),
            std::string("[store] add('") + (GetParam().name[0] == 'P' ? "pg/" : "") +
                "a'): the stored value 'x\\x00y\\xff' is not an integer");

  // compare_set: absent + empty expected sets; absent + other expected echoes expected and stores
  // nothing; a mismatch returns the current value; a match swaps.
  EXPECT_EQ(s.compare_set("c", "", "first"), "first");
  EXPECT_EQ(s.compare_set("absent", "x", "y"), "x");
  EXPECT_FALSE(s.check({"absent"}));
  EXPECT_EQ(s.compare_set("c", "wrong", "second"), "first");
  EXPECT_EQ(s.compare_set("c", "first", "second"), "second");
  EXPECT_EQ(s.get("c"), "second");

  EXPECT_TRUE(s.delete_key("c"));
  EXPECT_FALSE(s.delete_key("c"));
  EXPECT_FALSE(s.check({"c"}));
  EXPECT_EQ(s.num_keys(), 3);  // a, empty, n

  s.multi_set({"m1", "m2", "m3"}, {"v1", "", "v3"});
  EXPECT_EQ(s.multi_get({"m3", "m1", "m2"}), (std::vector<std::string>{"v3", "v1", ""}));
  EXPECT_EQ(s.multi_get({}), std::vector<std::string>{});
  EXPECT_EQ(error_of<ValueError>([&] { s.multi_set({"k"}, {}); }),
            "[store] multi_set: 1 keys but 0 values");
  EXPECT_EQ(s.num_keys(), 6);
  s.wait({"a", "m2"}, 10ms);
  s.wait({});
}

TEST_P(StoreSemantics, TimeoutsNameTheKeysAndTheStore) {
  Store& s = *store_;
  set_timeout_all(s, 100ms);
  s.set("present", "1");
  const std::string pre = GetParam().name[0] == 'P' ? "pg/" : "";
  EXPECT_EQ(error_of<TimeoutError>([&] { s.get("nope"); }),
            "[store] get('" + pre + "nope') timed out after 0.1 s (" + where_ + ")");
  EXPECT_EQ(error_of<TimeoutError>([&] {
              s.wait({"present", "nope", "never"}, 50ms);
            }),
            "[store] wait('" + pre + "present', '" + pre + "nope', '" + pre +
                "never') timed out after 0.05 s (" + where_ + "); missing keys: '" + pre +
                "nope', '" + pre + "never'");
  // The store still works after a timeout (a TCPStore keeps or re-opens its connection).
  EXPECT_EQ(s.get("present"), "1");
}

TEST_P(StoreSemantics, WaitAndGetWakeWhenAnotherThreadSets) {
  Store& s = *store_;
  set_timeout_all(s, 5000ms);
  std::shared_ptr<Store> peer = peer_of(store_);
  std::thread setter([&] {
    std::this_thread::sleep_for(30ms);
    peer->set("late", "here");
    std::this_thread::sleep_for(10ms);
    peer->set("later", "too");
  });
  EXPECT_EQ(s.get("late"), "here");
  s.wait({"late", "later"}, 5000ms);
  setter.join();
  EXPECT_EQ(s.multi_get({"late", "later"}), (std::vector<std::string>{"here", "too"}));
}

// A random sequence of operations, each checked against a std::map.
TEST_P(StoreSemantics, MatchesReferenceModel) {
  Store& s = *store_;
  set_timeout_all(s, 100ms);
  std::map<std::string, std::string> model;
  std::mt19937 rng(1234);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto key = [&] {
    std::string k = "k";  // not "k" + to_string(): GCC 12 warns falsely (-Wrestrict) on that
    k += std::to_string(pick(6));
    return k;
  };
  auto value = [&] {
    if (pick(3) == 0) return std::to_string(pick(100) - 50);
    std::string v(static_cast<size_t>(pick(5)), '\0');
    for (auto& c : v) c = static_cast<char>(pick(256));
    return v;
  };
  auto is_int = [](const std::string& v) {
    if (v.empty()) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!(std::isdigit(static_cast<unsigned char>(v[i])) ||
            (i == 0 && v[i] == '-' && v.size() > 1)))
        return false;
    }
    return true;
  };
  for (int step = 0; step < 400; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::string k = key();
    switch (pick(8)) {
      case 0: {
        std::string v = value();
        s.set(k, v);
        model[k] = v;
        break;
      }
      case 1:
        if (model.count(k)) {
          EXPECT_EQ(s.get(k), model[k]);
        }
        break;
      case 2: {
        const int64_t d = pick(21) - 10;
        if (!model.count(k) || is_int(model[k])) {
          const int64_t want = (model.count(k) ? std::stoll(model[k]) : 0) + d;
          EXPECT_EQ(s.add(k, d), want);
          model[k] = std::to_string(want);
        } else {
          EXPECT_THROW(s.add(k, d), ValueError);
        }
        break;
      }
      case 3: {
        const std::string expected = pick(2) && model.count(k) ? model[k] : value();
        const std::string desired = value();
        std::string want;
        if (model.count(k) ? model[k] == expected : expected.empty()) {
          model[k] = desired;
          want = desired;
        } else {
          want = model.count(k) ? model[k] : expected;
        }
        EXPECT_EQ(s.compare_set(k, expected, desired), want);
        break;
      }
      case 4: {
        const std::string k2 = key();
        EXPECT_EQ(s.check({k, k2}), model.count(k) && model.count(k2));
        break;
      }
      case 5:
        EXPECT_EQ(s.delete_key(k), model.erase(k) > 0);
        break;
      case 6:
        EXPECT_EQ(s.num_keys(), static_cast<int64_t>(model.size()));
        break;
      case 7: {
        std::vector<std::string> ks, vs;
        for (int i = pick(3); i >= 0; --i) {
          ks.push_back(key());
          vs.push_back(value());
          model[ks.back()] = vs.back();
        }
        s.multi_set(ks, vs);
        std::vector<std::string> want;
        for (const auto& kk : ks) want.push_back(model[kk]);
        EXPECT_EQ(s.multi_get(ks), want);
        break;
      }
    }
  }
  EXPECT_EQ(s.num_keys(), static_cast<int64_t>(model.size()));
  for (const auto& [k, v] : model) EXPECT_EQ(s.get(k), v) << k;
}

INSTANTIATE_TEST_SUITE_P(All, StoreSemantics, ::testing::ValuesIn(kKinds),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- PrefixStore
// ----------------------------------------------------------------------------------

TEST(PrefixStoreTest, KeysLandUnderThePrefixInTheBase) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", "1");
  b.set("k", "2");
  EXPECT_EQ(a.get("k"), "1");
  EXPECT_EQ(b.get("k"), "2");
  EXPECT_EQ(base->get("a/k"), "1");
  EXPECT_EQ(base->num_keys(), 2);
  EXPECT_EQ(a.num_keys(), 2);  // the base's count, as torch
  EXPECT_EQ(a.base(), base);
  EXPECT_EQ(error_of<ValueError>([] { PrefixStore("p", nullptr); }),
            "[store] PrefixStore('p') needs a base store");
  // Its own timeout governs get() once changed.
  base->set_timeout(5000ms);
  PrefixStore c("c", base);
  EXPECT_EQ(c.timeout(), Duration(5000));
  c.set_timeout(20ms);
  EXPECT_EQ(error_of<TimeoutError>([&] { c.get("x"); }),
            "[store] wait('c/x') timed out after 0.02 s (HashStore)");
}

// ---- FileStore
// ------------------------------------------------------------------------------------

TEST(FileStoreTest, SharedBetweenForkedProcesses) {
  testing::TempDir dir;
  const std::string path = dir.file("shared");
  FileStore parent(path);
  parent.set_timeout(5000ms);
  constexpr int kChildren = 4, kAdds = 50;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        FileStore s(path);
        s.set_timeout(5000ms);
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
        s.set("child/" + std::to_string(c), std::to_string(::getpid()));
        // Waits for a key only the parent sets, after every child has counted in.
        if (s.get("go") != "yes") rc = 3;
        s.add("done", 1);
      } catch (...) {
        rc = 2;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> keys;
  for (int c = 0; c < kChildren; ++c) keys.push_back("child/" + std::to_string(c));
  parent.wait(keys);
  EXPECT_EQ(parent.get("counter"), std::to_string(kChildren * kAdds));
  parent.set("go", "yes");
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(parent.add("done", 0), kChildren);
  EXPECT_EQ(parent.num_keys(), 3 + kChildren);  // counter, go, done, child/*
  // A store opened later replays the whole log.
  FileStore late(path);
  EXPECT_EQ(late.get("counter"), "200");
  EXPECT_EQ(late.path(), path);
}

TEST(FileStoreTest, SameObjectUsedAfterForkLocksSeparately) {
  testing::TempDir dir;
  FileStore s(dir.file("s"));
  s.set_timeout(5000ms);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = 0;
    try {
      for (int i = 0; i < 200; ++i) s.add("n", 1);
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  for (int i = 0; i < 200; ++i) s.add("n", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(s.add("n", 0), 400);
}

TEST(FileStoreTest, CorruptLogIsDataErrorWithOffset) {
  testing::TempDir dir;
  const std::string path = dir.file("log");
  {
    FileStore s(path);
    s.set("k", "v");  // header (8) + record (9 + 1 + 1) = 19 bytes
  }
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << "xyz";
  }
  EXPECT_EQ(error_of<DataError>([&] { FileStore s(path); }),
            "[store] FileStore '" + path +
                "' is corrupt at offset 19: truncated record header (3 of 9 bytes)");
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);
    f << std::string(10, 'x');
  }
  EXPECT_EQ(error_of<DataError>([&] { FileStore s(path); }),
            "[store] FileStore '" + path + "' is corrupt at offset 19: unknown record kind 120");

  const std::string bad = dir.file("not_a_store");
  {
    std::ofstream f(bad, std::ios::binary);
    f << "hello world, not a log";
  }
  EXPECT_EQ(
      error_of<DataError>([&] { FileStore s(bad); }),
      "[store] FileStore '" + bad + "' is corrupt at offset 0: not a FileStore log (bad header)");

  const std::string past = dir.file("past_end");
  {
    std::ofstream f(past, std::ios::binary);
    f << "LOOMFS1\n" << 'S' << testing::le32(100) << testing::le32(0) << "short";
  }
  EXPECT_EQ(error_of<DataError>([&] { FileStore s(past); }),
            "[store] FileStore '" + past +
                "' is corrupt at offset 8: record of 100+0 bytes runs past the end of the file (5 "
                "bytes left)");
}

TEST(FileStoreTest, UnopenablePathIsDistError) {
  EXPECT_EQ(error_of<DistError>([] { FileStore s("/nonexistent-dir/x/store"); }),
            "[store] FileStore cannot open '/nonexistent-dir/x/store': No such file or directory");
}

}  // namespace
}  // namespace loom::dist
