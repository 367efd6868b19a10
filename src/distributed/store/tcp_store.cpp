// TCPStore: a client of TCPStoreServer over one connection.
//
// Note [TCP store client]
// Requests are serialised by a mutex: one frame out, one reply in. The connection is opened lazily
// and re-opened after a failure with exponential backoff (10 ms doubling to 1 s, each sleep scaled
// by a random factor in [0.5, 1.5) so that many ranks do not retry in lockstep) until the store's
// timeout, which also covers a server that starts after its clients. When a connection breaks
// mid-request, idempotent requests (all but add) are sent again on a new connection; add is not,
// since the server may already have applied it. Waiting requests carry their timeout to the server,
// which answers Timeout with the missing keys; the client gives up by itself a little later (and
// drops the connection, whose reply is still owed) if that answer does not come.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "distributed/settings.h"
#include "distributed/store/store_detail.h"
#include "distributed/store/store_net.h"
#include "distributed/store/store_protocol.h"
#include "loom/distributed/store.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

using proto::Op;
using Clock = std::chrono::steady_clock;

constexpr auto kFirstBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1000);
constexpr size_t kReadChunk = 64 * 1024;

// A broken or closed connection (as opposed to a timeout or an answer).
struct ConnectionLost {
  std::string why;
};
// The deadline of a send or receive passed.
struct DeadlinePassed {};

// How long the client waits past the server-side timeout of a waiting request.
Duration grace(Duration timeout) {
  return std::max<Duration>(Duration(1000), timeout / 10);
}

}  // namespace

struct TCPStore::Impl {
  TCPStoreOptions opt;
  std::string token;
  std::unique_ptr<TCPStoreServer> server;
  int port = 0;
  std::string where;  // "server 127.0.0.1:29500"

  std::mutex mu;
  int fd = -1;     // GUARDED_BY(mu)
  std::string in;  // GUARDED_BY(mu): bytes received and not yet decoded
  std::mt19937_64 rng{std::random_device{}()};

  ~Impl() { drop(); }

