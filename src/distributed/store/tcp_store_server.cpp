// TCPStoreServer: the key-value server behind TCPStore: its event loop, buffers and limits. The
// requests themselves are in tcp_store_requests.cpp.
//
// Note [TCP store server loop]
// One background thread runs an epoll loop (level-triggered) over the listening socket, an eventfd
// that stop() writes, and every client socket (non-blocking, with its own input and output buffer).
// Frames (Note [TCP store frames]) are decoded as they arrive; a frame that is oversized or
// malformed, or a first frame without the right token, closes that client only, with a line on
// stderr and a counter. GET / WAIT / MULTI_GET on missing keys park the request: the waiter is
// registered under one missing key at a time and re-examined when that key is set, and its deadline
// (the timeout the client sent) sits in an ordered set that bounds epoll_wait. While a client's
// request is parked its further frames are buffered, not served, so replies stay in order. All
// state below "loop thread only" is touched by the loop thread alone; the counters are atomics read
// by stats().
//
// Note [TCP store server limits]
// Nothing a client sends may grow the server without bound (TCPStoreServerOptions has the limits):
//  - Replies wait in a client's output buffer until the socket takes them. Once more than
//    max_client_queue_bytes wait, the server stops reading that client's requests (its frames stay
//    in the kernel's socket buffer, which pushes back on the sender) and resumes when the queue is
//    down to half. A throttled client that reads nothing for stalled_client_timeout is closed. So
//    one client holds at most the limit plus one reply, however many requests it sends (a client
//    that sent 1500 GETs of a 1 MiB value without reading used to grow the server to 1.27 GB).
//  - Until a client has sent the token, a frame may be at most max_unauthenticated_frame_bytes
//    (enough for the hello), so an unauthenticated connection cannot make the server buffer a
//    64 MiB partial frame.
//  - The bytes held in every client's buffers (their allocations) are counted; when the sum passes
//    max_buffered_bytes the client holding the most is closed, until the sum is back under it.
// Every closing is a line on stderr with the reason and a counter in stats().
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distributed/settings.h"
#include "distributed/store/store_net.h"
#include "distributed/store/tcp_store_server_impl.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

using proto::Op;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 * 1024;
// A buffer that empties keeps its allocation up to this size; larger ones are given back, so that a
// client that once sent or received a large value does not hold that memory while idle.
constexpr size_t kKeepCapacity = 16 * 1024;
const size_t kInlineCapacity = std::string().capacity();  // no heap allocation up to this size

size_t heap_bytes(const std::string& s) {
  return s.capacity() > kInlineCapacity ? s.capacity() : 0;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

TCPStoreServer::Impl::~Impl() {
  for (int fd : {listen_fd, epoll_fd, wake_fd}) {
    if (fd >= 0) ::close(fd);
  }
}

// ---- setup
// ----------------------------------------------------------------------------------------

void TCPStoreServer::Impl::bind_and_listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(opt.port);
  const char* host = opt.host.empty() ? nullptr : opt.host.c_str();
  if (int rc = ::getaddrinfo(host, service.c_str(), &hints, &res); rc != 0) {
    LOOM_THROW(DistError, "[store] cannot listen on ", net::host_port(opt.host, opt.port),
               ": cannot resolve the host: ", gai_strerror(rc));
  }
  std::string error = "no address";
  for (addrinfo* ai = res; ai && listen_fd < 0; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
  }
  ::freeaddrinfo(res);
  if (listen_fd < 0) {
    LOOM_THROW(DistError, "[store] cannot listen on ", net::host_port(opt.host, opt.port), ": ",
               error);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd < 0 || wake_fd < 0) {
    LOOM_THROW(DistError, "[store] cannot create the server's event loop: ", std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.u64 = kWakeId;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
}

// ---- the loop
// -------------------------------------------------------------------------------------

int TCPStoreServer::Impl::next_timeout_ms() {
  Clock::time_point next = Clock::time_point::max();
  if (!deadlines.empty()) next = deadlines.begin()->first;
  if (accept_paused) next = std::min(next, accept_resume_at);
  for (uint64_t id : throttled) {
    auto it = clients.find(id);
    if (it != clients.end())
      next = std::min(next, it->second.progress + opt.stalled_client_timeout);
  }
  if (next == Clock::time_point::max()) return -1;
  return net::ms_until(next);
}

void TCPStoreServer::Impl::loop() {
  try {
    while (!stopping.load()) loop_once();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[loom store] event loop stopped: %s\n", e.what());
  }
  for (auto& [id, c] : clients) ::close(c.fd);
  clients.clear();
  throttled.clear();
  n_clients = 0;
  std::lock_guard<std::mutex> lock(stop_mu);
  stopped = true;
  stopped_cv.notify_all();
}

void TCPStoreServer::Impl::loop_once() {
  epoll_event events[256];
  int n = ::epoll_wait(epoll_fd, events, 256, next_timeout_ms());
  if (n < 0) {
    if (errno == EINTR) return;
    LOOM_THROW(DistError, "[store] epoll_wait failed: ", std::strerror(errno));
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t id = events[i].data.u64;
    if (id == kListenId) {
      accept_clients();
    } else if (id == kWakeId) {
      uint64_t v;
      while (::read(wake_fd, &v, sizeof(v)) > 0) {
      }
    } else {
      auto it = clients.find(id);
      if (it == clients.end()) continue;  // closed earlier in this batch
      if (events[i].events & EPOLLERR) {
        close_client(id);
        continue;
      }
      // A throttled client's hang-up is seen once its queue drains or its stall deadline passes.
      if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) && !it->second.throttled) {
        on_readable(it->second);
        it = clients.find(id);
        if (it == clients.end()) continue;
      }
      if (events[i].events & EPOLLOUT) flush(it->second);
    }
    if (buffered > opt.max_buffered_bytes) enforce_limits(Clock::now());
  }
  const auto now = Clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    const uint64_t wid = deadlines.begin()->second;
    if (!waiters.count(wid)) {  // defensive: every path that drops a waiter drops its deadline
      deadlines.erase(deadlines.begin());
      continue;
    }
    finish_waiter(wid, /*timed_out=*/true);
  }
  if (accept_paused && now >= accept_resume_at) {
    accept_paused = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
  }
  // Serving a resumed client can complete other waiters, which queue more resumes.
  while (!resume.empty()) {
    const uint64_t id = resume.back();
    resume.pop_back();
    process(id);
  }
  enforce_limits(now);
}

