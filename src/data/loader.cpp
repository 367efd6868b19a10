// The loader pipeline (see loom/data/loader.h, Note [loader workers] and Note [loader state]).
#include "loom/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "data/read_engine.h"
#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "loom/memory/cuda_memory.h"
#include "loom/parallel.h"
#include "loom/record_function.h"

namespace loom::data {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFieldAlign = 64;
constexpr size_t kRecordAlign = 64;

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace

const Tensor& Batch::operator[](const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return fields[i];
  }
  std::string have;
  for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
  LOOM_THROW(ValueError, "[data.Batch] no field '", name, "' (fields: ", have, ")");
}

Json LoaderState::to_json() const {
  char hash[20];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(config_hash));
  return Json::object({{"epoch", epoch},
                       {"seed", std::to_string(seed)},
                       {"consumed", consumed},
                       {"config_hash", std::string(hash)}});
}

LoaderState LoaderState::from_json(const Json& j) {
  LoaderState s;
  try {
    s.epoch = j.at("epoch").as_int();
    s.seed = std::stoull(j.at("seed").as_string());
    s.consumed = j.at("consumed").as_int();
    s.config_hash = std::stoull(j.at("config_hash").as_string(), nullptr, 16);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    LOOM_THROW(DataError, "[data.LoaderState] malformed loader state ", j.dump(), ": ", e.what());
  }
  if (s.epoch < 0 || s.consumed < 0) {
    LOOM_THROW(DataError, "[data.LoaderState] negative epoch or consumed in ", j.dump());
  }
  return s;
}

// One producer of batches: its read engine and buffers, and its queue of finished batches.
struct Loader::Worker {
  int id = 0;
  std::unique_ptr<ReadEngine> engine;
  std::unique_ptr<char, AlignedFree> rbuf;
  size_t rbuf_bytes = 0;
  std::vector<ReadOp> ops;
  std::vector<int64_t> ids;
  std::string scratch;
  std::thread thread;
  // Finished batches, in order (batch numbers j, j + K, ...).
  std::mutex mu;
  std::condition_variable cv;
  struct Done {
    int64_t j;
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  std::deque<Done> ready;
  bool finished = false;  // the thread left its loop

