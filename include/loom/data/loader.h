// Loader (data layer): the pipeline from shards to batches, with exact resume.
//
//   order (order.h) -> read (pread | mmap | io_uring, batched per batch) -> decode (CRC, zstd) and
//   transform (transforms.h), written straight into a batch buffer from a HostBufferPool
//   (staging.h) -> bounded per-worker queues -> the consumer, in batch order.
//
// Note [loader workers]: this rank's batch j of an epoch is built by worker j mod K and the
// consumer takes batches in j order, so what a rank sees does not depend on K. Each worker keeps at
// most `prefetch` finished batches (backpressure: it waits for the consumer). With K = 0 the
// consumer's thread builds each batch when asked. Workers are threads of this process (the work is
// C++, there is no interpreter lock to escape).
//
// Note [loader state]: state() is (epoch, seed, consumed, config hash), where consumed counts
// global positions of the epoch that every rank has been handed: after this rank took n samples,
// consumed = start + n * world. Batches that workers prefetched but the consumer never took are not
// counted, so after load_state() they are built again: nothing is lost and nothing repeats.
// Resuming with another world size or worker count is allowed as long as the global batch
// (batch_size x world) and the order (dataset, seed, shuffle mode, block size, pad policy) are the
// same; the config hash covers exactly these.
//
// Errors: a failure while building batch j (a corrupt sample, a transform that does not fit) is
// raised by next() when the consumer reaches batch j, as DataError naming the shard file, the
// sample and the byte offset; the other workers stop. Destroying the loader, or starting another
// epoch, while workers run stops and joins them (breaking out of a loop early never deadlocks).
//
// Thread-safety: a Loader is driven by one consumer thread; metrics() may be called from any
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/data/order.h"
#include "loom/data/shard.h"
#include "loom/data/staging.h"
#include "loom/data/transforms.h"
#include "loom/device.h"
#include "loom/export.h"
#include "loom/json.h"
#include "loom/stream.h"
#include "loom/tensor.h"