void TCPStoreServer::Impl::accept_clients() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the listening socket would stay readable and spin the loop,
      // so stop watching it for a moment.
      std::fprintf(stderr, "[loom store] cannot accept a client: %s (retrying in 100 ms)\n",
                   std::strerror(errno));
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
      accept_paused = true;
      accept_resume_at = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    const std::string peer = net::sockaddr_text(addr);
    if (static_cast<int64_t>(clients.size()) >= opt.max_clients) {
      std::fprintf(stderr, "[loom store] closed client %s: too many clients (max_clients %d)\n",
                   peer.c_str(), opt.max_clients);
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t id = next_id++;
    Client& c = clients[id];
    c.id = id;
    c.fd = fd;
    c.peer = peer;
    c.authed = token.empty();
    c.events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c.events;
    ev.data.u64 = id;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    ++n_accepted;
    n_clients = static_cast<int64_t>(clients.size());
  }
}

void TCPStoreServer::Impl::on_readable(Client& c) {
  const uint64_t id = c.id;
  if (read_buf.empty()) read_buf.resize(kReadChunk);
  for (;;) {
    ssize_t n = ::recv(c.fd, read_buf.data(), read_buf.size(), 0);
    if (n == 0) {  // orderly shutdown (complete frames read before it were served)
      close_client(id);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(id);
      return;
    }
    c.in.append(read_buf.data(), static_cast<size_t>(n));
    account(c);
    if (c.parked) {
      // Replies go out in order, so frames behind a parked request wait; a client that piles up
      // more than a frame's worth behind it is misbehaving.
      if (c.in.size() - c.in_pos > opt.max_frame_bytes + proto::kLengthBytes) {
        reject(id, "too much data sent while a request is parked", false);
        return;
      }
    } else {
      process(id);
      if (!clients.count(id)) return;
      if (c.throttled) return;  // its replies wait: read nothing more until they drain
    }
    // The loop enforces the budget between events; stop reading before passing it by much.
    if (buffered > opt.max_buffered_bytes) return;
  }
}

void TCPStoreServer::Impl::process(uint64_t id) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  Client& c = it->second;
  // Until the token is checked, a frame may be only large enough for the hello.
  const size_t limit = c.authed ? opt.max_frame_bytes : opt.max_unauthenticated_frame_bytes;
  proto::Frame frame;
  while (!c.parked && !c.throttled) {
    size_t consumed = 0;
    std::string error;
    auto st = proto::decode(c.in.data() + c.in_pos, c.in.size() - c.in_pos, limit, &frame,
                            &consumed, &error);
    if (st == proto::DecodeStatus::NeedMore) break;
    if (st == proto::DecodeStatus::Error) {
      if (!c.authed) error += " before the client authenticated (max_unauthenticated_frame_bytes)";
      reject(id, error, false);
      return;
    }
    c.in_pos += consumed;
    if (!handle(c, frame)) return;  // client closed
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
    if (c.in.capacity() > kKeepCapacity) std::string().swap(c.in);
  } else if (c.in_pos > 4096 && c.in_pos * 2 > c.in.size()) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
  account(c);
}

