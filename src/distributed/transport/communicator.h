// What collective algorithms see (distributed layer, internal): a communicator of `size` ranks
// connected pairwise by links, with non-blocking sends and receives of byte messages.
//
// Rules an algorithm relies on:
//   - Messages from rank a to rank b arrive in the order a posted them, and are matched to b's
//     receives from a in the order b posted those. Each receive must have exactly the size of its
//     matching send; a mismatch is a DistError naming both ranks and the sizes (a safety net under
//     the contract checker).
//   - A message may arrive before its receive is posted (the transport keeps it), so posting order
//     between different peers cannot deadlock. Algorithms still post receives before waiting on
//     sends so that large messages go straight into their destination.
//   - wait() drives progress on every link with pending requests, helps peers with the sends they
//     are copying (Link::help) and blocks (spin or yield, then a doorbell or poll()) until the
//     request completes. It throws DistError when a peer's link breaks and when the
//     deadline passes, naming the peer and the running collective (set_context).
//   - Sending to or receiving from oneself is not allowed: algorithms copy locally.
//
// Ownership: the Comm owns its links. Request pointers stay valid until reset() (called by the
// process group at the start of each collective). Thread-safety: one thread at a time (the group's
// worker).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/export.h"

struct pollfd;

namespace loom::dist {

using Clock = std::chrono::steady_clock;

struct Request {
  enum Kind : uint8_t { Send, Recv };
  Kind kind = Send;
  int peer = -1;
  char* data = nullptr;  // for sends, the bytes are only read
  size_t bytes = 0;
  size_t done = 0;     // bytes moved so far (transport-private meaning while in flight)
  uint32_t parts = 0;  // transport-private (e.g. TCP channel slices still in flight)
  bool complete = false;
};

// Note [Doorbells]
// A way to sleep until a peer made progress, without polling: a pair of words in memory the peers
// share (for shared-memory links, the header of this rank's inbox segment). The owner announces
// itself in `sleepers`, re-checks its links, then sleeps on `rings` with a futex; a peer that moved
// anything this rank may wait for (wrote a message, consumed one, acknowledged a read) calls
// notify(), which wakes it only when someone sleeps. The announce-then-check on one side and the
// publish-then-check (with a full fence between) on the other make a lost wake-up impossible: at
// least one side sees the other's store. A sleep is still bounded (Comm::wait), so a peer that died
// without ringing is noticed by the liveness checks.
struct Doorbell {
  std::atomic<uint32_t> rings;     // bumped by notify(); the futex word
  std::atomic<uint32_t> sleepers;  // owners asleep (or about to sleep) on `rings`
  // Peer side: call after publishing progress. Costs one fence when nobody sleeps.
  void notify();
  // Owner side: sleep until `rings` differs from `seen` or `timeout` passes; false on timeout.
  bool sleep(uint32_t seen, std::chrono::microseconds timeout);
};

// One peer. Implementations: TCP (src/distributed/transport/tcp_link.cpp), shared memory
// (shm_link.cpp), in-process (local_link.cpp, for tests).
class Link {
 public:
  virtual ~Link() = default;
  // Queues a request. Requests of one kind complete in posting order.
  virtual void post(Request* r) = 0;
  // Advances queued requests without blocking; returns true if any byte moved. Throws DistError
  // when the peer is gone or sent a message of the wrong size.
  virtual bool progress() = 0;
  // Appends descriptors that poll() can wait on when nothing moves, with the events wanted now.
  // Returns false when the link must instead be polled by calling progress() (shared memory,
  // in-process).
  virtual bool add_poll_fds(std::vector<struct pollfd>& out) const { return false; }
  // The doorbell peers ring after progress on this link (Note [Doorbells]); null when the link
  // cannot wake a sleeper (then add_poll_fds() or polling applies).
  virtual Doorbell* doorbell() const { return nullptr; }
  // Throws DistError when the peer is known to be gone; called after a sleep that nobody ended.
  virtual void check_alive() {}
  // Called when this rank would otherwise wait idle: takes over work the peer would do for a
  // pending send (shared memory: Note [Cooperative copies]). True if anything moved.
  virtual bool help() { return false; }
  virtual uint64_t bytes_helped() const { return 0; }
  virtual bool has_pending() const = 0;
  virtual const char* kind() const = 0;
  // Tears the link down; pending and later requests fail with DistError.
  virtual void close() = 0;
};

class LOOM_API Comm {
 public:
  // links[peer] for every peer, null at links[rank].
  Comm(int rank, int size, std::vector<std::unique_ptr<Link>> links);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // This rank and the group's size; inside a SubGroup, within its members (Note [Sub-groups]).
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The whole group, whatever SubGroup is active.
  int world_rank() const { return world_rank_; }
  int world_size() const { return static_cast<int>(links_.size()); }

  // Which host each rank of the group runs on: host_of()[r] is a host index, numbered in order of
  // first appearance (rank 0's host is 0). Empty when unknown, which counts as one host.
  void set_host_of(std::vector<int> host_of);
  const std::vector<int>& host_of() const { return host_of_; }

