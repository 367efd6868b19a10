// The training loop of Trainer::run (trainer.h).
//
// Determinism: initialisation draws from Generator(seed); the sample order of epoch e is a pure
// function of (seed, e) whatever the number of ranks or loader workers; kernels are deterministic
// for a fixed thread count. A resumed run restores parameters, optimizer state, the loop position
// and the loader's state (epoch, samples consumed) exactly, so every later step computes the same
// bits. Validation and the final evaluation draw no random numbers, so they do not disturb this.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/data/pack.h"
#include "loom/data/text.h"
#include "loom/datasets.h"
#include "loom/distributed/ddp.h"
#include "loom/distributed/process_group.h"
#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "loom/parse.h"
#include "loom/profiler.h"
#include "loom/stream.h"
#include "train/train_internal.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

const config::StringSetting kInjectFault(
    "LOOM_INJECT_FAULT", "",
    "KIND:RANK:STEP: make rank RANK of `loom train` fail before step STEP (mismatch, hang or "
    "kill), to see "
    "the distributed failure reports (same as --inject-fault)");

// Note [Stopping a data-parallel run]: the first SIGINT or SIGTERM asks the loop to stop at the
// next step boundary, where the ranks agree to stop together and a checkpoint is written. A rank
// blocked in a collective (a peer died or hangs) never gets there: when the loop has not moved for
// kAbortGraceSeconds after the signal, or at a second signal, every process group is aborted, the
// blocked collective throws DistError "aborted by SIGTERM" after writing its flight record, and the
// run ends as stopped by the signal.
constexpr double kAbortGraceSeconds = 3.0;

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_signals_seen{0};
std::atomic<int64_t> g_progress{0};  // bumped by the loop at every step boundary

void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
  if (g_signals_seen.fetch_add(1) >= 1)
    dist::abort_process_groups_from_signal(sig);  // async-signal-safe
}

// SIGINT and SIGTERM stop the loop while a run is in progress (the previous handlers come back when
// it ends), with a watchdog for a loop that cannot get to its next step.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    g_signals_seen.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~StopSignals() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    int64_t seen_progress = -1;
    Clock::time_point since{};
    while (!done_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const int sig = g_stop_signal.load();
      if (sig == 0 || aborted_) continue;
      const int64_t p = g_progress.load();
      if (p != seen_progress) {
        seen_progress = p;
        since = Clock::now();
      } else if (std::chrono::duration<double>(Clock::now() - since).count() >=
                 kAbortGraceSeconds) {
        aborted_ = true;
        dist::abort_process_groups_from_signal(sig);
      }
    }
  }

  struct sigaction old_int_ {
  }, old_term_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;     // GUARDED_BY(mu_)
  bool aborted_ = false;  // GUARDED_BY(mu_)
  std::thread watchdog_;
};

// Data parallelism of one training process: rank and world from the launcher's environment.
struct Parallel {
  std::shared_ptr<dist::ProcessGroup> group;
  int rank = 0;
  int world = 1;
  bool leader() const { return rank == 0; }
  // Whether any rank wants to stop (signals reach ranks at different steps; all must stop
  // together).
  bool any(bool flag) const {
    if (!group) return flag;
    Tensor t = full({1}, Scalar(int64_t{flag ? 1 : 0}), TensorOptions(kInt64));
    group->allreduce(t, dist::ReduceOp::Max);
    return t.data_ptr<int64_t>()[0] != 0;
  }
};

Parallel init_parallel() {
  Parallel par;
  const char* ws = std::getenv("WORLD_SIZE");
  if (ws && *ws && parse_int(ws, "[train] WORLD_SIZE", 1) > 1) {
    par.group = dist::init_process_group("env://");
    par.rank = par.group->rank();
    par.world = par.group->size();
  }
  return par;
}

