// Process-group backends (distributed layer, internal; exported for tests): what moves the data of
// a collective once the façade (ProcessGroup) has checked its arguments, given it a sequence
// number, recorded it in the flight recorder and, in detail mode, checked its contract.
//
// One backend per device type and group: the tensors' device picks it (CPU tensors: the CPU backend
// over shared memory and TCP; CUDA tensors: the NCCL slot, a stub in this build). The CPU backend
// is made with the group, since the group also uses it for its own control messages (contract
// fingerprints); others are made at their group's first call on their device type, in call order,
// so a backend whose construction is collective is made at the same point on every rank.
//
// Threading: the façade calls a backend from one thread at a time (the caller's, or the group's
// worker, in call order), except request_abort(), closed() and abort_reason(), which any thread may
// call at any time. Tensors passed in stay alive and untouched until the call returns.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "loom/device.h"
#include "loom/distributed/process_group.h"
#include "loom/distributed/reduce_op.h"
#include "loom/export.h"
#include "loom/tensor.h"

namespace loom::dist {

using Clock = std::chrono::steady_clock;

// What a backend is made from: the group's own store (keys under "pg/<group>/"), its rank and size,
// its options, and a probe that names the group's first failure (published in the store by a rank
// that failed) for the backend's error messages.
struct BackendContext {
  std::shared_ptr<Store> store;
  int rank = 0;
  int size = 1;
  std::string group;
  ProcessGroupOptions options;
  std::string (*failure_probe)(void*) = nullptr;
  void* failure_probe_arg = nullptr;
};

class LOOM_API Backend {
 public:
  // `name`: a literal naming the backend ("cpu", "nccl"); flight records and describe() show it.
  // (A field, not a virtual call: the façade reads it on every call.)
  explicit Backend(const char* name) : name_(name) {}
  virtual ~Backend();

  const char* name() const { return name_; }
  virtual bool supports(DeviceType type) const = 0;
  // What the group's description says about it ("shm x1; last allreduce: ring for ... (why)").
  virtual std::string describe() const = 0;
  // The algorithm of the call that just ran ("ring", "rhd", "binomial"; a literal), for the flight
  // recorder; "" when the backend does not say.
  virtual const char* algorithm_used() const { return ""; }

  // Around every call the façade runs on this backend. `what(arg)` names the running call for
  // error messages (only evaluated on failure); the call must end by `deadline`. end_call() returns
  // once everything the call started has finished.
  virtual void begin_call(std::string (*what)(const void*), const void* arg,
                          Clock::time_point deadline) = 0;
  virtual void end_call() = 0;

  // The collectives of ProcessGroup (see process_group.h for their contracts), with arguments
  // already checked by the façade: tensors defined and on a device type this backend supports,
  // counts, dtypes, roots and splits consistent. Splits are in elements.
  virtual void broadcast(const Tensor& tensor, int root) = 0;
  virtual void allreduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual void allreduce_coalesced(const std::vector<Tensor>& tensors, ReduceOp op) = 0;
  virtual void reduce(const Tensor& tensor, int root, ReduceOp op) = 0;
  virtual void allgather(const std::vector<Tensor>& outputs, const Tensor& input) = 0;
  virtual void allgather_into_tensor(const Tensor& output, const Tensor& input) = 0;
  virtual void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                              ReduceOp op) = 0;
  virtual void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  virtual void alltoallv(const Tensor& output, const Tensor& input,
                         const std::vector<int64_t>& output_splits,
                         const std::vector<int64_t>& input_splits) = 0;
  // outputs / inputs are used on the root only.
  virtual void gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) = 0;
  virtual void scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) = 0;
  virtual void barrier() = 0;
  virtual void send(const Tensor& tensor, int dst) = 0;
  virtual void recv(const Tensor& tensor, int src) = 0;

  // Every rank's `each`-byte record into all[r * each] (this rank's already at its place), between
  // begin_call() and end_call(). The group's contract check uses the CPU backend's; optional for
  // other backends (the default throws NotImplementedError).
  virtual void allgather_records(void* all, size_t each);

  // Makes the running call and every later one fail with `reason` (empty: "aborted"); thread-safe
  // and quick. close() then tears the connections down (not while a call runs).
  virtual void request_abort(const std::string& reason) = 0;
  virtual void close() = 0;
  virtual bool closed() const = 0;
  virtual std::string abort_reason() const = 0;

 private:
  const char* name_;
};

// Makes a group's backend for one device type. Throws (e.g. NotImplementedError) when the backend
// cannot be had; the call that asked for it then fails before it gets a sequence number.
using BackendFactory = std::unique_ptr<Backend> (*)(const BackendContext& context);

// The factory of each device type: CPU -> the CPU backend, CUDA -> the NCCL backend (nccl_stub.cpp
// in this build), Meta -> none. register_backend replaces one (for backends made afterwards) and
// returns the previous one (nullptr: none); tests use it to put a recording backend behind the
// façade.
LOOM_API BackendFactory register_backend(DeviceType type, BackendFactory factory);
LOOM_API BackendFactory backend_factory(DeviceType type);

// The built-in factories (cpu_backend.cpp, nccl_stub.cpp or a future nccl_backend.cpp).
LOOM_API std::unique_ptr<Backend> make_cpu_backend(const BackendContext& context);
LOOM_API std::unique_ptr<Backend> make_nccl_backend(const BackendContext& context);

}  // namespace loom::dist
