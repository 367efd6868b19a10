// ProcessGroup internals shared by process_group.cpp (execution) and collectives.cpp (the
// collectives). Internal to the distributed layer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "distributed/algorithms/algorithms.h"
#include "distributed/transport/comm.h"
#include "distributed/group/contract.h"
#include "distributed/transport/transport.h"
#include "loom/distributed/process_group.h"

namespace loom::dist {

// A collective's body: what it does on the Comm once its turn has come.
using CollectiveBody = std::function<void(Comm&)>;

// A non-owning reference to a body, so that a collective run on the caller's thread is called where
// it stands instead of being moved into a std::function (a heap allocation per call).
class BodyRef {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, BodyRef>)
  BodyRef(F& f) : obj_(&f), call_([](void* o, Comm& c) { (*static_cast<F*>(o))(c); }) {}  // NOLINT
  void operator()(Comm& c) const { call_(obj_, c); }

 private:
  void* obj_;
  void (*call_)(void*, Comm&);
};

// Work run by the group's worker (async, or queued behind async work): owns its body until then.
class WorkImpl final : public Work {
 public:
  WorkImpl(const Fingerprint& fp, bool p2p, uint64_t ticket, CollectiveBody body)
      : fp(fp), p2p(p2p), ticket(ticket), body(std::move(body)) {}
  bool wait(Duration timeout = Duration::max()) override;
  bool is_completed() const override;
  std::exception_ptr exception() const override;
  uint64_t sequence_number() const override { return fp.seq; }
  void finish(std::exception_ptr e);

  const Fingerprint fp;
  const bool p2p;
  const uint64_t ticket;  // flight recorder
  CollectiveBody body;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Work of a collective that ran on the caller's thread: complete when handed out (a failure there
// is thrown by the call itself), so it needs no lock, condition variable or stored error.
class DoneWork final : public Work {
 public:
  explicit DoneWork(uint64_t seq) : seq_(seq) {}
  bool wait(Duration) override { return true; }
  bool is_completed() const override { return true; }
  std::exception_ptr exception() const override { return nullptr; }
  uint64_t sequence_number() const override { return seq_; }

 private:
  uint64_t seq_;
};

// LOOM_FLIGHT_DIR, else $TMPDIR/loom-flight-<LOOM_RUN_ID or uid>.
std::string flight_dir();

struct ProcessGroup::Impl {
  Impl(std::shared_ptr<Store> root, int rank, int size, ProcessGroupOptions o);
  ~Impl();

  // A collective on its way in: sequence number and flight ticket assigned, and where it runs.
  struct Submission {
    Fingerprint fp;
    bool p2p = false;
    uint64_t ticket = 0;
    Clock::time_point when;             // scheduled; also the start of a run on the caller's thread
    bool here = false;                  // run on the caller's thread: `lock` holds exec_mu
    std::unique_lock<std::mutex> lock;  // exec_mu when `here`, else submit_mu (queue in call order)
  };

  // Assigns the sequence number, records the collective, and runs it inline or on the worker. The
  // body is copied into an owning std::function only when it is queued.
  template <class F>
  std::shared_ptr<Work> submit(const Fingerprint& fp, bool p2p, F&& body, bool async) {
    Submission s = begin(fp, p2p, async);
    if (s.here) {
      execute(s.fp, s.p2p, s.ticket, s.when, BodyRef(body));
      return std::make_shared<DoneWork>(s.fp.seq);
    }
    return enqueue(s, CollectiveBody(std::forward<F>(body)), async);
  }
  Submission begin(const Fingerprint& fp, bool p2p, bool async);
  std::shared_ptr<Work> enqueue(Submission& s, CollectiveBody body, bool async);
  void execute(const Fingerprint& fp, bool p2p, uint64_t ticket, Clock::time_point start,
               BodyRef body);
  void worker_loop();
  void fail(const std::string& why);
  // Aborts the group with `reason` (Comm::request_abort); closes the links at once and returns true
  // when no collective is running (one that is fails by itself). Thread-safe.
  bool abort_with(const std::string& reason);
  void note_detail_cost(Clock::duration d);
  std::string dump_flight(const std::string& dir) const;
  Fingerprint fingerprint(CollKind kind, DType dtype, IntArrayRef sizes, uint64_t count, int root,
                          int reduce_op) const {
    return make_fingerprint(name_hash, kind, dtype, sizes, count, root, reduce_op);
  }

  std::shared_ptr<Store> root_store;  // shared by every group of the job
  std::shared_ptr<Store> store;       // this group's keys ("pg/<name>/...")
  int rank;
  int size;
  std::string name;
  uint64_t name_hash;  // hash_string(name), for fingerprints
  ProcessGroupOptions opts;
  std::unique_ptr<Comm> comm;
  std::string transport_desc;
  Algo algo = Algo::Auto;
  bool detail = false;
  FlightRecorder flight;

  mutable std::mutex submit_mu;  // call order; guards the sequence counters and subgroup counts
  uint64_t next_seq = 0;
  uint64_t p2p_seq = 0;
  std::map<std::string, int> subgroup_counts;

  mutable std::mutex exec_mu;  // the one thread using comm; guards the fields below
  bool broken = false;
  std::string broken_reason;
  static constexpr int kDetailSample = 10;  // collectives timed for the detail-mode cost notice
  int detail_sampled = 0;
  Clock::duration detail_fastest{};
  // The last allreduce's algorithm and size; described in words only by describe().
  Algo last_algo = Algo::Auto;
  size_t last_algo_bytes = 0;
  void note_allreduce(Algo a, size_t bytes) {
    last_algo = a;
    last_algo_bytes = bytes;
  }

  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::shared_ptr<WorkImpl>> queue;
  bool stopping = false;
  // Queued or running work on the worker: incremented when queued (under submit_mu), decremented
  // once it finished and released exec_mu. Zero means a synchronous call may run inline without
  // looking at the queue under q_mu.
  std::atomic<int64_t> worker_pending{0};
  std::thread worker;
};

}  // namespace loom::dist
