// TCPStoreServer: the key-value server behind TCPStore.
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
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "dist/store_detail.h"
#include "dist/store_net.h"
#include "dist/settings.h"
#include "dist/store_protocol.h"
#include "loom/dist/store.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

using proto::Op;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 * 1024;
constexpr int64_t kMaxWaitMs = int64_t{1} << 40;  // clamp for client-sent timeouts

bool token_equal(const std::string& a, const std::string& b) {
  // Constant time in the length of the expected token.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  }
  return diff == 0;
}

struct Client {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  std::string in;
  size_t in_pos = 0;
  std::string out;
  size_t out_pos = 0;
  bool authed = false;
  bool want_write = false;
  uint64_t parked = 0;  // waiter id, 0 when none
};

struct Waiter {
  uint64_t client = 0;
  Op op = Op::kWait;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  std::string registered_key;  // the missing key it is listed under in waiters_by_key
};

}  // namespace

struct TCPStoreServer::Impl {
  TCPStoreServerOptions opt;
  std::string token;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  int port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  std::condition_variable stopped_cv;
  bool stopped = false;  // GUARDED_BY(stop_mu)

  std::atomic<int64_t> n_clients{0}, n_accepted{0}, n_rejected_frames{0}, n_rejected_tokens{0},
      n_keys{0};

  // ---- loop thread only ----
  std::unordered_map<uint64_t, Client> clients;
  std::unordered_map<std::string, std::string> kv;
  std::unordered_map<uint64_t, Waiter> waiters;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_by_key;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines;
  std::vector<uint64_t>
      resume;  // clients whose parked request completed: serve their buffered frames
  uint64_t next_id = 2;
  bool accept_paused = false;
  Clock::time_point accept_resume_at;

  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }

  void bind_and_listen();
  void loop();
  void loop_once();
  void accept_clients();
  void on_readable(Client& c);
  void process(uint64_t id);
  bool handle(Client& c, proto::Frame& f);
  void reply(Client& c, Op op, const std::vector<std::string_view>& fields);
  void flush(Client& c);
  void update_interest(Client& c);
  void close_client(uint64_t id);
  void reject(uint64_t id, const std::string& reason, bool token);
  void set_key(const std::string& key, std::string value);
  void park(Client& c, Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void notify(const std::string& key);
  void finish_waiter(uint64_t wid, bool timed_out);
  void unregister(uint64_t wid, const Waiter& w);
  void answer(Client& c, Op op, const std::vector<std::string>& keys, bool timed_out);
  int next_timeout_ms();
};

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
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
        on_readable(it->second);
        it = clients.find(id);
        if (it == clients.end()) continue;
      }
      if (events[i].events & EPOLLOUT) flush(it->second);
    }
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
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    ++n_accepted;
    n_clients = static_cast<int64_t>(clients.size());
  }
}

void TCPStoreServer::Impl::on_readable(Client& c) {
  const uint64_t id = c.id;
  for (;;) {
    const size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    ssize_t n = ::recv(c.fd, c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
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
    if (c.parked) {
      // Replies go out in order, so frames behind a parked request wait; a client that piles up
      // more than a frame's worth behind it is misbehaving.
      if (c.in.size() - c.in_pos > opt.max_frame_bytes + proto::kLengthBytes) {
        reject(id, "too much data sent while a request is parked", false);
        return;
      }
      continue;
    }
    process(id);
    if (!clients.count(id)) return;
  }
}

void TCPStoreServer::Impl::process(uint64_t id) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  Client& c = it->second;
  proto::Frame frame;
  while (!c.parked) {
    size_t consumed = 0;
    std::string error;
    auto st = proto::decode(c.in.data() + c.in_pos, c.in.size() - c.in_pos, opt.max_frame_bytes,
                            &frame, &consumed, &error);
    if (st == proto::DecodeStatus::kNeedMore) break;
    if (st == proto::DecodeStatus::kError) {
      reject(id, error, false);
      return;
    }
    c.in_pos += consumed;
    if (!handle(c, frame)) return;  // client closed
  }
  if (c.in_pos == c.in.size()) {
    c.in.clear();
    c.in_pos = 0;
  } else if (c.in_pos > 4096 && c.in_pos * 2 > c.in.size()) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
}

