// TCPStoreServer internals (distributed layer, internal), shared by tcp_store_server.cpp (the event
// loop, buffers and limits) and tcp_store_requests.cpp (requests and parked waiters). See Note [TCP
// store server loop] and Note [TCP store server limits].
//
// Thread-safety: everything under "loop thread only" is touched by the loop thread alone; the
// counters are atomics read by stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "distributed/store/store_protocol.h"
#include "loom/distributed/store.h"

namespace loom::dist {

namespace store_server {

using Clock = std::chrono::steady_clock;

struct Client {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  std::string in;
  size_t in_pos = 0;
  std::string out;
  size_t out_pos = 0;
  bool authed = false;
  // Replies queued beyond max_client_queue_bytes: its requests are not read until they drain.
  bool throttled = false;
  uint32_t events = 0;         // what epoll watches for it now
  uint64_t parked = 0;         // waiter id, 0 when none
  Clock::time_point progress;  // when throttled: the later of the throttling and the last send
  size_t accounted = 0;        // its buffers' bytes as counted in Impl::buffered

  size_t pending_out() const { return out.size() - out_pos; }
};

struct Waiter {
  uint64_t client = 0;
  proto::Op op = proto::Op::Wait;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  std::string registered_key;  // the missing key it is listed under in waiters_by_key
};

}  // namespace store_server

struct TCPStoreServer::Impl {
  using Client = store_server::Client;
  using Waiter = store_server::Waiter;
  using Clock = store_server::Clock;

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
      n_keys{0}, n_buffered{0}, n_peak_buffered{0}, n_throttled{0}, n_dropped_stalled{0},
      n_dropped_over_budget{0};

  // ---- loop thread only ----
  std::unordered_map<uint64_t, Client> clients;
  std::unordered_map<std::string, std::string> kv;
  std::unordered_map<uint64_t, Waiter> waiters;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_by_key;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines;
  std::vector<uint64_t> resume;  // clients whose parked or throttled requests may go on
  std::set<uint64_t> throttled;  // ids of throttled clients (stall deadlines)
  size_t buffered = 0;           // sum of every client's `accounted`
  std::vector<char> read_buf;    // one recv() at a time, appended to a client's input
  uint64_t next_id = 2;
  bool accept_paused = false;
  Clock::time_point accept_resume_at;

  ~Impl();

  void bind_and_listen();
  void loop();
  void loop_once();
  void accept_clients();
  void on_readable(Client& c);
  void process(uint64_t id);
  bool handle(Client& c, proto::Frame& f);
  void reply(Client& c, proto::Op op, const std::vector<std::string_view>& fields);
  void flush(Client& c);
  void update_interest(Client& c);
  void account(Client& c);
  void enforce_limits(Clock::time_point now);
  void close_client(uint64_t id);
  void reject(uint64_t id, const std::string& reason, bool token);
  void drop(uint64_t id, const std::string& reason, std::atomic<int64_t>& counter);
  void set_key(const std::string& key, std::string value);
  void park(Client& c, proto::Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void notify(const std::string& key);
  void finish_waiter(uint64_t wid, bool timed_out);
  void unregister(uint64_t wid, const Waiter& w);
  void answer(Client& c, proto::Op op, const std::vector<std::string>& keys, bool timed_out);
  int next_timeout_ms();
};

}  // namespace loom::dist
