// `loom train`: the main job. Trains an MLP or a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist IDX files) with Adam, shows progress, evaluates on the test set, and
// checkpoints so that an interrupted run (SIGINT, SIGTERM or SIGKILL) resumes with --resume and ends
// bit-identical to an uninterrupted run with the same seed.
//
// Data: the IDX files are packed once into loom shards (a cache directory, see data/pack.h) and read
// through the data loader (data/loader.h): block-shuffled order, worker threads, pooled batch buffers.
//
// Determinism: initialisation draws from Generator(seed); the sample order of epoch e is a pure
// function of (seed, e) whatever the number of ranks or loader workers; kernels are deterministic for
// a fixed thread count. A resumed run restores parameters, optimizer state, the loop position and the
// loader's state (epoch, samples consumed) exactly, so every later step computes the same bits.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "cli.h"
#include "dist/launch.h"
#include "loom/autograd.h"
#include "loom/dist/ddp.h"
#include "loom/dist/process_group.h"
#include "loom/checkpoint.h"
#include "loom/data/loader.h"
#include "loom/data/pack.h"
#include "loom/datasets.h"
#include "loom/error.h"
#include "loom/io.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/parallel.h"
#include "loom/memory/caching_allocator.h"
#include "loom/profiler.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal.store(sig); }

struct Config {
  std::string model = "mlp";
  std::string schedule = "none";  // or "cosine" (per step, to 0 at the end of the last epoch)
  int64_t epochs = 3;
  int64_t batch = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  int64_t train_samples = 0;  // 0: all
  int64_t threads = 0;        // 0: leave the default
  int64_t workers = 1;        // data loader worker threads
  bool augment = false;
  std::string data_dir;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 100;
  bool resume = false;
  std::string save_final;
  int64_t max_steps = 0;  // stop (as if interrupted) after this many steps in this process; testing aid
  bool progress_bar = false;

  // The fields a resumed run must share with the run that wrote the checkpoint.
  Json identity() const {
    return Json::object({{"model", model}, {"batch", batch}, {"lr", lr}, {"seed", static_cast<int64_t>(seed)},
                         {"train_samples", train_samples}, {"schedule", schedule},
                         {"augment", augment}});
  }
};

// Pixels scaled to [0, 1] and standardised with the Fashion-MNIST training set's mean and standard
// deviation; with --augment also a random 28x28 crop of the image padded by 2 and a horizontal flip
// with probability 1/2 (each sample's draw seeded by its place in the epoch).
std::vector<std::shared_ptr<data::FieldTransform>> train_fields(bool augment) {
  data::ImageOptions io;
  io.mean = {0.2860};
  io.std = {0.3530};
  if (augment) {
    io.crop_h = io.crop_w = 28;
    io.padding = 2;
    io.random_crop = true;
    io.flip_p = 0.5;
  }
  return {data::image_column("image", io), data::copy_column("label")};
}