// Note [Fault injection] in trainer.h.
void inject_fault(const FaultSpec& f, const Parallel& par, int64_t step, Reporter* reporter) {
  if (f.kind == FaultKind::None || f.step != step || f.rank != par.rank) return;
  std::fprintf(stderr, "[train] injected fault: %s\n", f.describe().c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  switch (f.kind) {
    case FaultKind::Kill:
      ::raise(SIGKILL);
      break;
    case FaultKind::Hang:
      // Blocked as a hung rank would be, until a signal ends the process.
      while (g_stop_signal.load() == 0) ::pause();
      std::_Exit(128 + g_stop_signal.load());
    case FaultKind::Mismatch:
      if (par.group) {
        // A collective the other ranks do not make: they are in this step's gradient allreduce.
        Tensor extra = zeros({3}, TensorOptions(kFloat64));
        par.group->allreduce(extra);
      }
      break;
    case FaultKind::None:
      break;
  }
}

uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// --profile: CPU tensors come from a caching allocator (over host memory) so that the trace has
// allocated / reserved memory tracks and the report can state peak memory. It lives until exit:
// tensors freed during static destruction must still find it.
memory::CachingAllocator* profiled_cpu_allocator() {
  static memory::CachingAllocator* cache = [] {
    const size_t ram =
        static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    auto* dev = new memory::SimulatedDevice(ram, /*backed=*/true);
    memory::AllocatorConfig ac;
    ac.history_capacity = 0;
    auto* c = new memory::CachingAllocator(*dev, ac);
    set_allocator(DeviceType::CPU, new memory::CachingAllocatorAdapter(*c, kCPU));
    return c;
  }();
  return cache;
}

// --profile: the window of steps --profile-steps selects (profiler.h), written and summarised when
// the loop ends. With several ranks each writes its own trace: out.json.gz -> out.rank1.json.gz.
class ProfileWindow {
 public:
  ProfileWindow(const TrainOptions& o, const Parallel& par, Device device)
      : schedule_(profiler::Schedule::parse(o.profile_steps)), device_(device) {
    if (o.profile_path.empty()) return;
    cpu_cache_ = profiled_cpu_allocator();
    path_ = o.profile_path;
    if (par.world > 1) {
      const size_t dot = path_.find(".json");
      path_.insert(dot == std::string::npos ? path_.size() : dot,
                   ".rank" + std::to_string(par.rank));
    }
    profiler::ProfileOptions po;
    po.schedule = schedule_;
    prof_ = std::make_unique<profiler::Profile>(po);
    prof_->start();
  }
  // At the start of every step but this process's first: a profiled step spans one whole iteration.
  // Note [Step times on a device]: the device runs behind the host, so a step boundary taken on
  // the host alone would charge a step's GPU work to the next one. While profiling on a GPU the
  // boundary first waits for the device's current stream: each step's span then covers the kernels
  // it queued. Without --profile nothing waits per step; the samples/s and ETA figures are taken at
  // the steps that read the loss back (which waits for the device), so they include GPU time too.
  void step() {
    if (prof_ && started_) {
      if (device_.is_cuda()) current_stream(device_).synchronize();
      prof_->step();
    }
    started_ = true;
  }
  // Writes the trace; the summary goes to `say` (the leader's reporter; a no-op on other ranks).
  void finish(const std::function<void(const std::string&)>& say) {
    if (!prof_) return;
    prof_->stop();
    profiler::write_chrome_trace(prof_->trace(), path_);
    say("profile (" + schedule_.describe() + "): trace written to " + path_ + "\n" +
        profiler::summarize(prof_->trace(), 5));
    if (prof_->trace().empty())
      say("profile: the run ended before the recorded steps; try --profile-steps 0,0,5");
    const memory::MemoryStats ms = cpu_cache_->stats();
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "memory (CPU tensors through the caching allocator): peak allocated %.1f MB, "
                  "peak reserved %.1f MB, %lld segments, fragmentation now %.2f",
                  static_cast<double>(ms.allocated_bytes.peak) / 1e6,
                  static_cast<double>(ms.reserved_bytes.peak) / 1e6,
                  static_cast<long long>(ms.segments.current), ms.fragmentation());
    say(buf);
    prof_.reset();
  }

 private:
  profiler::Schedule schedule_;
  Device device_;
  std::string path_;
  memory::CachingAllocator* cpu_cache_ = nullptr;
  std::unique_ptr<profiler::Profile> prof_;
  bool started_ = false;
};

