// Connecting a group: every rank publishes one record in the store, reads its peers' records, and
// builds a shared-memory link to each peer on its host and a TCP link to the others.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "distributed/settings.h"
#include "distributed/transport/shm_segments.h"
#include "distributed/transport/transport.h"
#include "loom/distributed/store.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"

namespace loom::dist {

namespace {

constexpr uint32_t kHelloMagic = 0x4c4f4f4d;

struct Record {
  std::string host;
  int pid = 0;
  std::string tcp_addr;  // advertised for other hosts
  int tcp_port = 0;
  uint64_t nonce = 0;
  std::string shm_name;
  uint64_t cma_addr = 0;
};

std::string encode(const Record& r) {
  std::ostringstream os;
  os << r.host << '\n'
     << r.pid << '\n'
     << r.tcp_addr << '\n'
     << r.tcp_port << '\n'
     << r.nonce << '\n'
     << r.shm_name << '\n'
     << r.cma_addr << '\n';
  return os.str();
}

Record decode(const std::string& s, int rank) {
  std::istringstream is(s);
  Record r;
  std::string line;
  auto next = [&]() -> std::string {
    LOOM_CHECK_AS(DistError, static_cast<bool>(std::getline(is, line)),
                  "[dist] transport record of rank ", rank, " is malformed");
    return line;
  };
  r.host = next();
  r.pid = std::stoi(next());
  r.tcp_addr = next();
  r.tcp_port = std::stoi(next());
  r.nonce = std::stoull(next());
  r.shm_name = next();
  r.cma_addr = std::stoull(next());
  return r;
}

std::string advertised_address() {
  if (std::string a = settings::kSocketAddr.get(); !a.empty()) return a;
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  std::string out = "127.0.0.1";
  if (::getaddrinfo(host, nullptr, &hints, &res) == 0) {
    for (addrinfo* p = res; p; p = p->ai_next) {
      char buf[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(p->ai_addr);
      if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) &&
          std::strncmp(buf, "127.", 4) != 0) {
        out = buf;
        break;
      }
    }
    ::freeaddrinfo(res);
  }
  return out;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.release()) {}
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

void tune_socket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int ms_left(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d < 0 ? 0 : static_cast<int>(std::min<long long>(d, 1 << 30));
}

// Blocking I/O of exactly n bytes with a deadline (setup only).
void io_exact(int fd, void* buf, size_t n, bool writing, Clock::time_point deadline,
              const std::string& what) {
  size_t done = 0;
  while (done < n) {
    pollfd p{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    int pr = ::poll(&p, 1, ms_left(deadline));
    LOOM_CHECK_AS(TimeoutError, pr != 0, "[dist] ", what, ": timed out");
    if (pr < 0 && errno == EINTR) continue;
    ssize_t r = writing ? ::send(fd, static_cast<char*>(buf) + done, n - done, MSG_NOSIGNAL)
                        : ::recv(fd, static_cast<char*>(buf) + done, n - done, 0);
    if (r <= 0) {
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      LOOM_THROW(DistError, "[dist] ", what, ": ",
                 r == 0 ? "connection closed" : std::strerror(errno));
    }
    done += static_cast<size_t>(r);
  }
}

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t channel;
  int32_t pad;
  uint64_t nonce;  // the acceptor's nonce, proving the connector read the same store
};

int connect_to(const std::string& addr, int port, int peer, Clock::time_point deadline) {
  int backoff_ms = 1;
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    LOOM_CHECK_AS(DistError, fd >= 0, "[dist] socket(): ", std::strerror(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
      ::close(fd);
      LOOM_THROW(DistError, "[dist] rank ", peer, " advertised a bad address '", addr, "'");
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      tune_socket(fd);
      return fd;
    }
    int e = errno;
    ::close(fd);
    LOOM_CHECK_AS(TimeoutError, Clock::now() <= deadline, "[dist] connecting to rank ", peer,
                  " at ", addr, ":", port, " timed out: ", std::strerror(e));
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 100);
  }
}

}  // namespace

TransportOptions transport_options_from_env() {
  TransportOptions o;
  o.transport = settings::kTransport.get();
  o.tcp_channels = static_cast<int>(settings::kTcpChannels.get());
  o.cma_min_bytes = static_cast<size_t>(settings::kShmCmaMin.get());
  return o;
}

