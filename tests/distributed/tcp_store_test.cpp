// TCPStore and TCPStoreServer: many concurrent clients, malformed frames, tokens, a client that
// starts before its server, reconnection after a restart, and a server in another process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

std::unique_ptr<TCPStore> client(int port, Duration timeout = 2000ms, std::string token = {}) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  o.token = std::move(token);
  return std::make_unique<TCPStore>(o);
}

std::string where(int port) {
  return "server 127.0.0.1:" + std::to_string(port);
}

TEST(TCPStoreServerTest, ThousandConcurrentClients) {
  TCPStoreServer server;
  constexpr int kClients = 1024, kThreads = 8;
  std::vector<std::vector<std::unique_ptr<TCPStore>>> stores(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  // Every client connects (and finishes its handshake) before any works, so all 1024 are open at
  // once.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = t; i < kClients; i += kThreads) stores[t].push_back(client(server.port()));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  threads.clear();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(server.stats().clients, kClients);
  EXPECT_EQ(server.stats().accepted, kClients);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t j = 0; j < stores[t].size(); ++j) {
        const std::string key = "client/" + std::to_string(t) + "/" + std::to_string(j);
        stores[t][j]->set(key, std::to_string(j * 7));
        if (stores[t][j]->get(key) != std::to_string(j * 7)) ++failures;
        stores[t][j]->add("total", 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stores[0][0]->add("total", 0), kClients);
  EXPECT_EQ(stores[3][5]->num_keys(), kClients + 1);
  EXPECT_EQ(server.stats().keys, kClients + 1);
  stores.clear();
  EXPECT_TRUE(testing::eventually([&] { return server.stats().clients == 0; }));
}

// Each malformed frame closes only the client that sent it, logs why and counts it.
TEST(TCPStoreServerTest, MalformedFramesCloseOnlyThatClient) {
  TCPStoreServerOptions so;
  so.max_frame_bytes = 1024;
  TCPStoreServer server(so);
  auto good = client(server.port());
  good->set("k", "v");

  std::mt19937 rng(7);
  std::string random_bytes(64, '\0');
  for (auto& c : random_bytes) c = static_cast<char>(rng());
  const struct {
    const char* name;
    std::string bytes;
    const char* reason;
  } cases[] = {
      {"bad opcode", testing::frame(0xee, {}), "unknown opcode 238"},
      {"length over the limit", testing::le32(4096) + std::string(1, 2),
       "frame of 4096 bytes exceeds the limit of 1024 bytes"},
      {"empty frame", testing::le32(0), "empty frame (length 0, no opcode)"},
      {"truncated field length", testing::le32(3) + std::string(1, 2) + std::string(2, 'x'),
       "set frame: field 0 has a truncated length (2 of 4 bytes left in the frame)"},
      {"field past the frame",
       testing::le32(1 + 4 + 3) + std::string(1, 2) + testing::le32(100) + "abc",
       "set frame: field 0 claims 100 bytes but only 3 remain in the frame"},
      {"wrong field count", testing::frame(2, {"only-key"}),
       "set frame has 1 fields, expected 2 (key, value)"},
      {"reply opcode", testing::frame(64, {}), "unexpected opcode 'ok' from a client"},
      {"bad timeout field", testing::frame(3, {"abc", "key"}),
       "get frame: field 0 (timeout) has 3 bytes, expected 8"},
      {"random bytes", random_bytes, nullptr},
  };
  int64_t rejected = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    int fd = testing::raw_connect(server.port());
    ASSERT_GE(fd, 0);
    ::testing::internal::CaptureStderr();
    testing::raw_send(fd, c.bytes);
    const bool closed = testing::raw_wait_closed(fd, 3000);
    const std::string log = ::testing::internal::GetCapturedStderr();
    ::close(fd);
    EXPECT_TRUE(closed);
    ++rejected;
    EXPECT_EQ(server.stats().rejected_frames, rejected);
    EXPECT_CONTAINS(log, "[loom store] closed client 127.0.0.1:");
    if (c.reason) {
      EXPECT_CONTAINS(log, std::string(": ") + c.reason + "\n");
    }
    // The well-behaved client is unaffected.
    EXPECT_EQ(good->get("k"), "v");
    EXPECT_EQ(good->add("n", 1), rejected);
  }
  EXPECT_EQ(server.stats().rejected_tokens, 0);
  EXPECT_TRUE(testing::eventually([&] { return server.stats().clients == 1; }));
}