  char* read_buffer(size_t bytes) {
    if (bytes > rbuf_bytes) {
      const size_t n = align_up(std::max(bytes, rbuf_bytes * 2), 4096);
      rbuf.reset(static_cast<char*>(std::aligned_alloc(4096, n)));
      LOOM_CHECK_AS(OutOfMemoryError, rbuf != nullptr,
                    "[data.loader] cannot allocate a read buffer of ", n, " bytes");
      rbuf_bytes = n;
    }
    return rbuf.get();
  }
};

struct Loader::Shared {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> read_ns{0}, decode_ns{0};
  std::atomic<uint64_t> bytes{0};
};

Loader::Loader(std::shared_ptr<const ShardReader> dataset, LoaderOptions options)
    : ds_(std::move(dataset)), opt_(std::move(options)) {
  LOOM_CHECK(ds_ != nullptr, "[data.Loader] no dataset");
  LOOM_CHECK(opt_.batch_size >= 1, "[data.Loader] batch_size must be >= 1 but is ",
             opt_.batch_size);
  LOOM_CHECK(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world, "[data.Loader] rank ",
             opt_.rank, " is not in a world of ", opt_.world);
  LOOM_CHECK(opt_.workers >= 0 && opt_.prefetch >= 1,
             "[data.Loader] workers must be >= 0 and prefetch >= 1 (got ", opt_.workers, ", ",
             opt_.prefetch, ")");
  std::vector<int64_t> sizes;
  for (const ShardInfo& s : ds_->shards()) sizes.push_back(s.samples);
  order_ = std::make_unique<SampleOrder>(std::move(sizes), opt_.order);
  LOOM_CHECK(order_->samples() > 0, "[data.Loader] the dataset in ", ds_->dir(), " has no samples");
  if (opt_.fields.empty()) {
    for (const Column& c : ds_->schema().columns) {
      bool fixed = c.type == ColumnType::Int;
      if (c.type == ColumnType::Tensor && !c.any_rank) {
        fixed = true;
        for (int64_t d : c.shape) fixed = fixed && d >= 0;
      }
      if (fixed) opt_.fields.push_back(copy_column(c.name));
    }
    LOOM_CHECK(
        !opt_.fields.empty(), "[data.Loader] no column of ", ds_->dir(),
        " can be batched as is (fixed-shape tensors or integers); give LoaderOptions::fields");
  }
  size_t off = 0;
  for (const auto& f : opt_.fields) {
    specs_.push_back(f->spec(ds_->schema()));
    field_offsets_.push_back(off);
    off += align_up(specs_.back().row_bytes() * static_cast<size_t>(opt_.batch_size), kFieldAlign);
  }
  // Idle buffers kept: every worker's prefetch, plus what a consumer and a DeviceStage hold (its
  // batches in flight, the one handed out, those retiring): a buffer the pool does not keep is
  // unregistered and freed, and a new one page-locked again later, which costs milliseconds.
  pool_ = HostBufferPool::create(off, opt_.workers * opt_.prefetch + 6, opt_.pin_memory);
  if (opt_.io == IoEngine::Uring && !uring_available()) {
    // Fail at construction, not in a worker, so the message reaches the caller at once.
    make_read_engine(IoEngine::Uring, *ds_, 1);
  }
  sh_ = std::make_shared<Shared>();
  start();
}

Loader::~Loader() {
  stop();
}

void Loader::stop() {
  sh_->stop.store(true);
  for (auto& w : workers_) {
    { std::lock_guard<std::mutex> g(w->mu); }
    w->cv.notify_all();
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  workers_.clear();
  sh_->stop.store(false);
}

int64_t Loader::rank_samples() const {
  return order_->rank_size(opt_.world, opt_.rank, start_);
}

void Loader::start() {
  taken_ = 0;
  taken_samples_ = 0;
  const int64_t n = rank_samples();
  nbatches_ = opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
  if (!inline_) {
    inline_ = std::make_unique<Worker>();
    inline_->engine = make_read_engine(opt_.io, *ds_, opt_.uring_depth);
  }
  const int k = opt_.workers;
  for (int i = 0; i < k && i < nbatches_; ++i) {
    auto w = std::make_unique<Worker>();
    w->id = i;
    w->engine = make_read_engine(opt_.io, *ds_, opt_.uring_depth);
    Worker* wp = w.get();
    workers_.push_back(std::move(w));
    wp->thread = std::thread([this, wp, k] {
      set_thread_name("loader worker " + std::to_string(wp->id));  // the profiler's tables show it
      for (int64_t j = wp->id; j < nbatches_; j += k) {
        {
          std::unique_lock<std::mutex> g(wp->mu);
          wp->cv.wait(g, [&] {
            return sh_->stop.load() || static_cast<int>(wp->ready.size()) < opt_.prefetch;
          });
          if (sh_->stop.load()) break;
        }
        Worker::Done d{j, std::nullopt, nullptr};
        try {
          d.batch = build(j, *wp);
        } catch (...) {
          d.error = std::current_exception();
        }
        const bool failed = d.error != nullptr;
        {
          std::lock_guard<std::mutex> g(wp->mu);
          wp->ready.push_back(std::move(d));
        }
        wp->cv.notify_all();
        if (failed) break;
      }
      std::lock_guard<std::mutex> g(wp->mu);
      wp->finished = true;
      wp->cv.notify_all();
    });
  }
}

Batch Loader::build(int64_t j, Worker& w) {
  std::optional<RecordFunctionGuard> stage;  // the profiler's "data.read", then "data.decode"
  if (LOOM_UNLIKELY(record_function_active())) stage.emplace(OpEvent::Kind::DataStage, "data.read");
  const auto t0 = Clock::now();
  const int64_t rank_n = rank_samples();
  const int64_t i0 = j * opt_.batch_size;
  const int64_t count = std::min(opt_.batch_size, rank_n - i0);
  const int64_t n = order_->samples();
  const int64_t world = opt_.world;
  // Global positions of this batch's rows: start + rank + (i0 + i) * world; under Pad, positions
  // past the end of the order repeat it from the beginning.
  const int64_t first = start_ + opt_.rank + i0 * world;
  w.ids.resize(static_cast<size_t>(count));
  if (first + (count - 1) * world < n) {
    order_->fill(epoch_, first, world, count, w.ids.data());
  } else {
    for (int64_t i = 0; i < count; ++i)
      w.ids[static_cast<size_t>(i)] = order_->at(epoch_, (first + i * world) % n);
  }
  // Plan the reads: each record lands at a 64-byte aligned place of the worker's read buffer.
  w.ops.resize(static_cast<size_t>(count));
  size_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    ReadOp& op = w.ops[static_cast<size_t>(i)];
    op.loc = ds_->locate(w.ids[static_cast<size_t>(i)]);
    op.out = nullptr;
    total += align_up(op.loc.bytes, kRecordAlign);
  }
  if (w.engine->needs_buffer()) {
    char* base = w.read_buffer(total);
    size_t off = 0;
    for (ReadOp& op : w.ops) {
      op.dst = base + off;
      off += align_up(op.loc.bytes, kRecordAlign);
    }
  }
  w.engine->read(w.ops.data(), w.ops.size());
  const auto t1 = Clock::now();
  if (stage) {
    stage.reset();
    stage.emplace(OpEvent::Kind::DataStage, "data.decode");
  }
  sh_->read_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                         std::memory_order_relaxed);
  sh_->bytes.fetch_add(total, std::memory_order_relaxed);