  void drop() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    in.clear();
  }

  std::string address() const { return net::host_port(opt.host, port); }

  void send_all(const std::string& bytes, Clock::time_point deadline) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, net::ms_until(deadline)) == 0) throw DeadlinePassed{};
        continue;
      }
      throw ConnectionLost{n < 0 ? std::strerror(errno) : "send returned 0"};
    }
  }

  // Throws ConnectionLost, or DeadlinePassed.
  proto::Frame recv_frame(Clock::time_point deadline) {
    proto::Frame frame;
    for (;;) {
      size_t consumed = 0;
      std::string error;
      auto st = proto::decode(in.data(), in.size(), opt.max_frame_bytes, &frame, &consumed, &error);
      if (st == proto::DecodeStatus::Frame) {
        in.erase(0, consumed);
        if (!proto::is_reply(frame.op)) {
          throw ConnectionLost{std::string("malformed reply: unexpected opcode ") +
                               proto::op_name(frame.op)};
        }
        return frame;
      }
      if (st == proto::DecodeStatus::Error) throw ConnectionLost{"malformed reply: " + error};
      pollfd p{fd, POLLIN, 0};
      int n = ::poll(&p, 1, net::ms_until(deadline));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) throw DeadlinePassed{};
      const size_t old = in.size();
      in.resize(old + kReadChunk);
      ssize_t got = ::recv(fd, in.data() + old, kReadChunk, 0);
      in.resize(old + (got > 0 ? static_cast<size_t>(got) : 0));
      if (got == 0) throw ConnectionLost{"connection closed by the server"};
      if (got < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        throw ConnectionLost{std::strerror(errno)};
      }
    }
  }

  // Connects and says hello, retrying with backoff until the deadline. Caller holds mu.
  void connect(Duration timeout, Clock::time_point deadline, const std::string& context) {
    auto backoff = Duration(kFirstBackoff);
    std::string last;
    for (;;) {
      std::string error;
      fd = net::connect_once(opt.host, port, deadline, &error);
      if (fd >= 0) {
        try {
          std::string hello;
          proto::encode(Op::Hello, {token}, hello, opt.max_frame_bytes, "hello");
          send_all(hello, deadline);
          proto::Frame f = recv_frame(deadline);
          if (f.op == Op::Ok) return;
          drop();
          LOOM_THROW(DistError, "[store] ", where, " refused this client: ",
                     f.fields.empty() ? std::string("no reason given") : f.fields[0],
                     " (the token comes from TCPStoreOptions::token or LOOM_STORE_TOKEN)");
        } catch (const ConnectionLost& e) {
          error = e.why;
          drop();
        } catch (const DeadlinePassed&) {
          error = "no answer to the handshake";
          drop();
        }
      }
      last = error;
      const auto now = Clock::now();
      if (now >= deadline) {
        LOOM_THROW(DistError, "[store] cannot reach ", where, " within ",
                   detail::format_seconds(timeout), context, ": ", last,
                   " (is rank 0 or `loom store` running there?)");
      }
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      auto sleep = std::chrono::duration_cast<Clock::duration>(backoff * jitter(rng));
      std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
      backoff = std::min<Duration>(backoff * 2, kMaxBackoff);
    }
  }

  // Sends one request and returns its reply (never Error / Timeout: those are thrown).
  // `what` is "get('key')"; `wait_timeout` > 0 for requests the server parks; `timeout` (the
  // store's) bounds other replies and reconnecting.
  proto::Frame call(Op op, const std::vector<std::string_view>& fields, const std::string& what,
                    const std::vector<std::string>& keys, Duration wait_timeout, Duration timeout) {
    std::string frame;
    proto::encode(op, fields, frame, opt.max_frame_bytes, what);
    const bool idempotent = op != Op::Add;
    const Duration reply_timeout =
        wait_timeout.count() > 0 ? wait_timeout + grace(wait_timeout) : timeout;
    std::lock_guard<std::mutex> lock(mu);
    Clock::time_point reconnect_deadline{};  // set at the first lost connection
    std::string lost_reason;
    for (;;) {
      if (fd < 0) {
        const auto deadline =
            reconnect_deadline == Clock::time_point{} ? Clock::now() + timeout : reconnect_deadline;
        connect(timeout, deadline,
                lost_reason.empty() ? std::string()
                                    : " (to retry " + what + " after: " + lost_reason + ")");
      }
      const auto deadline = Clock::now() + reply_timeout;
      bool sent = false;
      try {
        send_all(frame, deadline);
        sent = true;
        proto::Frame reply = recv_frame(deadline);
        if (reply.op == Op::Error) {
          LOOM_THROW(ValueError, reply.fields.empty() ? "[store] " + what + " failed on the server"
                                                      : reply.fields[0]);
        }
        if (reply.op == Op::Timeout) {
          detail::throw_wait_timeout(proto::op_name(op), keys, reply.fields, wait_timeout, where);
        }
        return reply;
      } catch (const DeadlinePassed&) {
        drop();  // the reply is still owed on this connection
        detail::throw_wait_timeout(proto::op_name(op), keys, {},
                                   wait_timeout.count() > 0 ? wait_timeout : timeout, where);
      } catch (const ConnectionLost& e) {
        drop();
        if (!idempotent && sent) {
          LOOM_THROW(DistError, "[store] connection to ", where, " lost during ", what, ": ", e.why,
                     "; not retried, since the server may already have applied it");
        }
        lost_reason = e.why;
        if (reconnect_deadline == Clock::time_point{}) reconnect_deadline = Clock::now() + timeout;
      }
    }
  }

  static std::string key_call(const char* op, const std::string& key) {
    return std::string(op) + "('" + detail::printable(key) + "')";
  }
};

TCPStore::TCPStore(TCPStoreOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opt = std::move(options);
  LOOM_CHECK(s.opt.timeout.count() > 0, "[store] TCPStore timeout must be positive but is ",
             s.opt.timeout.count(), " ms");
  s.token = s.opt.token;
  if (s.token.empty()) s.token = settings::kStoreToken.get();
  timeout_ = s.opt.timeout;
  if (s.opt.is_server) {
    TCPStoreServerOptions so;
    so.host = s.opt.host;
    so.port = s.opt.port;
    so.token = s.token;
    so.max_frame_bytes = s.opt.max_frame_bytes;
    s.server = std::make_unique<TCPStoreServer>(so);
    s.port = s.server->port();
  } else {
    LOOM_CHECK(s.opt.port > 0 && s.opt.port <= 65535, "[store] TCPStore port ", s.opt.port,
               " is out of range 1..65535");
    s.port = s.opt.port;
  }
  s.where = "server " + s.address();
  std::lock_guard<std::mutex> lock(s.mu);
  s.connect(s.opt.timeout, Clock::now() + s.opt.timeout, "");
}

TCPStore::~TCPStore() = default;

