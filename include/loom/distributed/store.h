// Key-value stores for rendezvous (distributed layer).
//
// Ranks find each other through a store: they publish addresses under keys and wait for their
// peers' keys. The interface follows torch.distributed's Store. Values are byte strings
// (std::string is used as a binary-safe buffer).
//
//   TCPStore    a client of a TCP key-value server. The server (TCPStoreServer) runs an epoll event
//               loop on its own thread; it is embedded in rank 0 by default or runs standalone as
//               `loom store --port P`. Frames are length-prefixed with a size limit; a malformed or
//               oversized frame closes that client with a logged reason and the server keeps
//               serving. An optional shared token (LOOM_STORE_TOKEN) is checked when a client
//               connects. Limits per client and over all clients bound the memory that clients can
//               make the server hold (TCPStoreServerOptions). Clients reconnect with exponential
//               backoff and jitter until the deadline.
//   HashStore   in-memory, for tests and single-process groups.
//   FileStore   one file shared by processes (flock-protected append-only log), for tests and
//               `file://path` rendezvous.
//   PrefixStore prefixes every key, so sub-groups and libraries do not collide.
//
// Timeouts: one deadline model. dist::default_timeout() (LOOM_DIST_TIMEOUT in seconds, else 300 s)
// governs store operations, connects and collectives unless a caller overrides it. Blocking calls
// that run out of time throw TimeoutError naming the operation and the keys; a lost server throws
// DistError.
//
// Thread-safety: every Store method may be called from several threads at once (a TCPStore client
// serialises requests on its one connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::dist {

using Duration = std::chrono::milliseconds;

// LOOM_DIST_TIMEOUT (seconds, may be fractional) or 300 s.
LOOM_API Duration default_timeout();

class LOOM_API Store {
 public:
  virtual ~Store();

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits (up to timeout()) until the key exists, then returns its value.
  virtual std::string get(const std::string& key) = 0;
  // Adds delta to the integer stored at key (absent = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // If key holds `expected` (or is absent and expected is empty), sets it to `desired`. Returns the
  // value now stored; for an absent key and a non-empty `expected` nothing is stored and `expected`
  // is returned (as torch does).
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until every key exists; TimeoutError names the missing keys.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // True when every key exists (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys);
  virtual void multi_set(const std::vector<std::string>& keys,
                         const std::vector<std::string>& values);

  Duration timeout() const { return timeout_; }
  void set_timeout(Duration t) { timeout_ = t; }

 protected:
  Duration timeout_ = default_timeout();
};

class LOOM_API HashStore final : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A store in one file that several processes open. Operations take an exclusive flock, replay the
// log and append to it.
class LOOM_API FileStore final : public Store {
 public:
  explicit FileStore(std::string path);
  ~FileStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  const std::string& path() const { return path_; }

 private:
  struct State;
  std::string path_;
  std::unique_ptr<State> state_;
};

// Starts with the base store's timeout; get() honours its own timeout when set_timeout() changed
// it.
class LOOM_API PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;  // keys of the base store (as torch does)
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// Limits (Note [TCP store server limits] in src/distributed/store/tcp_store_server.cpp): what one
// client, or all of them, may make the server hold. A client that breaks one is closed with a line
// on stderr.
struct TCPStoreServerOptions {
  std::string host = "127.0.0.1";  // address to bind; "0.0.0.0" to accept from other hosts
  int port = 0;                    // 0 = pick a free port (see TCPStoreServer::port())
  std::string token;               // empty = LOOM_STORE_TOKEN, or no token when unset
  size_t max_frame_bytes = 64u << 20;
  // Before a client has sent the token, its frames may be at most this large (the hello frame is
  // 5 bytes plus the token).
  size_t max_unauthenticated_frame_bytes = 4096;
  // Replies queued for one client beyond which its requests are no longer read (until half of them
  // have gone out). One reply may exceed it; nothing more is queued until it drains.
  size_t max_client_queue_bytes = 4u << 20;
  // A client over max_client_queue_bytes that reads none of its replies for this long is closed.
  Duration stalled_client_timeout = std::chrono::seconds(30);
  // All clients' input and output buffers together; beyond it the client holding the most is
  // closed. At least max_frame_bytes.
  size_t max_buffered_bytes = size_t{1} << 30;
  int max_clients = 65536;
};

// The server: binds and listens in the constructor (so port() is valid at once), serves on a
// background thread, stops in the destructor or stop().
class LOOM_API TCPStoreServer {
 public:
  explicit TCPStoreServer(TCPStoreServerOptions options = {});
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const;
  const std::string& host() const;
  void stop();
  // Blocks until stop() is called from another thread (`loom store` waits for SIGINT/SIGTERM with
  // sigwait() and then calls stop()).
  void run_until_stopped();
  // Counters for tests and `loom store`: live clients, clients closed for bad frames / bad token,
  // the bytes held in the clients' buffers, and the limits of Note [TCP store server limits] at
  // work.
  struct Stats {
    int64_t clients = 0;
    int64_t accepted = 0;
    int64_t rejected_frames = 0;  // malformed or oversized frames (also before authentication)
    int64_t rejected_tokens = 0;
    int64_t keys = 0;
    int64_t buffered_bytes = 0;       // now, in every client's input and output buffers
    int64_t peak_buffered_bytes = 0;  // the most at any time
    int64_t throttled = 0;            // times a client's requests stopped being read (queue full)
    int64_t dropped_stalled = 0;  // clients closed for reading no replies (stalled_client_timeout)
    int64_t dropped_over_budget = 0;  // clients closed to get under max_buffered_bytes
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TCPStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  bool is_server = false;  // start a TCPStoreServer in this process (rank 0 by default)
  std::string token;       // empty = LOOM_STORE_TOKEN, or none
  Duration timeout = default_timeout();
  size_t max_frame_bytes = 64u << 20;
};

// One connection; requests from several threads take turns on it, so a get() blocked on a missing
// key delays this client's other requests (the thread that sets the key needs its own TCPStore).
// The constructor connects (retrying until options.timeout) and throws DistError if it cannot.
// With is_server, the embedded server binds options.host:options.port.
class LOOM_API TCPStore final : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  ~TCPStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;

  const std::string& host() const;
  int port() const;  // the server's port (the real one when is_server with port 0)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::dist