  // Decode, transform and collate, row by row, straight into a pooled buffer.
  DataPtr buf = pool_->acquire();
  char* base = static_cast<char*>(buf.get());
  SampleContext ctx;
  ctx.epoch = epoch_;
  for (int64_t i = 0; i < count; ++i) {
    const ReadOp& op = w.ops[static_cast<size_t>(i)];
    ctx.id = w.ids[static_cast<size_t>(i)];
    ctx.position = first + i * world;
    ctx.rng_seed = sample_seed(opt_.order.seed, epoch_, ctx.position);
    try {
      SampleView v = ds_->decode(op.loc, op.out, w.scratch);
      for (size_t f = 0; f < specs_.size(); ++f) {
        opt_.fields[f]->apply(
            v, ctx, base + field_offsets_[f] + static_cast<size_t>(i) * specs_[f].row_bytes());
      }
    } catch (const Error& e) {
      LOOM_THROW(DataError, "[data.loader] epoch ", epoch_, ", batch ",
                 (start_ / (opt_.batch_size * world) + j), ", sample ", ctx.id, " (",
                 ds_->shard_path(op.loc.shard), " #", op.loc.local, ", byte offset ", op.loc.offset,
                 "): ", e.what());
    }
  }
  Batch b;
  b.epoch = epoch_;
  b.index = (start_ / (opt_.batch_size * world) + j);
  b.ids = w.ids;
  const size_t nbytes = pool_->buffer_bytes();
  Storage st = make_intrusive<StorageImpl>(std::move(buf), nbytes, nullptr);
  for (size_t f = 0; f < specs_.size(); ++f) {
    const FieldSpec& s = specs_[f];
    DimVector sizes;
    sizes.push_back(count);
    for (int64_t d : s.shape) sizes.push_back(d);
    const int64_t itemsize = static_cast<int64_t>(element_size(s.dtype));
    b.names.push_back(s.name);
    b.fields.push_back(make_tensor(st, s.dtype, sizes, contiguous_strides(sizes),
                                   static_cast<int64_t>(field_offsets_[f]) / itemsize));
  }
  sh_->decode_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t1).count(),
      std::memory_order_relaxed);
  return b;
}

std::optional<Batch> Loader::next() {
  if (taken_ >= nbatches_) return std::nullopt;
  std::optional<RecordFunctionGuard> wait_scope;  // the profiler's "data.wait"
  if (LOOM_UNLIKELY(record_function_active()))
    wait_scope.emplace(OpEvent::Kind::DataStage, "data.wait");
  const int64_t j = taken_;
  const auto t0 = Clock::now();
  std::optional<Batch> out;
  double occupancy = 0;
  if (workers_.empty()) {
    out = build(j, *inline_);
  } else {
    for (auto& w : workers_) {
      std::lock_guard<std::mutex> g(w->mu);
      occupancy += static_cast<double>(w->ready.size());
    }
    Worker& w = *workers_[static_cast<size_t>(j % static_cast<int64_t>(workers_.size()))];
    Worker::Done d;
    {
      std::unique_lock<std::mutex> g(w.mu);
      w.cv.wait(g, [&] { return !w.ready.empty() || w.finished; });
      LOOM_INTERNAL_ASSERT(!w.ready.empty(), "loader worker ", w.id, " ended before batch ", j);
      d = std::move(w.ready.front());
      w.ready.pop_front();
    }
    w.cv.notify_all();
    LOOM_INTERNAL_ASSERT(d.j == j, "loader worker ", w.id, " produced batch ", d.j, " where ", j,
                         " was due");
    if (d.error) {
      stop();
      nbatches_ = taken_;  // this run is over; the state still points at the failed batch
      std::rethrow_exception(d.error);
    }
    out = std::move(d.batch);
  }
  const double waited = seconds_since(t0);
  ++taken_;
  taken_samples_ += out->size();
  std::lock_guard<std::mutex> g(metrics_mu_);
  ++m_.batches;
  m_.samples += out->size();
  m_.last_wait_seconds = waited;
  m_.wait_seconds += waited;
  m_.max_wait_seconds = std::max(m_.max_wait_seconds, waited);
  m_.occupancy_sum += occupancy;
  return out;
}