// Valid frames with random bytes flipped, cut short or extended: the server answers or closes each
// connection, never reads past a frame (run under ASan), and keeps serving.
TEST(TCPStoreServerTest, MutatedFramesNeverHurtTheServer) {
  TCPStoreServerOptions so;
  so.max_frame_bytes = 4096;
  TCPStoreServer server(so);
  auto good = client(server.port());
  const std::string zero_ms(8, '\0');
  const std::vector<std::string> seeds = {
      testing::frame(1, {""}),
      testing::frame(2, {"key", "value"}),
      testing::frame(3, {zero_ms, "key"}),
      testing::frame(4, {"n", std::string("\x01\0\0\0\0\0\0\0", 8)}),
      testing::frame(5, {"key", "value", "other"}),
      testing::frame(6, {zero_ms, "a", "b"}),
      testing::frame(7, {"a", "b"}),
      testing::frame(8, {"key"}),
      testing::frame(9, {}),
      testing::frame(10, {zero_ms, "key", "n"}),
      testing::frame(11, {"a", "1", "b", "2"}),
  };
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string f = seeds[rng() % seeds.size()];
    switch (rng() % 3) {
      case 0:
        for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) {
          f[rng() % f.size()] = static_cast<char>(rng());
        }
        break;
      case 1:
        f.resize(rng() % f.size());
        break;
      case 2:
        f += std::string(1 + rng() % 16, static_cast<char>(rng()));
        break;
    }
    int fd = testing::raw_connect(server.port());
    ASSERT_GE(fd, 0);
    testing::raw_send(fd, f);
    ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(testing::raw_wait_closed(fd, 3000)) << "case " << i;
    ::close(fd);
  }
  good->set("still", "serving");
  EXPECT_EQ(good->get("still"), "serving");
  EXPECT_TRUE(testing::eventually([&] { return server.stats().clients == 1; }));
  EXPECT_GT(server.stats().rejected_frames, 0);
}

// A server that accepts the handshake and then never answers: the client's own deadline.
TEST(TCPStoreServerTest, ClientTimesOutWhenTheServerNeverAnswers) {
  const int port = testing::free_port();
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  std::thread mute([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    char buf[256];
    ::recv(fd, buf, sizeof(buf), 0);                // the hello
    testing::raw_send(fd, testing::frame(64, {}));  // kOk
    testing::raw_wait_closed(fd, 5000);             // swallow everything until the client leaves
    ::close(fd);
  });
  {
    auto c = client(port, 100ms);
    EXPECT_EQ(error_of<TimeoutError>([&] { c->set("k", "v"); }),
              "[store] set('k') timed out after 0.1 s (" + where(port) + ")");
  }
  mute.join();
  ::close(lfd);
}

TEST(TCPStoreServerTest, FrameSplitAcrossManyWritesIsServed) {
  TCPStoreServer server;
  int fd = testing::raw_connect(server.port());
  ASSERT_GE(fd, 0);
  const std::string f = testing::frame(2, {"split", "value"}) + testing::frame(12, {});
  for (char c : f) {
    testing::raw_send(fd, std::string(1, c));
    std::this_thread::sleep_for(1ms);
  }
  std::string got;
  ::shutdown(fd, SHUT_WR);
  testing::raw_wait_closed(fd, 3000, &got);
  ::close(fd);
  EXPECT_EQ(got, testing::frame(64, {}) + testing::frame(64, {}));  // two kOk replies
  EXPECT_EQ(client(server.port())->get("split"), "value");
}