  // Note [Sub-groups]
  // A hierarchical algorithm runs ordinary algorithms on subsets of the group: the ranks of one
  // host, then one rank of each host. A SubGroup restricts the Comm to `members` (group ranks in
  // the order that gives their sub-group ranks; this rank among them) until it is destroyed:
  // rank() and size() then count within the members, and peers given to isend/irecv/link are
  // member indices. Requests keep group ranks (errors name the real peer). The links, the
  // scratch buffers, the deadline and abort are the Comm's own, so an algorithm runs unchanged
  // inside. Sub-groups do not nest; the Comm's thread owns them like everything else.
  class SubGroup {
   public:
    SubGroup(Comm& c, std::vector<int> members);
    ~SubGroup();
    SubGroup(const SubGroup&) = delete;
    SubGroup& operator=(const SubGroup&) = delete;

   private:
    Comm& c_;
  };

  Request* isend(int peer, const void* data, size_t bytes);
  Request* irecv(int peer, void* data, size_t bytes);
  void wait(Request* r);
  // Drives every link once without blocking; true when r (null: nothing) has completed.
  bool test(Request* r);
  void wait_all();  // every request posted since reset()
  // Blocking conveniences.
  void send(int peer, const void* data, size_t bytes) { wait(isend(peer, data, bytes)); }
  void recv(int peer, void* data, size_t bytes) { wait(irecv(peer, data, bytes)); }

  // Forgets completed requests; called between collectives.
  void reset();
  // What is running, for error messages ("allreduce #7 in group 'world'"), and its deadline. The
  // second form formats the text only when an error needs it (describe(arg)), so the hot path of a
  // small collective builds no strings.
  void set_context(std::string what, Clock::time_point deadline);
  void set_context(std::string (*describe)(const void*), const void* arg,
                   Clock::time_point deadline);
  std::string context() const { return describe_ ? describe_(describe_arg_) : context_; }
  // Text appended to link-failure errors (e.g. the root cause another rank published).
  void set_failure_probe(std::string (*probe)(void*), void* arg) {
    probe_ = probe;
    probe_arg_ = arg;
  }

  Link* link(int peer) const { return links_[static_cast<size_t>(group_rank(peer))].get(); }
  const char* link_kind(int peer) const;
  // A scratch buffer of at least `bytes`, reused across collectives (so large collectives do not
  // page-fault fresh memory each call). Slots 0, 1 and 2 are independent buffers: 0 for the
  // algorithms, 1 for the process group, 2 for hierarchical algorithms (their per-host block).
  char* scratch(size_t bytes, int slot = 0);

  // More ranks than cores on this host: waits yield for LOOM_DIST_YIELD_US instead of spinning for
  // LOOM_DIST_SPIN_US (both read when the Comm is made), then sleep (Note [Waiting]).
  void set_oversubscribed(bool on) { oversubscribed_ = on; }
  bool oversubscribed() const { return oversubscribed_; }
  // Waits that slept on a doorbell, and those of them no peer ended (they ran to kMaxSleep).
  uint64_t doorbell_sleeps() const { return sleeps_; }
  uint64_t doorbell_timeouts() const { return sleep_timeouts_; }
  // Bytes this rank copied into peers' receives while it waited (Note [Cooperative copies]).
  uint64_t bytes_helped() const;

  // Abort: any thread may call request_abort(); waits then fail with DistError naming the running
  // collective, this rank, the peer waited for and `reason` ("aborted by SIGTERM"). close_all()
  // tears the links down and is called by the owning thread.
  void request_abort(const std::string& reason = {});
  void close_all();
  bool closed() const { return closed_.load(); }
  // Why the Comm was aborted ("the group was aborted" when no reason was given).
  std::string abort_reason() const;

 private:
  [[noreturn]] void fail(int peer, const std::string& why);
  [[noreturn]] void fail_aborted(int peer);
  bool each_pending(bool (Link::*step)());
  bool progress_once();
  void block(Request* r, std::vector<struct pollfd>& fds);
  bool help_once();
  void check_alive();
  // A peer index of the active SubGroup (or the group) as a group rank.
  int group_rank(int peer) const {
    return members_.empty() ? peer : members_[static_cast<size_t>(peer)];
  }

  // The longest doorbell sleep: a peer that dies without ringing is noticed this late at most.
  static constexpr std::chrono::microseconds kMaxSleep{10000};

  int rank_;  // within the active SubGroup, else world_rank_
  int size_;
  int world_rank_;
  std::vector<int> members_;  // the active SubGroup's group ranks; empty: none active
  std::vector<int> host_of_;
  std::vector<std::unique_ptr<Link>> links_;
  std::deque<Request> requests_;
  std::string context_ = "collective";
  std::string (*describe_)(const void*) = nullptr;
  const void* describe_arg_ = nullptr;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::string (*probe_)(void*) = nullptr;
  void* probe_arg_ = nullptr;
  std::atomic<bool> closed_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;  // GUARDED_BY(abort_mu_)
  bool oversubscribed_ = false;
  std::chrono::microseconds spin_;   // LOOM_DIST_SPIN_US (Note [Waiting])
  std::chrono::microseconds yield_;  // LOOM_DIST_YIELD_US (Note [Waiting])
  uint64_t sleeps_ = 0;
  uint64_t sleep_timeouts_ = 0;
  std::vector<char> scratch_[3];
};

}  // namespace loom::dist