void Loader::set_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, "[data.Loader] epoch must be >= 0 but is ", epoch);
  stop();
  epoch_ = epoch;
  start_ = 0;
  start();
}

uint64_t Loader::config_hash() const {
  uint64_t h = mix(order_->fingerprint(), static_cast<uint64_t>(opt_.batch_size * opt_.world));
  return mix(h, opt_.drop_last ? 1 : 0);
}

LoaderState Loader::state() const {
  LoaderState s;
  s.epoch = epoch_;
  s.seed = opt_.order.seed;
  s.consumed = std::min(order_->epoch_size(opt_.world), start_ + taken_samples_ * opt_.world);
  s.config_hash = config_hash();
  return s;
}

void Loader::load_state(const LoaderState& s) {
  if (s.config_hash != config_hash() || s.seed != opt_.order.seed) {
    LOOM_THROW(ValueError,
               "[data.Loader] cannot resume: the state was saved by a loader with another "
               "configuration (hash ",
               LoaderState{0, s.seed, 0, s.config_hash}.to_json().at("config_hash").dump(),
               ", seed ", s.seed, "); this loader: ", describe());
  }
  LOOM_CHECK(s.consumed >= 0, "[data.Loader] negative consumed ", s.consumed);
  LOOM_CHECK(s.consumed <= order_->epoch_size(opt_.world),
             "[data.Loader] cannot resume: consumed = ", s.consumed, " is past the end of epoch ",
             s.epoch, ", which has ", order_->epoch_size(opt_.world), " positions for ", opt_.world,
             " rank(s)");
  stop();
  epoch_ = s.epoch;
  start_ = s.consumed;
  start();
}

int64_t Loader::epoch() const {
  return epoch_;
}
int64_t Loader::batches_in_epoch() const {
  return nbatches_;
}

LoaderMetrics Loader::metrics() const {
  LoaderMetrics m;
  {
    std::lock_guard<std::mutex> g(metrics_mu_);
    m = m_;
  }
  m.read_seconds = static_cast<double>(sh_->read_ns.load()) * 1e-9;
  m.decode_seconds = static_cast<double>(sh_->decode_ns.load()) * 1e-9;
  m.bytes_read = sh_->bytes.load();
  m.pool = pool_->stats();
  return m;
}

std::string Loader::describe() const {
  std::ostringstream s;
  s << ds_->size() << " samples in " << ds_->shards().size() << " shard(s) at " << ds_->dir()
    << "; " << order_->describe() << "; rank " << opt_.rank << " of " << opt_.world
    << " reads positions " << opt_.rank << " + k*" << opt_.world << ", " << opt_.batch_size
    << " per batch (global batch " << opt_.batch_size * opt_.world
    << (opt_.drop_last ? ", short last batch dropped" : "") << "); ";
  if (opt_.workers == 0) {
    s << "batches built on the consumer's thread";
  } else {
    s << opt_.workers << " worker thread(s), " << opt_.prefetch << " batch(es) prefetched each";
  }
  s << "; reads by " << io_engine_name(opt_.io) << "; fields:";
  for (const auto& f : opt_.fields) s << ' ' << f->describe();
  const HostPoolStats ps = pool_->stats();
  s << "; batch buffers of " << ps.buffer_bytes << " bytes, "
    << (opt_.pin_memory
            ? (ps.pinned || ps.allocated == 0 ? "page-locked" : "not page-locked (mlock refused)")
            : "pageable");
  return s.str();
}

struct DeviceStage::InFlight {
  Batch host;
  Batch device;
  std::vector<Tensor> keep;  // contiguous copies of strided host fields, read by the copies
  Stream owner;              // the consumer stream the device memory was allocated for
  Event owner_ready{DeviceType::CUDA};  // the owner's position when the copies were queued
  Event start = Event::timed(DeviceType::CUDA);
  Event done = Event::timed(DeviceType::CUDA);
};