std::vector<std::unique_ptr<Link>> connect_links(Store& store, int rank, int size,
                                                 const TransportOptions& opts,
                                                 std::string* describe, int* local_ranks,
                                                 std::vector<int>* host_of) {
  std::vector<std::unique_ptr<Link>> links(static_cast<size_t>(size));
  if (local_ranks) *local_ranks = 1;
  if (host_of) host_of->assign(static_cast<size_t>(size), 0);
  if (size == 1) {
    if (describe) *describe = "single rank";
    return links;
  }
  const bool want_shm = opts.transport != "tcp";
  const bool want_tcp = opts.transport != "shm";
  std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 20) ^
                      static_cast<uint64_t>(Clock::now().time_since_epoch().count()));

  Record me;
  me.host = host_identity();
  me.pid = static_cast<int>(::getpid());
  me.nonce = rng();
  me.cma_addr = cma_probe_address();

  // TCP listener.
  Fd listener;
  if (want_tcp) {
    listener.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    LOOM_CHECK_AS(DistError, listener.fd >= 0, "[dist] socket(): ", std::strerror(errno));
    int one = 1;
    ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    std::string bind_host = !opts.bind_host.empty()          ? opts.bind_host
                            : settings::kSocketAddr.is_set() ? advertised_address()
                                                             : "0.0.0.0";
    LOOM_CHECK(::inet_pton(AF_INET, bind_host.c_str(), &sa.sin_addr) == 1,
               "[dist] bad bind address '", bind_host, "'");
    LOOM_CHECK_AS(DistError, ::bind(listener.fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0,
                  "[dist] bind(", bind_host, "): ", std::strerror(errno));
    LOOM_CHECK_AS(DistError, ::listen(listener.fd, SOMAXCONN) == 0,
                  "[dist] listen(): ", std::strerror(errno));
    socklen_t len = sizeof(sa);
    ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&sa), &len);
    me.tcp_port = ntohs(sa.sin_port);
    me.tcp_addr = advertised_address();
  }

  // Shared-memory inbox (unlinked once every local peer has mapped it).
  std::shared_ptr<ShmSegment> inbox;
  struct Unlinker {
    std::string name;
    ~Unlinker() {
      if (!name.empty()) shm_unlink(name);
    }
  } unlinker;
  if (want_shm) {
    // Segments of ranks killed while they connected (Note [Orphaned segments]).
    const std::string swept = dist::describe(remove_orphan_segments());
    if (!swept.empty()) std::fprintf(stderr, "[dist] rank %d: %s\n", rank, swept.c_str());
    me.shm_name = shm_segment_name(rank, rng() & 0xffffffffffull);
    inbox = shm_create_inbox(me.shm_name, size, opts.shm_ring_bytes);
    unlinker.name = me.shm_name;
  }

  store.set("tp/" + std::to_string(rank), encode(me));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("tp/" + std::to_string(r));
  store.wait(keys, std::chrono::duration_cast<Duration>(opts.deadline - Clock::now()));
  std::vector<std::string> raw = store.multi_get(keys);
  std::vector<Record> recs;
  for (int r = 0; r < size; ++r) recs.push_back(decode(raw[static_cast<size_t>(r)], r));
  if (host_of) {
    std::vector<std::string> seen;
    for (int r = 0; r < size; ++r) {
      const std::string& h = recs[static_cast<size_t>(r)].host;
      auto it = std::find(seen.begin(), seen.end(), h);
      (*host_of)[static_cast<size_t>(r)] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(h);
    }
  }

  std::vector<bool> local(static_cast<size_t>(size));
  int n_shm = 0, n_tcp = 0, n_cma = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    bool same_host = recs[static_cast<size_t>(p)].host == me.host;
    LOOM_CHECK_AS(DistError, !(opts.transport == "shm" && !same_host),
                  "[dist] LOOM_TRANSPORT=shm but rank ", p, " is on another host (",
                  recs[static_cast<size_t>(p)].host, ")");
    local[static_cast<size_t>(p)] = want_shm && same_host;
    // Hosts emulated on one machine (network namespaces, LOOM_HOST_ID="machine/name") share its
    // cores: their ranks count for oversubscription (Note [Waiting]) though they use TCP.
    const std::string& peer = recs[static_cast<size_t>(p)].host;
    if (local_ranks && peer.substr(0, peer.find('/')) == me.host.substr(0, me.host.find('/')))
      ++*local_ranks;
  }

  // Shared memory: map the peers' inboxes and test single-copy reads.
  std::vector<std::shared_ptr<ShmSegment>> outbox(static_cast<size_t>(size));
  std::vector<bool> coop(static_cast<size_t>(size));
  const bool no_cma = settings::kShmNoCma.get();
  const bool no_coop = no_cma || settings::kShmNoCoop.get();
  for (int p = 0; p < size; ++p) {
    if (p == rank || !local[static_cast<size_t>(p)]) continue;
    const Record& pr = recs[static_cast<size_t>(p)];
    outbox[static_cast<size_t>(p)] = shm_open_inbox(pr.shm_name);
    bool ok = !no_cma && cma_probe(pr.pid, pr.cma_addr);
    shm_mark_cma(*inbox, p, ok);
    coop[static_cast<size_t>(p)] = !no_coop && cma_write_probe(pr.pid, pr.cma_addr);
  }

  // TCP: connect to lower ranks, accept from higher ones.
  const int channels = std::max(1, opts.tcp_channels);
  std::vector<std::vector<int>> fds(static_cast<size_t>(size), std::vector<int>(channels, -1));
  std::vector<Fd> owned;  // closes everything if setup throws
  owned.reserve(static_cast<size_t>(size * channels));
  int expected_incoming = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank || local[static_cast<size_t>(p)]) continue;
    if (p > rank) {
      expected_incoming += channels;
      continue;
    }
    const Record& pr = recs[static_cast<size_t>(p)];
    std::string addr = pr.host == me.host ? "127.0.0.1" : pr.tcp_addr;
    for (int c = 0; c < channels; ++c) {
      int fd = connect_to(addr, pr.tcp_port, p, opts.deadline);
      owned.emplace_back(fd);
      Hello h{kHelloMagic, rank, c, 0, pr.nonce};
      io_exact(fd, &h, sizeof(h), true, opts.deadline, detail::str_cat("handshake with rank ", p));
      fds[static_cast<size_t>(p)][static_cast<size_t>(c)] = fd;
    }
  }
  while (expected_incoming > 0) {
    pollfd pl{listener.fd, POLLIN, 0};
    int pr = ::poll(&pl, 1, ms_left(opts.deadline));
    if (pr == 0) {
      std::string missing;
      for (int p = rank + 1; p < size; ++p) {
        if (!local[static_cast<size_t>(p)] && fds[static_cast<size_t>(p)][0] < 0) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        }
      }
      LOOM_THROW(TimeoutError, "[dist] rank ", rank,
                 " timed out waiting for TCP connections from rank(s) ", missing);
    }
    if (pr < 0) continue;
    int fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Fd guard(fd);
    Hello h{};
    io_exact(fd, &h, sizeof(h), false, opts.deadline, "handshake");
    if (h.magic != kHelloMagic || h.nonce != me.nonce || h.rank <= rank || h.rank >= size ||
        h.channel < 0 || h.channel >= channels || local[static_cast<size_t>(h.rank)] ||
        fds[static_cast<size_t>(h.rank)][static_cast<size_t>(h.channel)] >= 0) {
      continue;  // a stray or duplicate connection: drop it
    }
    tune_socket(fd);
    fds[static_cast<size_t>(h.rank)][static_cast<size_t>(h.channel)] = fd;
    owned.emplace_back(guard.release());
    --expected_incoming;
  }

  // Every local peer has mapped our inbox and recorded its single-copy test once it is ready.
  store.set("tp/" + std::to_string(rank) + "/ready", "1");
  std::vector<std::string> ready;
  for (int p = 0; p < size; ++p) {
    if (p != rank && local[static_cast<size_t>(p)])
      ready.push_back("tp/" + std::to_string(p) + "/ready");
  }
  if (!ready.empty())
    store.wait(ready, std::chrono::duration_cast<Duration>(opts.deadline - Clock::now()));

  for (auto& f : owned) f.release();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    if (local[static_cast<size_t>(p)]) {
      links[static_cast<size_t>(p)] = make_shm_link(
          rank, p, recs[static_cast<size_t>(p)].pid, inbox, outbox[static_cast<size_t>(p)],
          opts.cma_min_bytes, coop[static_cast<size_t>(p)]);
      ++n_shm;
    } else {
      for (int fd : fds[static_cast<size_t>(p)]) set_nonblocking(fd);
      links[static_cast<size_t>(p)] = make_tcp_link(rank, TcpPeer{p, fds[static_cast<size_t>(p)]});
      ++n_tcp;
    }
  }
  (void)n_cma;
  if (describe) {
    std::ostringstream os;
    if (n_shm) os << "shm x" << n_shm;
    if (n_shm && n_tcp) os << ", ";
    if (n_tcp)
      os << "tcp x" << n_tcp << " (" << channels << " channel" << (channels > 1 ? "s" : "") << ")";
    *describe = os.str();
  }
  return links;
}

}  // namespace loom::dist