// ---- requests
// -------------------------------------------------------------------------------------

bool TCPStoreServer::Impl::handle(Client& c, proto::Frame& f) {
  const uint64_t id = c.id;
  auto& fields = f.fields;
  if (!c.authed) {
    if (f.op != Op::kHello || fields.size() != 1 || !token_equal(fields[0], token)) {
      reject(id, f.op == Op::kHello ? "wrong token" : "no token (first frame is not hello)", true);
      return false;
    }
    c.authed = true;
    reply(c, Op::kOk, {});
    return clients.count(id) > 0;
  }
  auto bad = [&](const char* expected) {
    reject(id,
           std::string(proto::op_name(f.op)) + " frame has " + std::to_string(fields.size()) +
               " fields, expected " + expected,
           false);
    return false;
  };
  auto bad_int = [&](size_t index, const char* what) {
    reject(id,
           std::string(proto::op_name(f.op)) + " frame: field " + std::to_string(index) + " (" +
               what + ") has " + std::to_string(fields[index].size()) + " bytes, expected 8",
           false);
    return false;
  };
  int64_t num = 0;
  switch (f.op) {
    case Op::kHello:
      if (fields.size() != 1) return bad("1 (token)");
      reply(c, Op::kOk, {});
      break;
    case Op::kPing:
      reply(c, Op::kOk, {});
      break;
    case Op::kSet:
      if (fields.size() != 2) return bad("2 (key, value)");
      set_key(fields[0], std::move(fields[1]));
      reply(c, Op::kOk, {});
      break;
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet: {
      if (fields.size() < 2 || (f.op == Op::kGet && fields.size() != 2)) {
        return bad(f.op == Op::kGet ? "2 (timeout, key)" : "at least 2 (timeout, keys)");
      }
      if (!proto::decode_int(fields[0], &num)) return bad_int(0, "timeout");
      std::vector<std::string> keys(std::make_move_iterator(fields.begin() + 1),
                                    std::make_move_iterator(fields.end()));
      bool all = true;
      for (const auto& k : keys) all = all && kv.count(k);
      if (all) {
        answer(c, f.op, keys, false);
      } else {
        park(c, f.op, std::move(keys), num);
      }
      break;
    }
    case Op::kAdd: {
      if (fields.size() != 2) return bad("2 (key, delta)");
      if (!proto::decode_int(fields[1], &num)) return bad_int(1, "delta");
      auto it = kv.find(fields[0]);
      int64_t v = num;
      try {
        if (it != kv.end()) v += detail::parse_counter(fields[0], it->second);
      } catch (const Error& e) {
        reply(c, Op::kError, {e.what()});
        break;
      }
      set_key(fields[0], std::to_string(v));
      reply(c, Op::kInt, {proto::encode_int(v)});
      break;
    }
    case Op::kCompareSet: {
      if (fields.size() != 3) return bad("3 (key, expected, desired)");
      auto it = kv.find(fields[0]);
      if (it == kv.end() ? fields[1].empty() : it->second == fields[1]) {
        set_key(fields[0], fields[2]);
        reply(c, Op::kValue, {fields[2]});
      } else {
        reply(c, Op::kValue, {it == kv.end() ? fields[1] : it->second});
      }
      break;
    }
    case Op::kCheck: {
      bool all = true;
      for (const auto& k : fields) all = all && kv.count(k);
      reply(c, Op::kBool, {std::string_view(all ? "\x01" : "\0", 1)});
      break;
    }
    case Op::kDelete: {
      if (fields.size() != 1) return bad("1 (key)");
      const bool existed = kv.erase(fields[0]) > 0;
      n_keys = static_cast<int64_t>(kv.size());
      reply(c, Op::kBool, {std::string_view(existed ? "\x01" : "\0", 1)});
      break;
    }
    case Op::kNumKeys:
      reply(c, Op::kInt, {proto::encode_int(static_cast<int64_t>(kv.size()))});
      break;
    case Op::kMultiSet:
      if (fields.size() % 2 != 0) return bad("an even number (key, value pairs)");
      for (size_t i = 0; i < fields.size(); i += 2) set_key(fields[i], std::move(fields[i + 1]));
      reply(c, Op::kOk, {});
      break;
    default:
      reject(id, std::string("unexpected opcode '") + proto::op_name(f.op) + "' from a client",
             false);
      return false;
  }
  return clients.count(id) > 0;
}