DeviceStage::DeviceStage(Source source, Device device, int depth)
    : source_(std::move(source)), device_(device), depth_(depth < 1 ? 1 : depth) {
  if (device_.is_cpu()) return;
  LOOM_CHECK_AS(NotImplementedError, device_.is_cuda(), "[data.DeviceStage] copies to ",
                device_.str(), " are not supported (cpu or cuda)");
  LOOM_CHECK_AS(NotImplementedError, cuda::is_built(), "[data.DeviceStage] copies to ",
                device_.str(),
                " need the CUDA backend, which is not in this build (configure with "
                "-DLOOM_CUDA=ON on a machine with the CUDA toolkit)");
  LOOM_CHECK(device_.index() >= 0 && device_.index() < cuda::device_count(),
             "[data.DeviceStage] no device ", device_.str(), " (", cuda::device_count(),
             " visible)");
  copy_stream_ = cuda::stream_from_pool(device_.index());
  m_.pinned = true;
}

DeviceStage::~DeviceStage() {
  // Host buffers go back to their pool only after the copies reading them have finished.
  try {
    for (auto& f : in_flight_) f->done.synchronize();
    retire(/*wait=*/true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[data.DeviceStage] %s\n", e.what());
  }
}

// Queues the copies of the source's next batch on the copy stream.
void DeviceStage::start_copy() {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<Batch> host = source_();
  m_.source_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!host) {
    exhausted_ = true;
    return;
  }
  auto f = std::make_unique<InFlight>();
  f->host = std::move(*host);
  f->device.names = f->host.names;
  f->device.ids = f->host.ids;
  f->device.epoch = f->host.epoch;
  f->device.index = f->host.index;
  DeviceInterface& cuda_if = device_interface(DeviceType::CUDA);
  // The device memory belongs to the consumer's stream (Note [device stage]); the copies wait
  // for that stream's work so far, which may still use memory it freed.
  f->owner = current_stream(device_);
  f->owner_ready.record(f->owner);
  f->owner_ready.block(copy_stream_);
  f->start.record(copy_stream_);
  for (const Tensor& h : f->host.fields) {
    const Tensor src = h.is_contiguous() ? h : h.contiguous();
    Tensor d = empty_tensor(src.sizes(), src.dtype(), device_);
    if (src.numel() > 0) {
      m_.pinned = m_.pinned && cuda::is_pinned(src.data_ptr());
      cuda_if.copy(d.data_ptr(), device_, src.data_ptr(), kCPU, src.nbytes(), copy_stream_,
                   /*non_blocking=*/true);
      m_.bytes += src.nbytes();
    }
    if (!src.is_same(h)) f->keep.push_back(src);
    f->device.fields.push_back(std::move(d));
  }
  f->done.record(copy_stream_);
  in_flight_.push_back(std::move(f));
}

// Drops the host batches whose copies have finished (all of them when `wait`). The copy stream
// runs them in order, so the finished ones are a prefix.
void DeviceStage::retire(bool wait) {
  while (!retiring_.empty()) {
    InFlight& f = *retiring_.front();
    if (wait) f.done.synchronize();
    if (!f.done.query()) break;
    m_.copy_ms += f.start.elapsed_ms(f.done);
    retiring_.pop_front();
  }
}

DeviceStageMetrics DeviceStage::metrics() {
  if (!device_.is_cpu()) retire(/*wait=*/false);
  return m_;
}

std::optional<Batch> DeviceStage::next() {
  if (device_.is_cpu()) return source_();
  const auto t0 = std::chrono::steady_clock::now();
  retire(/*wait=*/false);
  while (!exhausted_ && static_cast<int>(in_flight_.size()) < depth_) start_copy();
  if (in_flight_.empty()) return std::nullopt;
  std::unique_ptr<InFlight> f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (!f->done.query()) ++m_.copies_waited;
  // The consumer's stream waits for the copies; the memory they filled is now used there too.
  const Stream consumer = current_stream(device_);
  f->done.block(consumer);
  if (consumer != f->owner) {
    for (const Tensor& d : f->device.fields)
      if (d.numel() > 0) cuda::record_stream(d.storage()->data_ptr(), consumer);
  }
  Batch out = std::move(f->device);
  retiring_.push_back(std::move(f));
  // Bound the copies still running for batches already handed out (Note [device stage]).
  while (static_cast<int>(retiring_.size()) > depth_) {
    retiring_.front()->done.synchronize();
    retire(/*wait=*/false);
  }
  // Start the next copy now, so that it overlaps the consumer's work on this batch.
  while (!exhausted_ && static_cast<int>(in_flight_.size()) < depth_) start_copy();
  ++m_.batches;
  m_.next_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace loom::data