std::shared_ptr<nn::Sequential> build_model(const std::string& kind, Generator& gen) {
  auto m = std::make_shared<nn::Sequential>();
  if (kind == "mlp") {
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(784, 256, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(256, 128, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
  } else if (kind == "cnn") {
    nn::Conv2dOptions c1(1, 16, 3);
    c1.padding = 1;
    nn::Conv2dOptions c2(16, 32, 3);
    c2.padding = 1;
    m->push_back(std::make_shared<nn::Conv2d>(c1, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Conv2d>(c2, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(32 * 7 * 7, 128, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
  } else {
    LOOM_THROW(ValueError, "[train] unknown --model '", kind, "' (expected mlp or cnn)");
  }
  return m;
}

double evaluate(nn::Module& model, const std::shared_ptr<const data::ShardReader>& test) {
  autograd::NoGradGuard ng;
  model.eval();
  data::LoaderOptions o;
  o.batch_size = 1000;
  o.order.shuffle = data::ShuffleMode::None;
  o.fields = train_fields(false);
  data::Loader loader(test, o);
  int64_t correct = 0, n = 0;
  while (auto b = loader.next()) {
    Tensor pred = argmax(model.forward((*b)["image"]), 1);
    correct += sum(eq(pred, (*b)["label"])).item<int64_t>();
    n += b->size();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

std::string fmt_duration(double s) {
  char buf[32];
  const int t = static_cast<int>(std::lround(std::max(0.0, s)));
  std::snprintf(buf, sizeof(buf), "%d:%02d", t / 60, t % 60);
  return buf;
}

class Progress {
 public:
  Progress(bool bar, int64_t epoch, int64_t epochs, int64_t steps)
      : bar_(bar), epoch_(epoch), epochs_(epochs), steps_(steps), start_(Clock::now()) {}
  void update(int64_t step, double loss, int64_t samples, bool force = false) {
    const auto now = Clock::now();
    const double el = std::chrono::duration<double>(now - start_).count();
    const double rate = el > 0 ? static_cast<double>(samples) / el : 0.0;
    const double eta = step > 0 ? el / static_cast<double>(step) * static_cast<double>(steps_ - step) : 0.0;
    if (bar_) {
      if (!force && std::chrono::duration<double>(now - last_).count() < 0.1) return;
      last_ = now;
      const int width = 24;
      const int fill = static_cast<int>(width * step / std::max<int64_t>(steps_, 1));
      std::string b(static_cast<size_t>(fill), '=');
      if (fill < width) b += '>' + std::string(static_cast<size_t>(width - fill - 1), ' ');
      std::printf("\repoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f samples/s ETA %s   ",
                  static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), b.c_str(),
                  static_cast<long long>(step), static_cast<long long>(steps_), loss, rate,
                  fmt_duration(eta).c_str());
      std::fflush(stdout);
    } else if (force || step % std::max<int64_t>(steps_ / 5, 1) == 0) {
      std::printf("epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s ETA %s\n",
                  static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_),
                  static_cast<long long>(step), static_cast<long long>(steps_), loss, rate,
                  fmt_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  void finish() {
    if (bar_) std::printf("\n");
  }

 private:
  bool bar_;
  int64_t epoch_, epochs_, steps_;
  Clock::time_point start_, last_{};
};

struct Loop {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t global_step = 0;
  std::optional<data::LoaderState> data;  // where the loader stands (restored on resume)
};

io::TensorMap gather_state(nn::Module& model, optim::Optimizer& opt, Json& optim_scalars) {
  io::TensorMap t;
  for (auto& [name, p] : model.named_parameters()) t.emplace_back("model." + name, p.detach());
  for (auto& [name, b] : model.named_buffers()) t.emplace_back("model." + name, b);
  optim::OptimizerState s = opt.state_dict();
  for (auto& [name, v] : s.tensors) t.emplace_back("optim." + name, v);
  Json sc = Json::object();
  for (auto& [name, v] : s.scalars) sc.set(name, v);
  optim_scalars = sc;
  return t;
}

Json scalars_json(const std::vector<std::pair<std::string, double>>& v) {
  Json j = Json::object();
  for (auto& [name, x] : v) j.set(name, x);
  return j;
}

Json rng_json(const Generator& g) {
  GeneratorState st = g.state();
  return Json::object({{"seed", st.seed}, {"offset", st.offset}});
}
void rng_restore(const Generator& g, const Json& j) {
  GeneratorState st;
  st.seed = static_cast<uint64_t>(j.at("seed").as_int());
  st.offset = static_cast<uint64_t>(j.at("offset").as_int());
  g.set_state(st);
}

// Everything that is not a tensor goes to the JSON sidecar: configuration (checked on resume), the
// loop position, optimizer hyperparameters, scheduler state, and the generators' (seed, offset).
void save(const Config& cfg, nn::Module& model, optim::Optimizer& opt, optim::LRScheduler* sched,
          const Generator& gen, const Loop& loop) {
  Json scalars;
  io::TensorMap tensors = gather_state(model, opt, scalars);
  Json side = Json::object({{"config", cfg.identity()},
                            {"loop", Json::object({{"epoch", loop.epoch},
                                                   {"batch_in_epoch", loop.batch_in_epoch},
                                                   {"global_step", loop.global_step}})},
                            {"data", loop.data ? loop.data->to_json() : Json()},
                            {"optimizer", scalars},
                            {"scheduler", sched ? scalars_json(sched->state_dict()) : Json()},
                            {"rng", Json::object({{"model", rng_json(gen)},
                                                  {"default", rng_json(default_generator())}})}});
  io::save_checkpoint(cfg.checkpoint_dir, loop.global_step, tensors, side);
}

bool restore(const Config& cfg, nn::Module& model, optim::Optimizer& opt, optim::LRScheduler* sched,
             const Generator& gen, Loop& loop) {
  auto ck = io::load_latest_checkpoint(cfg.checkpoint_dir);
  if (!ck) return false;
  const Json& saved = ck->sidecar.at("config");
  const std::string want = cfg.identity().dump(), got = saved.dump();
  LOOM_CHECK(want == got, "[train] the checkpoint in ", cfg.checkpoint_dir, " was written by a run with "
             "a different configuration: ", got, " (this run: ", want, ")");
  std::map<std::string, Tensor> model_state;
  optim::OptimizerState os;
  for (auto& [name, t] : ck->tensors) {
    if (name.rfind("model.", 0) == 0) {
      model_state[name.substr(6)] = t;
    } else if (name.rfind("optim.", 0) == 0) {
      os.tensors.emplace_back(name.substr(6), t);
    } else {
      LOOM_THROW(DataError, "[train] unexpected tensor '", name, "' in ", ck->path, ".safetensors");
    }
  }
  for (const auto& [name, v] : ck->sidecar.at("optimizer").as_object()) os.scalars.emplace_back(name, v.as_double());
  model.load_state_dict(model_state, /*strict=*/true);
  opt.load_state_dict(os);
  if (sched) {
    optim::SchedulerState ss;
    for (const auto& [name, v] : ck->sidecar.at("scheduler").as_object()) ss.emplace_back(name, v.as_double());
    sched->load_state_dict(ss);
  }
  rng_restore(gen, ck->sidecar.at("rng").at("model"));
  rng_restore(default_generator(), ck->sidecar.at("rng").at("default"));
  const Json& l = ck->sidecar.at("loop");
  loop.epoch = l.at("epoch").as_int();
  loop.batch_in_epoch = l.at("batch_in_epoch").as_int();
  loop.global_step = l.at("global_step").as_int();
  loop.data = data::LoaderState::from_json(ck->sidecar.at("data"));
  std::printf("resumed from %s (epoch %lld, batch %lld, step %lld)\n", ck->path.c_str(),
              static_cast<long long>(loop.epoch + 1), static_cast<long long>(loop.batch_in_epoch),
              static_cast<long long>(loop.global_step));
  return true;
}

// `loom train --nproc N`: this process becomes the launcher of N workers running the same command
// (without --nproc), joined through torchrun's environment variables.
int launch_workers(const std::vector<std::string>& argv, int64_t nproc, int max_restarts) {
  dist::LaunchOptions lo;
  lo.nproc = static_cast<int>(nproc);
  lo.max_restarts = max_restarts;
  lo.command = {self_dir() + "/loom"};
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--nproc" || a == "--max-restarts") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0 || a.rfind("--max-restarts=", 0) == 0) continue;
    lo.command.push_back(a);
  }
  ::setenv("LOOM_TRAIN_WORKER", "1", 1);
  return dist::launch(lo);
}

// Data parallelism of one training process: rank and world from the launcher's environment.
struct Parallel {
  std::shared_ptr<dist::ProcessGroup> group;
  int rank = 0;
  int world = 1;
  bool leader() const { return rank == 0; }
  // Whether any rank wants to stop (signals reach ranks at different steps; all must stop together).
  bool any(bool flag) const {
    if (!group) return flag;
    Tensor t = full({1}, Scalar(int64_t{flag ? 1 : 0}), TensorOptions(kInt64));
    group->allreduce(t, dist::ReduceOp::MAX);
    return t.data_ptr<int64_t>()[0] != 0;
  }
};

Parallel init_parallel() {
  Parallel par;
  const char* ws = std::getenv("WORLD_SIZE");
  if (ws && std::atoi(ws) > 1) {
    par.group = dist::init_process_group("env://");
    par.rank = par.group->rank();
    par.world = par.group->size();
  }
  return par;
}

void usage() {
  std::printf(
      "usage: loom train [--model mlp|cnn] [--schedule none|cosine] [--epochs N] [--batch N] [--lr X] [--seed S]\n"
      "                  [--data DIR] [--train-samples N] [--threads N] [--workers N] [--augment]\n"
      "                  [--checkpoint-dir DIR [--checkpoint-every N] [--resume]] [--save-final FILE]\n"
      "                  [--nproc N [--max-restarts R]] [--profile FILE[.gz] [--profile-steps W,WU,A]]\n"
      "  Trains on Fashion-MNIST (Debian package dataset-fashion-mnist, or --data / LOOM_FASHION_MNIST_DIR)\n"
      "  with Adam and reports test accuracy, time and samples/s. SIGINT/SIGTERM save a checkpoint and\n"
      "  stop; --resume continues from the last checkpoint bit-identically. --nproc N trains data-parallel\n"
      "  on N local processes (each takes 1/N of every batch; gradients are averaged); with\n"
      "  --max-restarts a failed group is restarted and resumes from its last checkpoint.\n"
      "  The IDX files are packed once into loom shards under $LOOM_CACHE_DIR (default ~/.cache/loom) and\n"
      "  read by the data loader with --workers threads (default 1); --augment adds random crops and flips.\n"
      "  --profile writes a Chrome trace (ui.perfetto.dev) of the steps --profile-steps selects (skip W,\n"
      "  warm up WU, record A; default 5,2,10) and prints the top operators and the step breakdown.\n");
}

int run_train(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "resume", "no-progress", "augment"},
            {"model", "schedule", "epochs", "batch", "lr", "seed", "data", "train-samples", "threads", "workers",
             "checkpoint-dir", "checkpoint-every", "save-final", "max-steps", "nproc", "max-restarts",
             "profile", "profile-steps"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  const int64_t nproc = args.get_int("nproc", 1);
  LOOM_CHECK(nproc >= 1, "[train] --nproc must be >= 1 but is ", nproc);
  Config cfg;
  cfg.model = args.get_or("model", "mlp");
  cfg.schedule = args.get_or("schedule", "none");
  LOOM_CHECK(cfg.schedule == "none" || cfg.schedule == "cosine", "[train] unknown --schedule '",
             cfg.schedule, "' (expected none or cosine)");
  cfg.epochs = args.get_int("epochs", 3);
  cfg.batch = args.get_int("batch", 128);
  cfg.lr = std::stod(args.get_or("lr", "0.001"));
  cfg.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  cfg.train_samples = args.get_int("train-samples", 0);
  cfg.threads = args.get_int("threads", 0);
  cfg.workers = args.get_int("workers", 1);
  cfg.augment = args.flag("augment");
  cfg.data_dir = args.get_or("data", data::default_fashion_mnist_dir());
  cfg.checkpoint_dir = args.get_or("checkpoint-dir", "");
  cfg.checkpoint_every = args.get_int("checkpoint-every", 100);
  // A group restarted by the launcher (--max-restarts) resumes from its last checkpoint.
  const char* restarts = std::getenv("LOOM_RESTART_COUNT");
  cfg.resume = args.flag("resume") || (restarts && std::atoi(restarts) > 0 && args.get("checkpoint-dir"));
  cfg.save_final = args.get_or("save-final", "");
  cfg.max_steps = args.get_int("max-steps", 0);
  cfg.progress_bar = isatty(STDOUT_FILENO) && !args.flag("no-progress");
  LOOM_CHECK(cfg.epochs > 0 && cfg.batch > 0 && cfg.checkpoint_every > 0,
             "[train] --epochs, --batch and --checkpoint-every must be positive");
  LOOM_CHECK(!cfg.resume || !cfg.checkpoint_dir.empty(), "[train] --resume needs --checkpoint-dir");
  LOOM_CHECK(cfg.workers >= 0, "[train] --workers must be >= 0 but is ", cfg.workers);
  LOOM_CHECK(cfg.batch % nproc == 0, "[train] --batch ", cfg.batch, " must be a multiple of --nproc ", nproc,
             " (every rank takes the same share of a batch)");
  // Pack the IDX files into shards once (the launcher does it before starting workers, so they find
  // them ready).
  const std::string train_dir = data::fashion_mnist_shards(cfg.data_dir, true, cfg.train_samples);
  const std::string test_dir = data::fashion_mnist_shards(cfg.data_dir, false);
  if (nproc > 1 && std::getenv("LOOM_TRAIN_WORKER") == nullptr) {
    return launch_workers(argv, nproc, static_cast<int>(args.get_int("max-restarts", 0)));
  }
  if (cfg.threads > 0) set_num_threads(static_cast<int>(cfg.threads));
  // --profile: CPU tensors come from a caching allocator (over host memory) so that the trace has
  // allocated / reserved memory tracks and the report can state peak memory. It lives until exit:
  // tensors freed during static destruction must still find it.
  memory::CachingAllocator* cpu_cache = nullptr;
  if (args.get("profile")) {
    const size_t ram = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    auto* dev = new memory::SimulatedDevice(ram, /*backed=*/true);
    memory::AllocatorConfig ac;
    ac.history_capacity = 0;
    cpu_cache = new memory::CachingAllocator(*dev, ac);
    set_allocator(DeviceType::CPU, new memory::CachingAllocatorAdapter(*cpu_cache, kCPU));
  }
  Parallel par = init_parallel();

  auto train_ds = std::make_shared<const data::ShardReader>(train_dir);
  auto test_ds = std::make_shared<const data::ShardReader>(test_dir);
  data::LoaderOptions lo;
  lo.batch_size = cfg.batch / par.world;
  lo.world = par.world;
  lo.rank = par.rank;
  lo.workers = static_cast<int>(cfg.workers);
  lo.order.seed = cfg.seed;
  lo.fields = train_fields(cfg.augment);
  data::Loader loader(train_ds, lo);
  const int64_t n = train_ds->size();
  const int64_t steps_per_epoch = loader.batches_in_epoch();

  Generator gen(cfg.seed);
  auto model = build_model(cfg.model, gen);
  int64_t nparams = 0;
  for (auto& p : model->parameters()) nparams += p.numel();
  optim::AdamOptions ao;
  ao.lr = cfg.lr;
  optim::Adam opt(model->parameters(), ao);
  std::unique_ptr<optim::LRScheduler> sched;
  if (cfg.schedule == "cosine") {
    sched = std::make_unique<optim::CosineAnnealingLR>(opt, cfg.epochs * steps_per_epoch);
  }

  Loop loop;
  const bool resumed = cfg.resume && restore(cfg, *model, opt, sched.get(), gen, loop);
  if (cfg.resume && !resumed) {
    std::printf("no checkpoint in %s: starting from scratch\n", cfg.checkpoint_dir.c_str());
  }
  std::shared_ptr<nn::Module> net = model;
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (par.group) {
    ddp = std::make_shared<dist::DistributedDataParallel>(model, par.group);
    net = ddp;
    if (!par.leader()) cfg.progress_bar = false;
  }
  if (par.leader()) {
    std::printf("loom train: %s (%lld parameters), Fashion-MNIST %lld train / %lld test, batch %lld, "
                "Adam lr %g, %lld epochs, %d threads, seed %llu\n",
                cfg.model.c_str(), static_cast<long long>(nparams), static_cast<long long>(n),
                static_cast<long long>(test_ds->size()), static_cast<long long>(cfg.batch), cfg.lr,
                static_cast<long long>(cfg.epochs), get_num_threads(),
                static_cast<unsigned long long>(cfg.seed));
    if (par.group) {
      std::printf("data parallel: %d processes, %lld samples per rank per step, %zu gradient bucket(s); %s\n",
                  par.world, static_cast<long long>(cfg.batch / par.world), ddp->bucket_names().size(),
                  par.group->describe().c_str());
    }
    std::printf("data: %s\n", loader.describe().c_str());
    std::fflush(stdout);
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // --profile: a window of steps recorded (profiler.h), written and summarised when the loop ends.
  std::unique_ptr<profiler::Profile> prof;
  std::string prof_path = args.get_or("profile", "");
  const profiler::Schedule po_schedule = profiler::Schedule::parse(args.get_or("profile-steps", "5,2,10"));
  if (!prof_path.empty()) {
    profiler::ProfileOptions po;
    po.schedule = po_schedule;
    if (par.world > 1) {  // one trace per rank: out.json.gz -> out.rank1.json.gz
      const size_t dot = prof_path.find(".json");
      const std::string tag = ".rank" + std::to_string(par.rank);
      prof_path.insert(dot == std::string::npos ? prof_path.size() : dot, tag);
    }
    prof = std::make_unique<profiler::Profile>(po);
    prof->start();
  }
  auto finish_profile = [&] {
    if (!prof) return;
    prof->stop();
    profiler::write_chrome_trace(prof->trace(), prof_path);
    if (!par.leader()) return;
    std::printf("profile (%s): trace written to %s\n%s", po_schedule.describe().c_str(), prof_path.c_str(),
                profiler::summarize(prof->trace(), 5).c_str());
    if (prof->trace().empty()) std::printf("profile: the run ended before the recorded steps; try --profile-steps 0,0,5\n");
    if (cpu_cache) {
      const memory::MemoryStats ms = cpu_cache->stats();
      std::printf("memory (CPU tensors through the caching allocator): peak allocated %.1f MB, peak reserved "
                  "%.1f MB, %lld segments, fragmentation now %.2f\n",
                  static_cast<double>(ms.allocated_bytes.peak) / 1e6, static_cast<double>(ms.reserved_bytes.peak) / 1e6,
                  static_cast<long long>(ms.segments.current), ms.fragmentation());
    }
    prof.reset();
  };

  const auto t0 = Clock::now();
  int64_t samples = 0, steps_here = 0;
  double last_loss = NAN;
  model->train();
  while (loop.epoch < cfg.epochs) {
    if (loop.data && loop.data->epoch == loop.epoch) {
      loader.load_state(*loop.data);  // a resumed run: continue at exactly the next sample
    } else {
      loader.set_epoch(loop.epoch);
    }
    Progress progress(cfg.progress_bar, loop.epoch, cfg.epochs, steps_per_epoch);
    int64_t epoch_samples = 0;
    for (; loop.batch_in_epoch < steps_per_epoch; ) {
      if (prof && steps_here > 0) prof->step();  // a profiled step spans one whole iteration
      std::optional<data::Batch> batch = loader.next();
      LOOM_INTERNAL_ASSERT(batch.has_value(), "the loader ended epoch ", loop.epoch, " after ",
                           loop.batch_in_epoch, " of ", steps_per_epoch, " batches");
      const int64_t len = batch->size() * par.world;
      const Tensor& x = (*batch)["image"];
      const Tensor& y = (*batch)["label"];
      opt.zero_grad();
      Tensor loss = cross_entropy(net->forward(x), y);
      loss.backward();
      opt.step();
      if (sched) sched->step();
      last_loss = loss.item<double>();
      LOOM_CHECK(std::isfinite(last_loss), "[train] the loss became ", last_loss, " at step ",
                 loop.global_step, " (epoch ", loop.epoch + 1, ", batch ", loop.batch_in_epoch,
                 "); try a smaller --lr");
      batch.reset();  // its buffer goes back to the loader's pool
      loop.data = loader.state();
      ++loop.batch_in_epoch;
      ++loop.global_step;
      ++steps_here;
      samples += len;
      epoch_samples += len;
      if (par.leader()) {
        progress.update(loop.batch_in_epoch, last_loss, epoch_samples, loop.batch_in_epoch == steps_per_epoch);
      }
      const bool stop = par.any(g_stop_signal.load() != 0 || (cfg.max_steps > 0 && steps_here >= cfg.max_steps));
      if (stop && g_stop_signal.load() == 0) g_stop_signal.store(cfg.max_steps > 0 && steps_here >= cfg.max_steps ? 0 : SIGTERM);
      if (loop.batch_in_epoch == steps_per_epoch) {
        loop.batch_in_epoch = 0;
        ++loop.epoch;
        if (!cfg.checkpoint_dir.empty() && par.leader()) save(cfg, *model, opt, sched.get(), gen, loop);
        if (par.leader()) progress.finish();
        break;
      }
      if (!cfg.checkpoint_dir.empty() && par.leader() && (stop || loop.global_step % cfg.checkpoint_every == 0)) {
        save(cfg, *model, opt, sched.get(), gen, loop);
      }
      if (stop) break;
    }
    const int sig = g_stop_signal.load();
    if (sig != 0 || (cfg.max_steps > 0 && steps_here >= cfg.max_steps)) {
      progress.finish();
      finish_profile();
      std::printf("stopped at step %lld (%s)%s%s\n", static_cast<long long>(loop.global_step),
                  sig ? strsignal(sig) : "--max-steps",
                  cfg.checkpoint_dir.empty() ? "" : "; checkpoint saved in ",
                  cfg.checkpoint_dir.c_str());
      if (!cfg.checkpoint_dir.empty()) std::printf("resume with the same command and --resume\n");
      return sig ? 128 + sig : 3;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  finish_profile();
  if (!par.leader()) return 0;
  const double acc = evaluate(*model, test_ds);
  std::printf("test accuracy %.2f%% | final loss %.4f | %lld steps in %.1f s | %.0f samples/s\n",
              100.0 * acc, last_loss, static_cast<long long>(steps_here), secs,
              secs > 0 ? static_cast<double>(samples) / secs : 0.0);
  const data::LoaderMetrics lm = loader.metrics();
  std::printf("data: waited %.2f s for batches (%.1f%% of the run; longest %.1f ms), %.1f batches ready on "
              "average; workers spent %.2f s reading, %.2f s decoding\n",
              lm.wait_seconds, secs > 0 ? 100.0 * lm.wait_seconds / secs : 0.0, lm.max_wait_seconds * 1e3,
              lm.mean_occupancy(), lm.read_seconds, lm.decode_seconds);
  if (ddp) {
    auto st = ddp->stats();
    std::printf("data parallel: %lld bucket allreduces (%.1f MB), backward waited %.2f s for gradients\n",
                static_cast<long long>(st.reductions), static_cast<double>(st.bytes_reduced) / 1e6,
                st.wait_seconds);
    std::printf("process group: %s\n", par.group->describe().c_str());
  }
  if (!cfg.save_final.empty()) {
    io::TensorMap params;
    for (auto& [name, p] : model->named_parameters()) params.emplace_back(name, p.detach());
    io::save_safetensors(cfg.save_final, params);
    std::printf("parameters written to %s\n", cfg.save_final.c_str());
  }
  return 0;
}

const RegisterCommand kTrain("train", "train an MLP or CNN on Fashion-MNIST (the main job)", run_train);

}  // namespace
}  // namespace loom::cli
