// Process groups (distributed layer): collectives over CPU tensors between processes.
//
// A ProcessGroup connects `size` ranks through a store (each group keys its records under its own
// prefix), with shared-memory links to peers on the same host and TCP links to the others.
// Collective algorithms (src/distributed/algorithms/) only see the links, never the transport. The
// group is a façade: it checks, numbers and records every call, then hands it to the backend that
// the tensors' device picks (src/distributed/group/backend.h): CPU tensors the CPU backend; CUDA
// tensors the NCCL backend, which this build does not have (NotImplementedError, before the call is
// numbered).
//
// Execution: a collective called with async_op = false runs on the caller's thread (after any async
// work queued before it), so small collectives pay no thread handoff; async_op = true queues it on
// the group's worker thread and returns at once. Either way the returned Work completes in call
// order and reports an exception through wait(). Every collective gets the group's next sequence
// number.
//
// Contract: with LOOM_DIST_DEBUG=detail (or Options::debug_detail), every collective first
// exchanges a fingerprint (group, sequence number, op, dtype, count/shape, root, reduce op) and a
// mismatch raises DistError on every involved rank, naming the ranks, the sequence number and each
// differing field, before any data moves. A flight recorder keeps the last N collectives of the
// group (scheduled, started, completed, with timestamps) and dumps them to LOOM_FLIGHT_DIR on a
// timeout or error, for `loom dist-debug DIR`.
//
// Faults: a dead or hung peer makes the collective throw DistError naming the peer and the
// collective within the timeout; the group is then unusable (abort() tears down every connection; a
// later call throws at once). SIGTERM and SIGINT abort every group
// (abort_process_groups_from_signal below).
//
// Thread-safety: calls on one group may come from several threads; they are ordered by a mutex in
// call order. Tensors must stay alive and untouched until their Work completes.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/distributed/reduce_op.h"
#include "loom/distributed/store.h"
#include "loom/export.h"
#include "loom/tensor.h"