// The lines after the final test accuracy: where the loader's time went, data parallelism.
std::string final_report(const data::Loader& loader, double seconds,
                         const dist::DistributedDataParallel* ddp, const Parallel& par,
                         const data::DeviceStageMetrics* copies) {
  const data::LoaderMetrics lm = loader.metrics();
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "data: waited %.2f s for batches (%.1f%% of the run; longest %.1f ms), %.1f batches "
      "ready on average; workers spent %.2f s reading, %.2f s decoding",
      lm.wait_seconds, seconds > 0 ? 100.0 * lm.wait_seconds / seconds : 0.0,
      lm.max_wait_seconds * 1e3, lm.mean_occupancy(), lm.read_seconds, lm.decode_seconds);
  std::string report = buf;
  if (copies && copies->batches > 0) {
    std::snprintf(buf, sizeof(buf),
                  "\ndevice copies: %lld batches, %.1f MB host to device at %.1f GB/s on a side "
                  "stream (%.2f s of copy time, %lld batches handed out before their copy ended)",
                  static_cast<long long>(copies->batches), static_cast<double>(copies->bytes) / 1e6,
                  copies->copy_gbps(), copies->copy_ms / 1e3,
                  static_cast<long long>(copies->copies_waited));
    report += buf;
  }
  if (ddp) {
    auto st = ddp->stats();
    std::snprintf(buf, sizeof(buf),
                  "\ndata parallel: %lld bucket allreduces (%.1f MB), backward waited %.2f s for "
                  "gradients\nprocess group: ",
                  static_cast<long long>(st.reductions),
                  static_cast<double>(st.bytes_reduced) / 1e6, st.wait_seconds);
    report += buf + par.group->describe();
  }
  return report;
}

// Note [Training on a device]: `--device cuda` runs one process on one GPU. The model is built and
// initialised on the CPU (the same draws as a CPU run) and moved with Module::to before the
// optimizer is built, so its state is created next to the parameters (Adam's step counter stays a
// CPU tensor: it is read on the host). Batches come through a DeviceStage (DeviceBatches,
// train_internal.h). The loss is summed on the device and read back only at the steps the reporter
// shows, the end of an epoch and a stop, instead of once per step (which would wait for the device
// every step); the CPU keeps reading it every step. Evaluation runs on the model's device;
// checkpoints hold CPU copies (Note [Checkpoints of device runs]).

void add_metrics(data::DeviceStageMetrics& total, const data::DeviceStageMetrics& m) {
  total.batches += m.batches;
  total.bytes += m.bytes;
  total.copy_ms += m.copy_ms;
  total.source_seconds += m.source_seconds;
  total.next_seconds += m.next_seconds;
  total.copies_waited += m.copies_waited;
}

}  // namespace

namespace detail {

std::shared_ptr<void> catch_stop_signals() {
  return std::make_shared<StopSignals>();
}

int stop_signal() {
  return g_stop_signal.load();
}

std::optional<data::Batch> DeviceBatches::next(std::optional<data::LoaderState>& state_after) {
  std::optional<data::Batch> b = stage_.next();
  if (b) {
    LOOM_INTERNAL_ASSERT(!states_.empty(), "a device batch without its loader state");
    state_after = std::move(states_.front());
    states_.pop_front();
  }
  return b;
}

std::optional<data::Batch> DeviceBatches::take() {
  std::optional<data::Batch> b = loader_.next();
  if (b) states_.push_back(loader_.state());
  return b;
}

RunInfo run_info_of(const TrainOptions& o, int64_t train_samples, int64_t test_samples,
                    int64_t steps_per_epoch) {
  RunInfo info;
  info.train_samples = train_samples;
  info.test_samples = test_samples;
  info.batch = o.batch;
  info.epochs = o.epochs;
  info.steps_per_epoch = steps_per_epoch;
  info.threads = get_num_threads();
  info.seed = o.seed;
  return info;
}

}  // namespace detail

struct Trainer::Impl {
  TrainOptions o;
  Reporter* reporter = nullptr;
  void say(const std::string& line) const {
    if (reporter) reporter->on_message(line);
  }
};

Trainer::Trainer(TrainOptions options, Reporter* reporter) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->reporter = reporter;
  if (impl_->o.data_dir.empty()) impl_->o.data_dir = data::default_fashion_mnist_dir();
  if (impl_->o.fault.kind == FaultKind::None && kInjectFault.is_set()) {
    impl_->o.fault = FaultSpec::parse(kInjectFault.get());
  }
  impl_->o.check();
}

Trainer::~Trainer() = default;

void Trainer::prepare_data(const TrainOptions& o) {
  if (o.model == "gpt") {
    data::TextShardsOptions to;
    to.seq_len = o.seq_len;
    to.vocab_size = o.vocab;
    data::text_shards(o.corpus_dir.empty() ? data::default_fortunes_dir() : o.corpus_dir, to);
    return;
  }
  const std::string dir = o.data_dir.empty() ? data::default_fashion_mnist_dir() : o.data_dir;
  data::fashion_mnist_shards(dir, true, o.train_samples);
  data::fashion_mnist_shards(dir, false);
}