TEST(TCPStoreServerTest, TokenAcceptedAndRejected) {
  TCPStoreServerOptions so;
  so.token = "s3cret";
  TCPStoreServer server(so);
  auto ok = client(server.port(), 2000ms, "s3cret");
  ok->set("a", "1");
  EXPECT_EQ(error_of<DistError>([&] { client(server.port(), 2000ms, "wrong"); }),
            "[store] " + where(server.port()) +
                " refused this client: [store] the server rejected this client: wrong token (the "
                "token comes from TCPStoreOptions::token or LOOM_STORE_TOKEN)");
  EXPECT_EQ(server.stats().rejected_tokens, 1);
  EXPECT_THROW(client(server.port(), 2000ms), DistError);  // no token at all
  EXPECT_EQ(server.stats().rejected_tokens, 2);
  // A raw client whose first frame is not the handshake.
  int fd = testing::raw_connect(server.port());
  testing::raw_send(fd, testing::frame(2, {"k", "v"}));
  EXPECT_TRUE(testing::raw_wait_closed(fd, 3000));
  ::close(fd);
  EXPECT_EQ(server.stats().rejected_tokens, 3);
  EXPECT_EQ(server.stats().rejected_frames, 0);
  EXPECT_EQ(server.stats().keys, 1);
  EXPECT_EQ(ok->get("a"), "1");

  // LOOM_STORE_TOKEN is the default on both sides.
  testing::ScopedEnv env{{"LOOM_STORE_TOKEN", "from-env"}};
  TCPStoreServer env_server;
  EXPECT_EQ(client(env_server.port())->add("x", 2), 2);
  EXPECT_THROW(client(env_server.port(), 2000ms, "other"), DistError);
  EXPECT_EQ(env_server.stats().rejected_tokens, 1);
}

TEST(TCPStoreServerTest, ClientConnectsBeforeServerStarts) {
  const int port = testing::free_port();
  std::unique_ptr<TCPStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    TCPStoreServerOptions so;
    so.port = port;
    server = std::make_unique<TCPStoreServer>(so);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto c = client(port, 5000ms);  // retries with backoff until the server is up
  starter.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  c->set("a", "b");
  EXPECT_EQ(c->get("a"), "b");
  EXPECT_EQ(c->port(), port);
  EXPECT_EQ(c->host(), "127.0.0.1");
}

TEST(TCPStoreServerTest, NoServerIsDistErrorAfterTimeout) {
  const int port = testing::free_port();
  const std::string msg = error_of<DistError>([&] { client(port, 200ms); });
  EXPECT_EQ(msg,
            "[store] cannot reach " + where(port) +
                " within 0.2 s: Connection refused (is rank 0 or `loom store` running there?)");
}

TEST(TCPStoreServerTest, ReconnectsAfterServerRestart) {
  TCPStoreServerOptions so;
  so.port = testing::free_port();
  auto server = std::make_unique<TCPStoreServer>(so);
  auto c = client(so.port, 3000ms);
  c->set("before", "1");
  server.reset();  // closes every connection; the data is gone
  server = std::make_unique<TCPStoreServer>(so);
  c->set("after", "2");  // idempotent: re-sent on a new connection
  EXPECT_EQ(c->get("after"), "2");
  EXPECT_FALSE(c->check({"before"}));
  EXPECT_EQ(server->stats().accepted, 1);

  // add() is not retried when the connection breaks under it: the server may have applied it.
  server.reset();
  server = std::make_unique<TCPStoreServer>(so);
  EXPECT_EQ(error_of<DistError>([&] { c->add("n", 1); }),
            "[store] connection to " + where(so.port) +
                " lost during add('n'): connection closed by the server; not retried, since the "
                "server may already have applied it");
  EXPECT_EQ(c->add("n", 1), 1);  // the next request reconnects

  // The server gone for good: DistError once reconnecting runs out of the store's timeout.
  server.reset();
  c->set_timeout(200ms);
  EXPECT_EQ(error_of<DistError>([&] { c->set("x", "1"); }),
            "[store] cannot reach " + where(so.port) +
                " within 0.2 s (to retry set('x') after: connection closed by the server): "
                "Connection refused (is rank 0 or `loom store` running there?)");
}

