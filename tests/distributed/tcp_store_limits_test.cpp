// TCPStoreServer limits (Note [TCP store server limits]) with real sockets: a client that sends
// GETs for a large value and never reads the replies, unauthenticated clients that start huge
// frames, and many clients that together pass the server's buffer budget. Each is measured through
// the server's own count of the bytes its buffers hold.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "distributed/store_test_util.h"
#include "loom/distributed/store.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<TCPStore> client(int port, std::string token = {}) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 5000ms;
  o.token = std::move(token);
  return std::make_unique<TCPStore>(o);
}

// A raw connection with a small receive buffer, so that the kernel holds few of the replies the
// test does not read (they would otherwise hide in socket buffers of several MiB).
int small_buffer_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int bytes = 64 * 1024;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Keys "v0".."v3" (built without `"literal" + std::string`, which GCC 12 warns about wrongly).
std::string key_of(int i) {
  std::string k = "v";
  k += static_cast<char>('0' + i % 4);
  return k;
}

std::string get_frame(const std::string& key) {
  return testing::frame(3, {std::string(8, '\0'), key});  // get, timeout 0 ms
}

// Reads exactly n bytes (false on EOF or error).
bool read_exact(int fd, std::string& out, size_t n) {
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// The server stops reading a client whose replies pile up: the 200 GETs of a 1 MiB value that it
// sends without reading leave the server holding a few MiB (200 MiB before the limit), a second
// client is served promptly meanwhile, and the stalled client is closed with a reason.
TEST(TCPStoreLimits, ClientThatNeverReadsItsRepliesIsThrottledThenClosed) {
  TCPStoreServerOptions so;
  so.token = "t0ken";
  so.max_client_queue_bytes = 2 * kMiB;
  so.stalled_client_timeout = 1500ms;
  TCPStoreServer server(so);
  auto good = client(server.port(), "t0ken");
  good->set("big", std::string(kMiB, 'v'));
  good->set("small", "s");

  ::testing::internal::CaptureStderr();
  int bad = small_buffer_connect(server.port());
  ASSERT_GE(bad, 0);
  std::string requests = testing::frame(1, {"t0ken"});
  for (int i = 0; i < 200; ++i) requests += get_frame("big");
  testing::raw_send(bad, requests);
  EXPECT_TRUE(testing::eventually([&] { return server.stats().throttled >= 1; }, 10000));

  // Served while the other client is throttled.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(good->get("small"), "s");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0) << "20 small GETs took " << secs << " s";

  auto st = server.stats();
  EXPECT_LE(st.peak_buffered_bytes, static_cast<int64_t>(8 * kMiB)) << "peak buffered bytes";
  EXPECT_EQ(st.dropped_stalled, 0);

  EXPECT_TRUE(testing::eventually([&] { return server.stats().dropped_stalled == 1; }, 15000));
  EXPECT_TRUE(testing::raw_wait_closed(bad, 5000));
  ::close(bad);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(log, "it read none of its replies for ");
  EXPECT_CONTAINS(log, "(stalled_client_timeout 1500 ms, max_client_queue_bytes 2097152)");
  EXPECT_TRUE(testing::eventually([&] { return server.stats().clients == 1; }));
  EXPECT_EQ(good->get("small"), "s");
  EXPECT_LE(server.stats().buffered_bytes, static_cast<int64_t>(64 * 1024));
}

// A throttled client that does read gets every reply, in order, once it reads: throttling only
// delays its requests.
TEST(TCPStoreLimits, ThrottledClientGetsEveryReplyWhenItReads) {
  TCPStoreServerOptions so;
  so.max_client_queue_bytes = 2 * kMiB;
  TCPStoreServer server(so);
  auto good = client(server.port());
  std::vector<std::string> values;
  for (int i = 0; i < 4; ++i) {
    values.push_back(std::string(kMiB - 1000 * i, static_cast<char>('a' + i)));
    good->set(key_of(i), values.back());
  }
  int fd = small_buffer_connect(server.port());
  ASSERT_GE(fd, 0);
  constexpr int kRequests = 40;
  std::string requests;
  for (int i = 0; i < kRequests; ++i) requests += get_frame(key_of(i));
  testing::raw_send(fd, requests);
  EXPECT_TRUE(testing::eventually([&] { return server.stats().throttled >= 1; }, 10000));
  for (int i = 0; i < kRequests; ++i) {
    std::string head, body;
    ASSERT_TRUE(read_exact(fd, head, 4)) << "reply " << i;
    uint32_t len = 0;
    for (int b = 0; b < 4; ++b)
      len |= static_cast<uint32_t>(static_cast<unsigned char>(head[b])) << (8 * b);
    ASSERT_TRUE(read_exact(fd, body, len)) << "reply " << i;
    const std::string& want = values[static_cast<size_t>(i % 4)];
    ASSERT_EQ(body.size(), 1 + 4 + want.size()) << "reply " << i;
    EXPECT_EQ(static_cast<uint8_t>(body[0]), 65) << "reply " << i << " is not a value";
    EXPECT_TRUE(body.compare(5, std::string::npos, want) == 0) << "reply " << i;
  }
  ::close(fd);
  EXPECT_LE(server.stats().peak_buffered_bytes, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(server.stats().dropped_stalled, 0);
}

// Before the token, a frame may be only as large as a hello: a client that announces 1 MiB and
// sends part of it is closed at once, and four of them leave the server holding nothing.
TEST(TCPStoreLimits, UnauthenticatedLargePartialFramesAreClosedAtTheSmallLimit) {
  TCPStoreServerOptions so;
  so.token = "t0ken";
  TCPStoreServer server(so);
  ::testing::internal::CaptureStderr();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    int fd = testing::raw_connect(server.port());
    ASSERT_GE(fd, 0);
    testing::raw_send(fd, testing::le32(1 << 20) + std::string(1, 1) + std::string(3000, 'x'));
    fds.push_back(fd);
  }
  for (int fd : fds) {
    EXPECT_TRUE(testing::raw_wait_closed(fd, 5000));
    ::close(fd);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(log,
                  "frame of 1048576 bytes exceeds the limit of 4096 bytes before the client "
                  "authenticated (max_unauthenticated_frame_bytes)");
  EXPECT_EQ(server.stats().rejected_frames, 4);
  EXPECT_LE(server.stats().peak_buffered_bytes, static_cast<int64_t>(4 * 64 * 1024));
  // After the token, the full limit applies.
  auto good = client(server.port(), "t0ken");
  good->set("large", std::string(kMiB, 'l'));
  EXPECT_EQ(good->get("large").size(), kMiB);
}

// Clients that each send most of a large frame pass the server-wide budget together: the server
// closes the ones holding the most until it is back under the budget, and keeps serving.
TEST(TCPStoreLimits, ManyPartialFramesStayWithinTheServerBudget) {
  TCPStoreServerOptions so;
  so.max_frame_bytes = 8 * kMiB;
  so.max_buffered_bytes = 10 * kMiB;
  TCPStoreServer server(so);
  auto good = client(server.port());
  ::testing::internal::CaptureStderr();
  std::vector<int> fds;
  const std::string partial = testing::le32(static_cast<uint32_t>(8 * kMiB - 64)) +
                              std::string(1, 2) + std::string(6 * kMiB, 'p');
  for (int i = 0; i < 6; ++i) {
    int fd = testing::raw_connect(server.port());
    ASSERT_GE(fd, 0);
    testing::raw_send(fd, partial);  // returns early when the server closes this client
    fds.push_back(fd);
  }
  EXPECT_TRUE(testing::eventually([&] { return server.stats().dropped_over_budget >= 5; }, 15000))
      << server.stats().dropped_over_budget;
  const auto st = server.stats();
  EXPECT_LE(st.buffered_bytes, static_cast<int64_t>(so.max_buffered_bytes));
  // Over the budget by at most one client's buffer growing once (allocations double).
  EXPECT_LE(st.peak_buffered_bytes,
            static_cast<int64_t>(so.max_buffered_bytes + so.max_frame_bytes));
  good->set("k", "v");
  EXPECT_EQ(good->get("k"), "v");
  for (int fd : fds) ::close(fd);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(log, "over max_buffered_bytes (10.0 MiB), and this client holds the most");
}

TEST(TCPStoreLimits, BadLimitsAreValueErrors) {
  TCPStoreServerOptions so;
  so.max_frame_bytes = 8 * kMiB;
  so.max_buffered_bytes = kMiB;
  EXPECT_CONTAINS(testing::error_of<ValueError>([&] { TCPStoreServer s(so); }),
                  "[store] max_buffered_bytes 1048576 must be at least max_frame_bytes (8388608)");
  so = {};
  so.stalled_client_timeout = 0ms;
  EXPECT_CONTAINS(testing::error_of<ValueError>([&] { TCPStoreServer s(so); }),
                  "stalled_client_timeout must be positive");
  so = {};
  so.token = std::string(5000, 't');
  EXPECT_CONTAINS(testing::error_of<ValueError>([&] { TCPStoreServer s(so); }),
                  "the token is 5000 bytes, too long for a hello frame");
}

}  // namespace
}  // namespace loom::dist