const std::string& TCPStore::host() const {
  return impl_->opt.host;
}
int TCPStore::port() const {
  return impl_->port;
}

void TCPStore::set(const std::string& key, const std::string& value) {
  impl_->call(Op::Set, {key, value}, Impl::key_call("set", key), {key}, Duration(0), timeout_);
}

std::string TCPStore::get(const std::string& key) {
  auto r = impl_->call(Op::Get, {proto::encode_int(timeout_.count()), key},
                       Impl::key_call("get", key), {key}, timeout_, timeout_);
  LOOM_CHECK_AS(DistError, r.op == Op::Value && r.fields.size() == 1, "[store] ", impl_->where,
                " sent a malformed reply to get('", key, "')");
  return std::move(r.fields[0]);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  auto r = impl_->call(Op::Add, {key, proto::encode_int(delta)}, Impl::key_call("add", key), {key},
                       Duration(0), timeout_);
  int64_t v = 0;
  LOOM_CHECK_AS(DistError,
                r.op == Op::Int && r.fields.size() == 1 && proto::decode_int(r.fields[0], &v),
                "[store] ", impl_->where, " sent a malformed reply to add('", key, "')");
  return v;
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  auto r = impl_->call(Op::CompareSet, {key, expected, desired}, Impl::key_call("compare_set", key),
                       {key}, Duration(0), timeout_);
  LOOM_CHECK_AS(DistError, r.op == Op::Value && r.fields.size() == 1, "[store] ", impl_->where,
                " sent a malformed reply to compare_set('", key, "')");
  return std::move(r.fields[0]);
}

void TCPStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  if (keys.empty()) return;
  const std::string t = proto::encode_int(timeout.count());
  std::vector<std::string_view> fields{t};
  for (const auto& k : keys) fields.emplace_back(k);
  // A zero timeout still asks the server once (it answers at once), hence the floor of 1 ms.
  impl_->call(Op::Wait, fields, "wait(" + detail::quote_keys(keys) + ")", keys,
              std::max(timeout, Duration(1)), timeout_);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string_view> fields(keys.begin(), keys.end());
  auto r = impl_->call(Op::Check, fields, "check(" + detail::quote_keys(keys) + ")", keys,
                       Duration(0), timeout_);
  LOOM_CHECK_AS(DistError, r.op == Op::Bool && r.fields.size() == 1 && r.fields[0].size() == 1,
                "[store] ", impl_->where, " sent a malformed reply to check");
  return r.fields[0][0] != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  auto r = impl_->call(Op::Delete, {key}, Impl::key_call("delete_key", key), {key}, Duration(0),
                       timeout_);
  LOOM_CHECK_AS(DistError, r.op == Op::Bool && r.fields.size() == 1 && r.fields[0].size() == 1,
                "[store] ", impl_->where, " sent a malformed reply to delete_key('", key, "')");
  return r.fields[0][0] != 0;
}

int64_t TCPStore::num_keys() {
  auto r = impl_->call(Op::NumKeys, {}, "num_keys()", {}, Duration(0), timeout_);
  int64_t v = 0;
  LOOM_CHECK_AS(DistError,
                r.op == Op::Int && r.fields.size() == 1 && proto::decode_int(r.fields[0], &v),
                "[store] ", impl_->where, " sent a malformed reply to num_keys");
  return v;
}

std::vector<std::string> TCPStore::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  const std::string t = proto::encode_int(timeout_.count());
  std::vector<std::string_view> fields{t};
  for (const auto& k : keys) fields.emplace_back(k);
  auto r = impl_->call(Op::MultiGet, fields, "multi_get(" + detail::quote_keys(keys) + ")", keys,
                       timeout_, timeout_);
  LOOM_CHECK_AS(DistError, r.op == Op::Value && r.fields.size() == keys.size(), "[store] ",
                impl_->where, " sent a malformed reply to multi_get");
  return std::move(r.fields);
}

void TCPStore::multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values) {
  LOOM_CHECK(keys.size() == values.size(), "[store] multi_set: ", keys.size(), " keys but ",
             values.size(), " values");
  if (keys.empty()) return;
  std::vector<std::string_view> fields;
  fields.reserve(2 * keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    fields.emplace_back(keys[i]);
    fields.emplace_back(values[i]);
  }
  impl_->call(Op::MultiSet, fields, "multi_set(" + detail::quote_keys(keys) + ")", keys,
              Duration(0), timeout_);
}

}  // namespace loom::dist