namespace loom::dist {

class LOOM_API Work {
 public:
  virtual ~Work();
  // Blocks until done; rethrows the collective's error. Returns false if `timeout` passed first
  // (Duration::max() = no limit beyond the group's own deadline).
  virtual bool wait(Duration timeout = Duration::max()) = 0;
  virtual bool is_completed() const = 0;
  virtual std::exception_ptr exception() const = 0;
  virtual uint64_t sequence_number() const = 0;
};

struct ProcessGroupOptions {
  Duration timeout = default_timeout();
  std::string name = "world";  // unique among groups sharing a store
  std::string algo;            // allreduce algorithm: ring|tree|dbt|rhd (default LOOM_ALGO or auto)
  std::string transport;       // auto|tcp|shm (default LOOM_TRANSPORT or auto)
  int tcp_channels = 0;        // 0 = LOOM_TCP_CHANNELS or 2
  int debug_detail = -1;       // -1 = from LOOM_DIST_DEBUG; 0 off; 1 detail
  int flight_entries = 2000;   // flight recorder ring size (LOOM_FLIGHT_ENTRIES)
};

struct CollectiveOptions {
  bool async_op = false;
};

class LOOM_API ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // Connects to every other rank (collective over all `size` ranks).
  static std::shared_ptr<ProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                              ProcessGroupOptions options = {});
  ~ProcessGroup();

  int rank() const;
  int size() const;
  const std::string& name() const;
  // Next sequence number this group will assign.
  uint64_t sequence_number() const;
  // "ring allreduce over shm x1" etc.: transports per peer and the last algorithm chosen, with why.
  std::string describe() const;

  using WorkPtr = std::shared_ptr<Work>;
  WorkPtr broadcast(Tensor& tensor, int root, CollectiveOptions o = {});
  WorkPtr allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum, CollectiveOptions o = {});
  // Several tensors of one dtype reduced as one flat buffer (what data-parallel buckets use).
  WorkPtr allreduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum,
                              CollectiveOptions o = {});
  WorkPtr reduce(Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum, CollectiveOptions o = {});
  // outputs[r] receives rank r's input; sizes may differ between ranks (uneven allgather), each
  // output must have the numel of that rank's input.
  WorkPtr allgather(std::vector<Tensor>& outputs, const Tensor& input, CollectiveOptions o = {});
  // output holds size() * input.numel() elements, rank r's at [r*n, (r+1)*n).
  WorkPtr allgather_into_tensor(Tensor& output, const Tensor& input, CollectiveOptions o = {});
  // inputs[r] is this rank's contribution to rank r's output; numels may differ per r.
  WorkPtr reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                         ReduceOp op = ReduceOp::Sum, CollectiveOptions o = {});
  // input holds size() * output.numel() elements.
  WorkPtr reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum,
                                CollectiveOptions o = {});
  // Equal splits: input and output hold size() blocks of numel/size.
  WorkPtr alltoall(Tensor& output, const Tensor& input, CollectiveOptions o = {});
  // Splits in elements along the flat tensors (must sum to the numels).
  WorkPtr alltoallv(Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                    const std::vector<int64_t>& input_splits, CollectiveOptions o = {});
  // outputs used on root only (size() tensors, numel of each rank's input).
  WorkPtr gather(std::vector<Tensor>& outputs, const Tensor& input, int root,
                 CollectiveOptions o = {});
  // inputs used on root only.
  WorkPtr scatter(Tensor& output, const std::vector<Tensor>& inputs, int root,
                  CollectiveOptions o = {});
  WorkPtr barrier(CollectiveOptions o = {});
  // Point to point. Matched in order per (src, dst) pair; do not count toward collective sequence.
  WorkPtr send(const Tensor& tensor, int dst, CollectiveOptions o = {});
  WorkPtr recv(Tensor& tensor, int src, CollectiveOptions o = {});

  // A group of some of this group's ranks. Only members call it (in the same order for the same
  // ranks); non-members need not take part. Returns nullptr on non-members that call it anyway.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks,
                                          ProcessGroupOptions o = {});
  // Every rank calls it: ranks with the same color form a group, ordered by (key, rank). color < 0
  // gives nullptr (no group), like MPI_UNDEFINED.
  std::shared_ptr<ProcessGroup> split(int color, int key, ProcessGroupOptions o = {});

  // Tears down every connection; pending and later collectives throw DistError. Thread-safe.
  void abort();
  // The same, with the reason the DistError gives ("aborted: <reason>").
  void abort(const std::string& reason);

  // Flight recorder as JSON lines (for tests and `loom dist-debug`); dump_flight_record writes it
  // to dir/flight-<group>-rank<r>.json and returns the path.
  std::string flight_record_json() const;
  std::string dump_flight_record(const std::string& dir) const;

  struct Impl;

 private:
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Stop signals (Note [Stop signals] in src/distributed/group/signal_abort.cpp):
// ProcessGroup::create installs handlers for SIGTERM and SIGINT where they have the default
// disposition. A signal then aborts every group of the process: the collective that waits throws
// DistError "aborted by SIGTERM", its flight record is written, and the process ends by the signal
// (status 128 + signo). An application with its own handler keeps it; that handler may call this
// function (it is async-signal-safe) to abort every group the same way without ending the process.
LOOM_API void abort_process_groups_from_signal(int sig) noexcept;

// The default group, from a rendezvous (env://, tcp://host:port, file://path). Also sets the group
// returned by default_group().
LOOM_API std::shared_ptr<ProcessGroup> init_process_group(const std::string& init_method = "env://",
                                                          int rank = -1, int world_size = -1,
                                                          ProcessGroupOptions options = {});
LOOM_API std::shared_ptr<ProcessGroup> default_group();
LOOM_API void destroy_process_group();

}  // namespace loom::dist