// ---- output, limits and closing
// -------------------------------------------------------------------

void TCPStoreServer::Impl::reply(Client& c, Op op, const std::vector<std::string_view>& fields) {
  try {
    proto::encode(op, fields, c.out, opt.max_frame_bytes);
  } catch (const Error&) {
    std::string msg = std::string("[store] reply to this request exceeds the frame limit of ") +
                      std::to_string(opt.max_frame_bytes) + " bytes";
    proto::encode(Op::Error, {msg}, c.out);
  }
  flush(c);
}

void TCPStoreServer::Impl::flush(Client& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // The peer is gone; its EPOLLERR/EPOLLHUP closes it on the next turn of the loop.
      c.out.clear();
      c.out_pos = 0;
      break;
    }
    c.out_pos += static_cast<size_t>(n);
    if (c.throttled) c.progress = Clock::now();
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
    if (c.out.capacity() > kKeepCapacity) std::string().swap(c.out);
  } else if (c.out_pos > 4096 && c.out_pos * 2 > c.out.size()) {
    c.out.erase(0, c.out_pos);  // keeps a slow reader's buffer from holding what it already read
    c.out_pos = 0;
  }
  // Note [TCP store server limits]: throttle above the queue limit, resume at half of it.
  const size_t pending = c.pending_out();
  if (!c.throttled && pending > opt.max_client_queue_bytes) {
    c.throttled = true;
    c.progress = Clock::now();
    throttled.insert(c.id);
    ++n_throttled;
  } else if (c.throttled && pending <= opt.max_client_queue_bytes / 2) {
    c.throttled = false;
    throttled.erase(c.id);
    resume.push_back(c.id);  // serve the requests it sent meanwhile
  }
  update_interest(c);
  account(c);
}

void TCPStoreServer::Impl::update_interest(Client& c) {
  const uint32_t want = (c.throttled ? 0u : uint32_t{EPOLLIN | EPOLLRDHUP}) |
                        (c.pending_out() ? uint32_t{EPOLLOUT} : 0u);
  if (want == c.events) return;
  c.events = want;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
}

void TCPStoreServer::Impl::account(Client& c) {
  const size_t now = heap_bytes(c.in) + heap_bytes(c.out);
  buffered = buffered - c.accounted + now;
  c.accounted = now;
  n_buffered.store(static_cast<int64_t>(buffered), std::memory_order_relaxed);
  if (static_cast<int64_t>(buffered) > n_peak_buffered.load(std::memory_order_relaxed)) {
    n_peak_buffered.store(static_cast<int64_t>(buffered), std::memory_order_relaxed);
  }
}

// Closes clients that stalled while throttled, then, while the buffers exceed the budget, the
// client that holds the most (Note [TCP store server limits]).
void TCPStoreServer::Impl::enforce_limits(Clock::time_point now) {
  std::vector<uint64_t> stalled;
  for (uint64_t id : throttled) {
    auto it = clients.find(id);
    if (it != clients.end() && now - it->second.progress >= opt.stalled_client_timeout) {
      stalled.push_back(id);
    }
  }
  for (uint64_t id : stalled) {
    const Client& c = clients.at(id);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - c.progress).count();
    drop(id,
         "it read none of its replies for " + std::to_string(ms) + " ms while " +
             mib(c.pending_out()) + " of them were queued (stalled_client_timeout " +
             std::to_string(opt.stalled_client_timeout.count()) + " ms, max_client_queue_bytes " +
             std::to_string(opt.max_client_queue_bytes) + ")",
         n_dropped_stalled);
  }
  while (buffered > opt.max_buffered_bytes && !clients.empty()) {
    auto worst = std::max_element(clients.begin(), clients.end(), [](const auto& a, const auto& b) {
      return a.second.accounted < b.second.accounted;
    });
    drop(worst->first,
         "the server's buffers hold " + mib(buffered) + ", over max_buffered_bytes (" +
             mib(opt.max_buffered_bytes) + "), and this client holds the most (" +
             mib(worst->second.accounted) + ")",
         n_dropped_over_budget);
  }
}

void TCPStoreServer::Impl::drop(uint64_t id, const std::string& reason,
                                std::atomic<int64_t>& counter) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  std::fprintf(stderr, "[loom store] closed client %s: %s\n", it->second.peer.c_str(),
               reason.c_str());
  std::fflush(stderr);
  close_client(id);
  ++counter;  // after the close, so that a reader of stats() sees its bytes gone with it
}