void TCPStoreServer::Impl::set_key(const std::string& key, std::string value) {
  kv[key] = std::move(value);
  n_keys = static_cast<int64_t>(kv.size());
  notify(key);
}

void TCPStoreServer::Impl::answer(Client& c, Op op, const std::vector<std::string>& keys,
                                  bool timed_out) {
  std::vector<std::string_view> out;
  if (timed_out) {
    for (const auto& k : keys) {
      if (!kv.count(k)) out.emplace_back(k);
    }
    reply(c, Op::kTimeout, out);
  } else if (op == Op::kWait) {
    reply(c, Op::kOk, {});
  } else {
    for (const auto& k : keys) out.emplace_back(kv.at(k));
    reply(c, Op::kValue, out);
  }
}

void TCPStoreServer::Impl::park(Client& c, Op op, std::vector<std::string> keys,
                                int64_t timeout_ms) {
  const uint64_t wid = next_id++;
  Waiter& w = waiters[wid];
  w.client = c.id;
  w.op = op;
  w.keys = std::move(keys);
  w.deadline =
      Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, kMaxWaitMs));
  for (const auto& k : w.keys) {
    if (!kv.count(k)) {
      w.registered_key = k;
      break;
    }
  }
  waiters_by_key[w.registered_key].push_back(wid);
  deadlines.emplace(w.deadline, wid);
  c.parked = wid;
}

void TCPStoreServer::Impl::unregister(uint64_t wid, const Waiter& w) {
  deadlines.erase({w.deadline, wid});
  auto it = waiters_by_key.find(w.registered_key);
  if (it == waiters_by_key.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == wid) {
      v[i] = v.back();
      v.pop_back();
      break;
    }
  }
  if (v.empty()) waiters_by_key.erase(it);
}

void TCPStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters_by_key.find(key);
  if (it == waiters_by_key.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters_by_key.erase(it);
  for (uint64_t wid : ids) {
    auto w = waiters.find(wid);
    if (w == waiters.end()) continue;
    w->second.registered_key.clear();
    for (const auto& k : w->second.keys) {
      if (!kv.count(k)) {
        w->second.registered_key = k;
        break;
      }
    }
    if (w->second.registered_key.empty()) {
      finish_waiter(wid, false);
    } else {
      waiters_by_key[w->second.registered_key].push_back(wid);
    }
  }
}

void TCPStoreServer::Impl::finish_waiter(uint64_t wid, bool timed_out) {
  auto it = waiters.find(wid);
  if (it == waiters.end()) return;
  Waiter w = std::move(it->second);
  waiters.erase(it);
  if (timed_out) {
    unregister(wid, w);
  } else {
    deadlines.erase({w.deadline, wid});
  }
  auto c = clients.find(w.client);
  if (c == clients.end()) return;
  c->second.parked = 0;
  answer(c->second, w.op, w.keys, timed_out);
  resume.push_back(w.client);
}

// ---- output and closing
// ---------------------------------------------------------------------------

void TCPStoreServer::Impl::reply(Client& c, Op op, const std::vector<std::string_view>& fields) {
  try {
    proto::encode(op, fields, c.out, opt.max_frame_bytes);
  } catch (const Error&) {
    std::string msg = std::string("[store] reply to this request exceeds the frame limit of ") +
                      std::to_string(opt.max_frame_bytes) + " bytes";
    proto::encode(Op::kError, {msg}, c.out);
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
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
  update_interest(c);
}

void TCPStoreServer::Impl::update_interest(Client& c) {
  const bool want = !c.out.empty();
  if (want == c.want_write) return;
  c.want_write = want;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
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
    proto::encode(Op::kError, {"[store] the server rejected this client: " + reason}, frame);
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
  s.token = s.opt.token;
  if (s.token.empty()) s.token = settings::kStoreToken.get();
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
  return st;
}

}  // namespace loom::dist
