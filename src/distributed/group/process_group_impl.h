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

#include "distributed/group/backend.h"
#include "distributed/group/contract.h"
#include "loom/distributed/process_group.h"

namespace loom::dist {

// A collective's body: what it asks of its backend once its turn has come.
using CollectiveBody = std::function<void(Backend&)>;

// A non-owning reference to a body, so that a collective run on the caller's thread is called where
// it stands instead of being moved into a std::function (a heap allocation per call).
class BodyRef {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, BodyRef>) BodyRef(F& f)
      : obj_(&f), call_([](void* o, Backend& b) { (*static_cast<F*>(o))(b); }) {}  // NOLINT
  void operator()(Backend& b) const { call_(obj_, b); }

 private:
  void* obj_;
  void (*call_)(void*, Backend&);
};

// Work run by the group's worker (async, or queued behind async work): owns its body until then.
class WorkImpl final : public Work {
 public:
  WorkImpl(const Fingerprint& fp, bool p2p, uint64_t ticket, Backend* backend, CollectiveBody body)
      : fp(fp), p2p(p2p), ticket(ticket), backend(backend), body(std::move(body)) {}
  bool wait(Duration timeout = Duration::max()) override;
  bool is_completed() const override;
  std::exception_ptr exception() const override;
  uint64_t sequence_number() const override { return fp.seq; }
  void finish(std::exception_ptr e);

  const Fingerprint fp;
  const bool p2p;
  const uint64_t ticket;  // flight recorder
  Backend* const backend;
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
    Backend* backend = nullptr;
    bool p2p = false;
    uint64_t ticket = 0;
    Clock::time_point when;             // scheduled; also the start of a run on the caller's thread
    bool here = false;                  // run on the caller's thread: `lock` holds exec_mu
    std::unique_lock<std::mutex> lock;  // exec_mu when `here`, else submit_mu (queue in call order)
  };

  // Assigns the sequence number, records the collective, and runs it inline or on the worker. The
  // body is copied into an owning std::function only when it is queued.
  template <class F>
  std::shared_ptr<Work> submit(const Fingerprint& fp, Backend& backend, bool p2p, F&& body,
                               bool async) {
    Submission s = begin(fp, backend, p2p, async);
    if (s.here) {
      execute(s.fp, backend, s.p2p, s.ticket, s.when, BodyRef(body));
      return std::make_shared<DoneWork>(s.fp.seq);
    }
    return enqueue(s, CollectiveBody(std::forward<F>(body)), async);
  }
  Submission begin(const Fingerprint& fp, Backend& backend, bool p2p, bool async);
  std::shared_ptr<Work> enqueue(Submission& s, CollectiveBody body, bool async);
  void execute(const Fingerprint& fp, Backend& backend, bool p2p, uint64_t ticket,
               Clock::time_point start, BodyRef body);
  // The backend for tensors on t's device type (Note [Backend per device type]): made at the first
  // call that needs it. `op` and `what` name the call and the tensor in errors.
  Backend& backend_for(const char* op, const Tensor& t, const char* what) {
    const int type = static_cast<int>(t.device().type());
    if (Backend* b = backends[type].load(std::memory_order_acquire)) return *b;
    return make_backend(op, t, what);
  }
  Backend& make_backend(const char* op, const Tensor& t, const char* what);
  // Calls f(backend) for every backend made so far.
  template <class F>
  void each_backend(F&& f) const {
    for (const auto& b : backends) {
      if (Backend* p = b.load(std::memory_order_acquire)) f(*p);
    }
  }
  void worker_loop();
  void fail(const std::string& why);
  // Aborts the group with `reason` (Backend::request_abort); closes the links at once and returns
  // true when no collective is running (one that is fails by itself). Thread-safe.
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
  BackendContext backend_context;  // what later backends are made from
  Backend* cpu = nullptr;          // the CPU backend, made with the group; also the control plane
  std::string cpu_summary;         // its description when made ("shm x1"), for notices
  std::atomic<Backend*> backends[kNumDeviceTypes] = {};  // by DeviceType; null until made
  std::mutex backends_mu;                                // making a backend
  std::unique_ptr<Backend> owned[kNumDeviceTypes];       // written under backends_mu, once each
  bool detail = false;
  FlightRecorder flight;

  mutable std::mutex submit_mu;  // call order; guards the sequence counters and subgroup counts
  uint64_t next_seq = 0;
  uint64_t p2p_seq = 0;
  std::map<std::string, int> subgroup_counts;

  mutable std::mutex exec_mu;  // the one thread using the backends; guards the fields below
  bool broken = false;
  std::string broken_reason;
  static constexpr int kDetailSample = 10;  // collectives timed for the detail-mode cost notice
  int detail_sampled = 0;
  Clock::duration detail_fastest{};

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