void TCPStoreServer::Impl::close_client(uint64_t id) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  Client& c = it->second;
  if (c.parked) {
    auto w = waiters.find(c.parked);
    if (w != waiters.end()) {
      unregister(c.parked, w->second);
      waiters.erase(w);
    }
  }
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  buffered -= c.accounted;
  n_buffered.store(static_cast<int64_t>(buffered), std::memory_order_relaxed);
  throttled.erase(id);
  clients.erase(it);
  n_clients = static_cast<int64_t>(clients.size());
}

void TCPStoreServer::Impl::reject(uint64_t id, const std::string& reason, bool bad_token) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  Client& c = it->second;
  std::fprintf(stderr, "[loom store] closed client %s: %s\n", c.peer.c_str(), reason.c_str());
  std::fflush(stderr);
  if (bad_token) {
    ++n_rejected_tokens;
    // Best effort, so that the client can say why instead of "connection closed".
    std::string frame;
    proto::encode(Op::Error, {"[store] the server rejected this client: " + reason}, frame);
    [[maybe_unused]] ssize_t n = ::send(c.fd, frame.data(), frame.size(), MSG_NOSIGNAL);
  } else {
    ++n_rejected_frames;
  }
  close_client(id);
}

// ---- public API
// -----------------------------------------------------------------------------------

TCPStoreServer::TCPStoreServer(TCPStoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opt = std::move(options);
  LOOM_CHECK(s.opt.port >= 0 && s.opt.port <= 65535, "[store] server port ", s.opt.port,
             " is out of range 0..65535");
  LOOM_CHECK(s.opt.max_frame_bytes >= 64 && s.opt.max_frame_bytes <= UINT32_MAX,
             "[store] max_frame_bytes ", s.opt.max_frame_bytes, " is out of range 64..",
             UINT32_MAX);
  LOOM_CHECK(s.opt.max_clients >= 1, "[store] max_clients must be at least 1 but is ",
             s.opt.max_clients);
  LOOM_CHECK(s.opt.max_unauthenticated_frame_bytes >= 64,
             "[store] max_unauthenticated_frame_bytes must be at least 64 but is ",
             s.opt.max_unauthenticated_frame_bytes);
  s.opt.max_unauthenticated_frame_bytes =
      std::min(s.opt.max_unauthenticated_frame_bytes, s.opt.max_frame_bytes);
  LOOM_CHECK(s.opt.max_client_queue_bytes >= 1,
             "[store] max_client_queue_bytes must be at least 1");
  LOOM_CHECK(s.opt.max_buffered_bytes >= s.opt.max_frame_bytes, "[store] max_buffered_bytes ",
             s.opt.max_buffered_bytes, " must be at least max_frame_bytes (", s.opt.max_frame_bytes,
             ") so that one frame fits");
  LOOM_CHECK(s.opt.stalled_client_timeout.count() > 0,
             "[store] stalled_client_timeout must be positive but is ",
             s.opt.stalled_client_timeout.count(), " ms");
  s.token = s.opt.token;
  if (s.token.empty()) s.token = settings::kStoreToken.get();
  // The hello frame: opcode, the token's length and the token.
  LOOM_CHECK(1 + proto::kLengthBytes + s.token.size() <= s.opt.max_unauthenticated_frame_bytes,
             "[store] the token is ", s.token.size(),
             " bytes, too long for a hello frame of at most max_unauthenticated_frame_bytes (",
             s.opt.max_unauthenticated_frame_bytes, ")");
  net::raise_fd_limit();
  s.bind_and_listen();
  s.thread = std::thread([this] { impl_->loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop();
}

int TCPStoreServer::port() const {
  return impl_->port;
}
const std::string& TCPStoreServer::host() const {
  return impl_->opt.host;
}

void TCPStoreServer::stop() {
  Impl& s = *impl_;
  s.stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(s.wake_fd, &one, sizeof(one));
  if (s.thread.joinable() && s.thread.get_id() != std::this_thread::get_id()) s.thread.join();
}

void TCPStoreServer::run_until_stopped() {
  std::unique_lock<std::mutex> lock(impl_->stop_mu);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

TCPStoreServer::Stats TCPStoreServer::stats() const {
  const Impl& s = *impl_;
  Stats st;
  st.clients = s.n_clients.load();
  st.accepted = s.n_accepted.load();
  st.rejected_frames = s.n_rejected_frames.load();
  st.rejected_tokens = s.n_rejected_tokens.load();
  st.keys = s.n_keys.load();
  st.buffered_bytes = s.n_buffered.load();
  st.peak_buffered_bytes = s.n_peak_buffered.load();
  st.throttled = s.n_throttled.load();
  st.dropped_stalled = s.n_dropped_stalled.load();
  st.dropped_over_budget = s.n_dropped_over_budget.load();
  return st;
}

}  // namespace loom::dist