TrainResult Trainer::run() {
  const TrainOptions& o = impl_->o;
  if (o.model == "gpt") return detail::run_gpt(o, impl_->reporter);
  const Device device(o.device);  // checked by TrainOptions::check
  if (!device.is_cpu()) {
    // Refused before the process group would wait for its peers.
    const char* ws = std::getenv("WORLD_SIZE");
    const int64_t world = ws && *ws ? parse_int(ws, "[train] WORLD_SIZE", 1) : 1;
    LOOM_CHECK_AS(NotImplementedError, world == 1, "[train] --device ", o.device, " with ", world,
                  " processes (WORLD_SIZE): multi-GPU training needs the NCCL backend (a later "
                  "issue); train on one GPU (no --nproc, no WORLD_SIZE) or data-parallel on the "
                  "CPU");
  }
  const std::string train_dir = data::fashion_mnist_shards(o.data_dir, true, o.train_samples);
  const std::string test_dir = data::fashion_mnist_shards(o.data_dir, false);
  if (o.threads > 0) set_num_threads(o.threads);
  if (!o.profile_path.empty()) profiled_cpu_allocator();  // before the first tensor of the run
  set_thread_name("training");
  Parallel par = init_parallel();
  std::optional<DeviceGuard> device_guard;
  if (device.is_cuda()) device_guard.emplace(device);
  const bool on_device = !device.is_cpu();
  LOOM_CHECK(o.batch % par.world == 0, "[train] --batch ", o.batch,
             " must be a multiple of the number of ranks ", par.world,
             " (every rank takes the same share of a batch)");
  Reporter* rep = par.leader() ? impl_->reporter : nullptr;
  auto say = [&](const std::string& line) {
    if (rep) rep->on_message(line);
  };

  auto train_ds = std::make_shared<const data::ShardReader>(train_dir);
  auto test_ds = std::make_shared<const data::ShardReader>(test_dir);
  data::LoaderOptions lo;
  lo.batch_size = o.batch / par.world;
  lo.world = par.world;
  lo.rank = par.rank;
  lo.workers = o.workers;
  lo.order.seed = o.seed;
  lo.fields = detail::input_fields(o.augment, detail::kMean, detail::kStd);
  data::Loader loader(train_ds, lo);
  const int64_t steps_per_epoch = loader.batches_in_epoch();
  const int64_t total_steps = o.epochs * steps_per_epoch;

  Generator gen(o.seed);
  auto model = detail::build_model(o.model, gen);
  model->to(device);  // Note [Training on a device]: initialised on the CPU, then moved
  int64_t nparams = 0;
  for (auto& p : model->parameters()) nparams += p.numel();
  std::unique_ptr<optim::Optimizer> opt = detail::build_optimizer(o, model->parameters());
  std::unique_ptr<optim::LRScheduler> sched;
  if (o.schedule == "cosine") sched = std::make_unique<optim::CosineAnnealingLR>(*opt, total_steps);
  const detail::RunState state{model.get(), opt.get(), sched.get(), &gen};

  if (!o.checkpoint_dir.empty() && par.leader()) {
    const io::OrphanSweep swept = io::remove_orphan_temp_files(o.checkpoint_dir);
    if (!swept.files.empty()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf),
                    "removed %zu temporary file(s) (%.1f MB) that interrupted checkpoint writes "
                    "left in %s",
                    swept.files.size(), static_cast<double>(swept.bytes) / 1e6,
                    o.checkpoint_dir.c_str());
      say(buf);
    }
  }
  detail::Loop loop;
  if (o.resume) {
    const detail::RunShape shape{steps_per_epoch, loader.order().epoch_size(par.world),
                                 loader.config_hash()};
    detail::Restored restored = detail::restore_state(o, shape, state);
    for (const auto& note : restored.notes) say(note);
    if (restored.found && restored.loop.epoch >= o.epochs) {
      loop = restored.loop;
      say("the run in " + o.checkpoint_dir + " already finished: " + restored.path +
          " is at the end of epoch " + std::to_string(loop.epoch) + " (step " +
          std::to_string(loop.global_step) + ") and --epochs is " + std::to_string(o.epochs) +
          "; nothing left to train (pass a larger --epochs to train on)");
    } else if (restored.found) {
      loop = restored.loop;
      char buf[512];
      std::snprintf(buf, sizeof(buf), "resumed from %s (epoch %lld, batch %lld, step %lld)",
                    restored.path.c_str(), static_cast<long long>(loop.epoch + 1),
                    static_cast<long long>(loop.batch_in_epoch),
                    static_cast<long long>(loop.global_step));
      say(buf);
    } else {
      say("no checkpoint in " + o.checkpoint_dir + ": starting from scratch");
    }
  }
  TrainResult result;
  result.leader = par.leader();
  result.global_step = loop.global_step;
  if (loop.epoch >= o.epochs) {
    // A finished run: say so and evaluate what it trained, instead of training nothing.
    result.status = TrainResult::Status::AlreadyFinished;
    if (par.leader()) {
      EvalReport ev =
          detail::evaluate(*model, test_ds, 1000, detail::kMean, detail::kStd, rep, "evaluating");
      result.test_loss = ev.loss;
      result.test_accuracy = ev.accuracy;
    }
    if (rep) rep->on_end(result);
    return result;
  }

  std::shared_ptr<nn::Module> net = model;
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (par.group) {
    ddp = std::make_shared<dist::DistributedDataParallel>(model, par.group);
    net = ddp;
  }
  // Note [Compiled training steps]: --compile captures the forward pass and the loss once per
  // batch shape (the last, smaller batch of an epoch is a second graph) and replays them; the
  // parameters are constants of the graph, so the optimizer's in-place updates are seen. The
  // graph is a joint one (Note [Joint graph] in compiler/joint.h): loss.backward() runs its
  // backward half, whose gradients reach the parameters' .grad; the optimizer runs eagerly.
  // With data parallelism the forward pass would hold collectives, which the capture cannot
  // replay yet: refused.
  LOOM_CHECK_AS(NotImplementedError, !o.compile || !par.group,
                "[train] --compile with several processes is not supported yet (DDP's "
                "collectives would have to break the graph)");
  std::optional<CompiledFunction> compiled_step;
  if (o.compile) {
    compiled_step = compile(
        [net](const std::vector<Tensor>& in) -> std::vector<Tensor> {
          return {cross_entropy(net->forward(in[0]), in[1])};
        },
        {.name = "loom train: forward and loss"});
  }
  if (rep) {
    RunInfo info = detail::run_info_of(o, train_ds->size(), test_ds->size(), steps_per_epoch);
    info.model = o.model + " (" + std::to_string(nparams) + " parameters)";
    info.optimizer = detail::describe_optimizer(o);
    info.world = par.world;
    info.data = loader.describe();
    if (par.group) {
      info.parallel = std::to_string(par.world) + " processes, " +
                      std::to_string(o.batch / par.world) + " samples per rank per step, " +
                      std::to_string(ddp->bucket_names().size()) + " gradient bucket(s); " +
                      par.group->describe();
    }
    if (o.fault.kind != FaultKind::None) info.fault = o.fault.describe();
    if (device.is_cuda())
      info.device = device.str() + " (" + cuda::device_properties(device.index()).name + ")";
    rep->on_start(info);
  }

  StopSignals stop_signals;
  ProfileWindow profile(o, par, device);
  auto finish_profile = [&] { profile.finish(say); };
  auto checkpoint = [&](const std::string& why) {
    if (o.checkpoint_dir.empty() || !par.leader()) return;
    const auto c0 = Clock::now();
    const std::string path = detail::save_state(o, state, loop);
    if (rep) {
      CheckpointInfo ci;
      ci.path = path;
      ci.step = loop.global_step;
      ci.bytes = file_bytes(path + ".safetensors") + file_bytes(path + ".json");
      ci.seconds = std::chrono::duration<double>(Clock::now() - c0).count();
      ci.why = why;
      rep->on_checkpoint(ci);
    }
  };

  const auto t0 = Clock::now();
  int64_t samples = 0;
  data::DeviceStageMetrics copies;
  model->train();
  try {
    while (loop.epoch < o.epochs) {
      g_progress.fetch_add(1);
      if (loop.data && loop.data->epoch == loop.epoch) {
        loader.load_state(*loop.data);  // a resumed run: continue at exactly the next sample
      } else {
        loader.set_epoch(loop.epoch);
      }
      detail::DeviceBatches batches(loader, device);
      Tensor pending_loss;  // on a device: the losses since the last read, summed there
      Tensor last_loss;
      const auto e0 = Clock::now();
      const int64_t first_batch = loop.batch_in_epoch;
      int64_t epoch_samples = 0;
      double loss_sum = 0;
      bool stop = false;
      while (loop.batch_in_epoch < steps_per_epoch) {
        g_progress.fetch_add(1);
        profile.step();
        inject_fault(o.fault, par, loop.global_step, rep);
        std::optional<data::LoaderState> state_after;
        std::optional<data::Batch> batch = batches.next(state_after);
        LOOM_INTERNAL_ASSERT(batch.has_value(), "the loader ended epoch ", loop.epoch, " after ",
                             loop.batch_in_epoch, " of ", steps_per_epoch, " batches");
        const int64_t len = batch->size() * par.world;
        opt->zero_grad();
        Tensor loss = compiled_step
                          ? (*compiled_step)({(*batch)["image"], (*batch)["label"]})[0]
                          : cross_entropy(net->forward((*batch)["image"]), (*batch)["label"]);
        loss.backward();
        opt->step();
        if (sched) sched->step();
        if (on_device) {
          last_loss = loss.detach().to(kFloat64);
          pending_loss = pending_loss.defined() ? add(pending_loss, last_loss) : last_loss;
        } else {
          result.final_loss = loss.item<double>();
          LOOM_CHECK(std::isfinite(result.final_loss), "[train] the loss became ",
                     result.final_loss, " at step ", loop.global_step, " (epoch ", loop.epoch + 1,
                     ", batch ", loop.batch_in_epoch, "); try a smaller --lr");
          loss_sum += result.final_loss;
        }
        batch.reset();  // its buffer goes back to the loader's pool
        loop.data = std::move(state_after);
        ++loop.batch_in_epoch;
        ++loop.global_step;
        ++result.steps_run;
        samples += len;
        epoch_samples += len;
        const bool max_reached = o.max_steps > 0 && result.steps_run >= o.max_steps;
        stop = par.any(g_stop_signal.load() != 0 || max_reached);
        if (stop && g_stop_signal.load() == 0 && !max_reached)
          g_stop_signal.store(SIGTERM);  // another rank's
        // Note [Training on a device]: read the device's losses where the reporter shows them.
        const bool shown = loop.batch_in_epoch == steps_per_epoch || stop ||
                           loop.batch_in_epoch % std::max<int64_t>(steps_per_epoch / 5, 1) == 0;
        if (on_device && shown) {
          const double sum = pending_loss.item<double>();
          result.final_loss = last_loss.item<double>();
          LOOM_CHECK(std::isfinite(sum), "[train] the loss became ", result.final_loss, " by step ",
                     loop.global_step - 1, " (epoch ", loop.epoch + 1, ", batch ",
                     loop.batch_in_epoch - 1, "); try a smaller --lr");
          loss_sum += sum;
          pending_loss = Tensor();
        }
        if (rep && (!on_device || shown)) {
          StepInfo si;
          si.epoch = loop.epoch;
          si.epochs = o.epochs;
          si.step_in_epoch = loop.batch_in_epoch;
          si.steps_per_epoch = steps_per_epoch;
          si.global_step = loop.global_step;
          si.total_steps = total_steps;
          si.loss = result.final_loss;
          const int64_t done_here = loop.batch_in_epoch - first_batch;
          si.running_loss = loss_sum / static_cast<double>(done_here);
          const double epoch_secs = std::chrono::duration<double>(Clock::now() - e0).count();
          const double run_secs =
              std::chrono::duration<double>(Clock::now() - t0).count() - result.validation_seconds;
          si.samples_per_second =
              epoch_secs > 0 ? static_cast<double>(epoch_samples) / epoch_secs : 0;
          const double per_step = run_secs / static_cast<double>(result.steps_run);
          si.eta_epoch_seconds =
              per_step * static_cast<double>(steps_per_epoch - loop.batch_in_epoch);
          si.eta_run_seconds = per_step * static_cast<double>(total_steps - loop.global_step);
          si.last_in_epoch = loop.batch_in_epoch == steps_per_epoch;
          rep->on_step(si);
        }
        if (loop.batch_in_epoch == steps_per_epoch) break;
        if (stop) {
          checkpoint(g_stop_signal.load()
                         ? std::string("stopping (") + strsignal(g_stop_signal.load()) + ")"
                         : std::string("stopping (--max-steps)"));
          break;
        }
        if (loop.global_step % o.checkpoint_every == 0)
          checkpoint("every " + std::to_string(o.checkpoint_every) + " steps");
      }
      add_metrics(copies, batches.metrics());
      if (loop.batch_in_epoch == steps_per_epoch) {
        const int64_t ran = loop.batch_in_epoch - first_batch;
        loop.batch_in_epoch = 0;
        ++loop.epoch;
        checkpoint("end of epoch " + std::to_string(loop.epoch));
        EpochReport er;
        er.epoch = loop.epoch - 1;
        er.train_loss = ran > 0 ? loss_sum / static_cast<double>(ran) : NAN;
        if (o.validate && par.leader() && !stop) {
          const auto v0 = Clock::now();
          const EvalReport ev = detail::evaluate(*model, test_ds, 1000, detail::kMean, detail::kStd,
                                                 rep, "validating");
          er.val_loss = ev.loss;
          er.val_accuracy = ev.accuracy;
          result.validation_seconds += std::chrono::duration<double>(Clock::now() - v0).count();
        }
        er.seconds = std::chrono::duration<double>(Clock::now() - e0).count();
        result.epochs.push_back(er);
        if (rep) rep->on_epoch_end(er);
      }
      if (stop) {
        finish_profile();
        result.status = TrainResult::Status::Stopped;
        result.signal = g_stop_signal.load();
        result.global_step = loop.global_step;
        result.seconds =
            std::chrono::duration<double>(Clock::now() - t0).count() - result.validation_seconds;
        if (rep) rep->on_end(result);
        if (!o.checkpoint_dir.empty()) say("resume with the same command and --resume");
        return result;
      }
    }
  } catch (const DistError& e) {
    // Note [Stopping a data-parallel run]: a signal aborted a collective this rank was blocked in.
    if (g_stop_signal.load() == 0) throw;
    result.status = TrainResult::Status::Stopped;
    result.signal = g_stop_signal.load();
    result.global_step = loop.global_step;
    result.seconds =
        std::chrono::duration<double>(Clock::now() - t0).count() - result.validation_seconds;
    std::fprintf(
        stderr,
        "[train] rank %d: %s arrived while this rank was blocked in a collective; the process "
        "group was aborted: %s\n",
        par.rank, strsignal(result.signal), e.what());
    if (rep) rep->on_end(result);
    return result;
  }
  result.seconds =
      std::chrono::duration<double>(Clock::now() - t0).count() - result.validation_seconds;
  result.samples_per_second =
      result.seconds > 0 ? static_cast<double>(samples) / result.seconds : 0;
  result.global_step = loop.global_step;
  finish_profile();
  if (!par.leader()) return result;
  const EvalReport ev =
      detail::evaluate(*model, test_ds, 1000, detail::kMean, detail::kStd, rep, "testing");
  result.test_loss = ev.loss;
  result.test_accuracy = ev.accuracy;
  std::string report =
      final_report(loader, result.seconds, ddp.get(), par, on_device ? &copies : nullptr);
  if (compiled_step) {
    const CompileReport cr = compiled_step->report();
    report += "\ncompiled: " + cr.str().substr(0, cr.str().find('\n'));
    for (const std::string& why : cr.recompile_reasons) report += "\n  recompiled: " + why;
    // What the passes did to each graph: the joint graph, what was fused (or why not).
    for (size_t g = 0; g < cr.graphs.size(); ++g) {
      report += "\n  graph " + std::to_string(g + 1) + ", replayed " +
                std::to_string(cr.graphs[g].replays) + " time(s):";
      for (const std::string& pass : cr.graphs[g].passes) {
        if (pass.rfind("fusion", 0) == 0 || pass.rfind("joint graph", 0) == 0 ||
            pass.rfind("forward: fusion", 0) == 0 || pass.rfind("backward: fusion", 0) == 0)
          report += "\n    " + pass;
      }
    }
  }
  if (!o.save_final.empty()) {
    SavedModelInfo info;
    info.architecture = o.model;
    info.dataset = "fashion-mnist";
    info.input_shape = {1, 28, 28};
    info.mean = detail::kMean;
    info.std = detail::kStd;
    info.trained_steps = loop.global_step;
    detail::save_model(o.save_final, *model, info);
    report += "\nmodel written to " + o.save_final + " (evaluate it with `loom eval " +
              o.save_final + "`)";
  }
  if (rep) {
    rep->on_end(result);
    rep->on_message(report);
  }
  return result;
}

}  // namespace loom::train