namespace loom::data {

enum class IoEngine : uint8_t { Pread, Mmap, Uring };
LOOM_API const char* io_engine_name(IoEngine e);
LOOM_API IoEngine parse_io_engine(const std::string& s);  // pread | mmap | uring
// Whether this build and kernel can use io_uring (liburing present and io_uring_setup allowed).
LOOM_API bool uring_available();

struct LoaderOptions {
  int64_t batch_size = 128;  // per rank
  int world = 1;
  int rank = 0;
  int workers = 0;   // 0: batches are built on the consumer's thread
  int prefetch = 2;  // finished batches each worker may hold
  OrderOptions order;
  bool drop_last = false;  // drop this rank's last batch of an epoch when it is short
  IoEngine io = IoEngine::Pread;
  int uring_depth = 64;  // submission queue entries per worker (io_uring)
  // Fields of each batch; empty: copy_column of every column that has a fixed shape or is an Int.
  std::vector<std::shared_ptr<FieldTransform>> fields;
  bool pin_memory = true;  // page-lock the batch buffers (staging.h)
};

struct LOOM_API Batch {
  std::vector<std::string> names;
  std::vector<Tensor>
      fields;                // [size, ...] each, CPU tensors in one pooled buffer (or on a device)
  std::vector<int64_t> ids;  // global sample ids, in row order
  int64_t epoch = 0;
  int64_t index = 0;  // this rank's batch number in the epoch (counted from the epoch's start)
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  // The field called `name`; ValueError listing the fields otherwise.
  const Tensor& operator[](const std::string& name) const;
};

struct LOOM_API LoaderState {
  int64_t epoch = 0;
  uint64_t seed = 0;
  int64_t consumed = 0;  // global positions of `epoch` already handed out
  uint64_t config_hash = 0;
  Json to_json() const;
  static LoaderState from_json(const Json& j);  // DataError on a malformed state
};

struct LoaderMetrics {
  int64_t batches = 0;  // handed to the consumer
  int64_t samples = 0;
  double wait_seconds = 0;  // total time next() blocked waiting for a batch
  double last_wait_seconds = 0;
  double max_wait_seconds = 0;
  double occupancy_sum = 0;   // finished batches waiting, summed over next() calls
  double read_seconds = 0;    // worker time in reads (all workers)
  double decode_seconds = 0;  // worker time in CRC, decompression, transforms and collation
  uint64_t bytes_read = 0;
  HostPoolStats pool;
  double mean_occupancy() const {
    return batches ? occupancy_sum / static_cast<double>(batches) : 0.0;
  }
};

class LOOM_API Loader {
 public:
  Loader(std::shared_ptr<const ShardReader> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Restarts at the beginning of `epoch` (workers stop and restart).
  void set_epoch(int64_t epoch);
  // The next batch of the current epoch; nullopt when this rank's epoch is over (then call
  // set_epoch(epoch + 1), or load a state).
  std::optional<Batch> next();

  LoaderState state() const;
  // Continues exactly after what `state` says was consumed. ValueError when its config hash differs
  // from this loader's (naming what this loader's configuration is).
  void load_state(const LoaderState& state);

  int64_t epoch() const;
  // Batches this rank gets in the current epoch from the current start (a resumed epoch has fewer).
  int64_t batches_in_epoch() const;
  uint64_t config_hash() const;
  const SampleOrder& order() const { return *order_; }
  const std::vector<FieldSpec>& fields() const { return specs_; }
  LoaderMetrics metrics() const;
  // One paragraph: dataset, order, partition, workers, I/O engine, fields, pool.
  std::string describe() const;

 private:
  struct Worker;
  struct Shared;
  void start();
  void stop();
  Batch build(int64_t j, Worker& w);  // batch j of the current run, by worker w's engine
  int64_t rank_samples() const;       // samples this rank reads from start_ in this epoch

  std::shared_ptr<const ShardReader> ds_;
  LoaderOptions opt_;
  std::unique_ptr<SampleOrder> order_;
  std::vector<FieldSpec> specs_;
  std::vector<size_t> field_offsets_;  // within a batch buffer
  std::shared_ptr<HostBufferPool> pool_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;  // global position the current run started from
  int64_t taken_ = 0;  // batches the consumer took in this run
  int64_t taken_samples_ = 0;
  int64_t nbatches_ = 0;  // batches in this run
  std::shared_ptr<Shared> sh_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Worker> inline_;  // K = 0
  mutable std::mutex metrics_mu_;
  LoaderMetrics m_;
};

// Note [device stage]: wraps a batch source and returns batches whose tensors live on `device`. For
// CUDA it keeps `depth` batches in flight (2: double buffering): each host batch (collated into
// page-locked pool buffers, staging.h) is copied with asynchronous host-to-device copies on a side
// stream from the device's pool, and an event is recorded after its copies. The device memory is
// allocated for the consumer's current stream, as `.to(device, non_blocking)` would: the copy
// stream first waits for the consumer stream's position (an event), so that memory the consumer
// freed is not overwritten before the consumer's work on it is done, and a freed batch goes back
// to the consumer stream's pool at once (allocating for the side stream instead needs
// record_stream, whose frees wait on events and, with a new side stream per stage, left every
// stage allocating fresh segments). next() hands out the oldest: the consumer's current stream
// waits on its event (no host synchronisation; record_stream only if the consumer switched
// streams since the copy started), and its host batch is kept until the event has passed, so a
// worker never overwrites a buffer that a copy still reads. Then it starts the next copy, which
// overlaps the consumer's compute on the batch just handed out. At most `depth` handed-out
// batches may still be copying: past that, next() waits on the host for the oldest copy, so that a
// consumer whose device work runs behind cannot let the host queue copies, and hold page-locked
// buffers, without limit. On the CPU it passes batches through.
struct DeviceStageMetrics {
  int64_t batches = 0;
  uint64_t bytes = 0;         // copied host -> device
  double copy_ms = 0;         // device time of the copies (timed events on the copy stream)
  double source_seconds = 0;  // host time next() spent taking batches from the source
  double next_seconds = 0;    // host time in next() altogether (what the step waited)
  int64_t copies_waited = 0;  // batches handed out before their copy had finished
  bool pinned = false;        // every host batch was page-locked
  // Host-to-device bandwidth of the copies while they ran, in GB/s (0 before any).
  double copy_gbps() const {
    return copy_ms > 0 ? static_cast<double>(bytes) / (copy_ms * 1e-3) / 1e9 : 0.0;
  }
};

class LOOM_API DeviceStage {
 public:
  using Source = std::function<std::optional<Batch>()>;
  // NotImplementedError for a device type without a copy engine in this build (CUDA without the
  // backend), ValueError for a device that does not exist.
  DeviceStage(Source source, Device device, int depth = 2);
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;
  // The next batch with every tensor on the device; nullopt when the source is exhausted.
  std::optional<Batch> next();
  Device device() const { return device_; }
  // The counts so far (copies that have finished since the last call are added first).
  DeviceStageMetrics metrics();

 private:
  struct InFlight;
  void start_copy();
  void retire(bool wait);

  Source source_;
  Device device_;
  int depth_;
  bool exhausted_ = false;
  Stream copy_stream_;
  std::deque<std::unique_ptr<InFlight>> in_flight_;
  std::deque<std::unique_ptr<InFlight>> retiring_;  // handed out, in order; kept until copied
  DeviceStageMetrics m_;
};

}  // namespace loom::data
