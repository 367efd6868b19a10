// ProcessGroup internals shared by process_group.cpp (execution) and collectives.cpp (the
// collectives). Internal to the dist layer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "dist/algorithms.h"
#include "dist/comm.h"
#include "dist/contract.h"
#include "dist/transport.h"
#include "loom/dist/process_group.h"

namespace loom::dist {

class WorkImpl final : public Work {
 public:
  explicit WorkImpl(uint64_t seq) : seq_(seq) {}
  bool wait(Duration timeout = Duration::max()) override;
  bool is_completed() const override;
  std::exception_ptr exception() const override;
  uint64_t sequence_number() const override { return seq_; }
  void finish(std::exception_ptr e);

  std::function<void()> run;

 private:
  uint64_t seq_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// LOOM_FLIGHT_DIR, else $TMPDIR/loom-flight-<LOOM_RUN_ID or uid>.
std::string flight_dir();

struct ProcessGroup::Impl {
  using Body = std::function<void(Comm&)>;

  Impl(std::shared_ptr<Store> root, int rank, int size, ProcessGroupOptions o);
  ~Impl();

  // Assigns the sequence number, records the collective, and runs it inline or on the worker.
  std::shared_ptr<Work> submit(Fingerprint fp, bool p2p, Body body, bool async);
  void execute(const Fingerprint& fp, bool p2p, uint64_t ticket, const Body& body);
  void worker_loop();
  void fail(const std::string& why);
  std::string dump_flight(const std::string& dir) const;
  Fingerprint fingerprint(CollKind kind, DType dtype, IntArrayRef sizes, uint64_t count, int root,
                          int reduce_op) const {
    return make_fingerprint(name, kind, dtype, sizes, count, root, reduce_op);
  }

  std::shared_ptr<Store> root_store;  // shared by every group of the job
  std::shared_ptr<Store> store;       // this group's keys ("pg/<name>/...")
  int rank;
  int size;
  std::string name;
  ProcessGroupOptions opts;
  std::unique_ptr<Comm> comm;
  std::string transport_desc;
  Algo algo = Algo::kAuto;
  bool detail = false;
  FlightRecorder flight;

  mutable std::mutex submit_mu;  // call order; guards the sequence counters and subgroup counts
  uint64_t next_seq = 0;
  uint64_t p2p_seq = 0;
  std::map<std::string, int> subgroup_counts;

  mutable std::mutex exec_mu;  // the one thread using comm; guards the fields below
  bool broken = false;
  std::string broken_reason;
  // The last allreduce's algorithm and size; described in words only by describe().
  Algo last_algo = Algo::kAuto;
  size_t last_algo_bytes = 0;
  void note_allreduce(Algo a, size_t bytes) {
    last_algo = a;
    last_algo_bytes = bytes;
  }

  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::shared_ptr<WorkImpl>> queue;
  bool inflight = false;
  bool stopping = false;
  std::thread worker;
};

}  // namespace loom::dist