TEST(TCPStoreServerTest, ServerInAnotherProcess) {
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_parent[0]);
    try {
      TCPStoreServer server;
      const int port = server.port();
      [[maybe_unused]] ssize_t n = ::write(to_parent[1], &port, sizeof(port));
      for (;;) ::pause();  // until killed
    } catch (...) {
      ::_exit(2);
    }
  }
  ::close(to_parent[1]);
  int port = 0;
  ASSERT_EQ(::read(to_parent[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(to_parent[0]);

  auto c = client(port, 3000ms);
  c->set("parent", "p");
  // A second client process waits for a key the parent sets later.
  pid_t waiter = ::fork();
  ASSERT_GE(waiter, 0);
  if (waiter == 0) {
    int rc = 0;
    try {
      auto w = client(port, 3000ms);
      if (w->get("parent") != "p") rc = 3;
      if (w->get("later") != "l") rc = 4;
      w->add("children", 1);
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  std::this_thread::sleep_for(50ms);
  c->set("later", "l");
  int status = 0;
  ASSERT_EQ(::waitpid(waiter, &status, 0), waiter);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(c->add("children", 0), 1);
  EXPECT_EQ(c->num_keys(), 3);

  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  c->set_timeout(200ms);
  const std::string msg = error_of<DistError>([&] { c->get("parent"); });
  EXPECT_CONTAINS(
      msg, "[store] cannot reach " + where(port) + " within 0.2 s (to retry get('parent') after: ");
}

TEST(TCPStoreServerTest, WaitersAreAnsweredWhenKeysArriveAndTimeOutOtherwise) {
  TCPStoreServer server;
  auto a = client(server.port(), 3000ms);
  auto b = client(server.port(), 3000ms);
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    b->multi_set({"x", "y"}, {"1", "2"});
  });
  EXPECT_EQ(a->multi_get({"y", "x"}), (std::vector<std::string>{"2", "1"}));
  t.join();
  a->set_timeout(50ms);
  EXPECT_EQ(error_of<TimeoutError>([&] {
              a->multi_get({"x", "z"});
            }),
            "[store] multi_get('x', 'z') timed out after 0.05 s (" + where(server.port()) +
                "); missing keys: 'z'");
  // A client that disconnects while parked leaves no waiter behind; the key arriving later is
  // harmless.
  int fd = testing::raw_connect(server.port());
  std::string ms(8, '\0');
  ms[1] = 0x10;  // 4096 ms, little-endian
  testing::raw_send(fd, testing::frame(3, {ms, "never"}));
  std::this_thread::sleep_for(20ms);
  ::close(fd);
  EXPECT_TRUE(testing::eventually([&] { return server.stats().clients == 2; }));
  a->set("never", "now");
  EXPECT_EQ(b->get("never"), "now");
}

TEST(TCPStoreServerTest, OversizedRequestIsValueErrorOnTheClient) {
  TCPStoreServerOptions so;
  so.max_frame_bytes = 1024;
  TCPStoreServer server(so);
  TCPStoreOptions o;
  o.port = server.port();
  o.max_frame_bytes = 1024;
  o.timeout = 2000ms;
  TCPStore c(o);
  EXPECT_EQ(error_of<ValueError>([&] { c.set("big", std::string(2000, 'x')); }),
            "[store] set('big'): request of 2012 bytes exceeds the frame limit of 1024 bytes");
  c.set("small", "ok");
  EXPECT_EQ(c.get("small"), "ok");
  EXPECT_EQ(server.stats().rejected_frames, 0);
}

TEST(TCPStoreServerTest, BadOptionsAreValueErrors) {
  TCPStoreServerOptions so;
  so.port = 70000;
  EXPECT_EQ(error_of<ValueError>([&] { TCPStoreServer s(so); }),
            "[store] server port 70000 is out of range 0..65535");
  TCPStoreOptions o;
  o.port = 0;
  EXPECT_EQ(error_of<ValueError>([&] { TCPStore s(o); }),
            "[store] TCPStore port 0 is out of range 1..65535");
  TCPStoreServer a;
  so.port = a.port();
  EXPECT_CONTAINS(error_of<DistError>([&] { TCPStoreServer s(so); }),
                  "[store] cannot listen on 127.0.0.1:" + std::to_string(a.port()) +
                      ": Address already in use");
}

}  // namespace
}  // namespace loom::dist
