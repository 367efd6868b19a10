// The Gloo side of `loom bench collectives`: N ranks joined by gloo's FileStore in a folder, each
// with a TCP device on 127.0.0.1 (Gloo has no shared-memory transport), run the sweep of
// bench/collective_sweep.h for each Gloo configuration asked for, printing its lines. The driver
// starts each rank itself (--rank R --store DIR), one configuration per job, so that it can stop a
// configuration that hangs (Note [bench deadlines] in bench/job.h) and go on with the others; run
// without --rank, this program forks the N ranks itself. Every Gloo wait is bounded by --timeout
// (the context's and its pairs' timeout, busy-polling included). The driver keeps, per size, the
// fastest configuration. Built when Debian's libgloo-dev is found.
//
// Configurations (Gloo 0.5, 2022): the newer API that PyTorch's ProcessGroupGloo calls
// (gloo::allreduce ring or bcube, gloo::allgather, gloo::broadcast), and the older algorithm
// classes on their own context, whose pairs can busy-poll in synchronous mode ("+bp"; only when
// every rank has a core, since a spinning rank otherwise starves the one it waits for).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "collective_sweep.h"

namespace {

using loom::bench::coll::Op;
namespace coll = loom::bench::coll;

// Barriers and the timing maxima of every configuration go through one plain context; tags are
// unique in it.
uint32_t next_control_tag() {
  static uint32_t tag = 0;
  return tag++;
}

void barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::BarrierOptions o(ctx);
  o.setTag(next_control_tag());
  gloo::barrier(o);
}

double max_over_ranks(const std::shared_ptr<gloo::Context>& ctx, double value) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(&value, 1);
  o.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  o.setTag(next_control_tag());
  gloo::allreduce(o);
  return value;
}

bool uses_new_api(const std::string& config) {
  return config == "ring" || config == "bcube" || config == "binomial" || config == "allreduce";
}

// Every configuration of the op; `busy_poll` adds the older classes on busy-polling pairs.
std::vector<std::string> all_configs(Op op, bool busy_poll) {
  std::vector<std::string> c;
  switch (op) {
    case Op::kAllreduce:
      c = {"ring", "bcube", "ring_chunked", "halving_doubling"};
      break;
    case Op::kAllgather:
      c = {"ring", "allgather_ring"};
      break;
    case Op::kReduceScatter:
      // This Gloo has no reduce-scatter in its newer API: "allreduce" reduces everything and keeps
      // this rank's block, as a Gloo user without the older class would.
      c = {"allreduce", "halving_doubling"};
      break;
    case Op::kBroadcast:
      c = {"binomial", "one_to_all"};
      break;
  }
  if (busy_poll) {
    std::vector<std::string> bp;
    for (const auto& n : c) {
      if (!uses_new_api(n)) bp.push_back(n + "+bp");
    }
    c.insert(c.end(), bp.begin(), bp.end());
  }
  return c;
}

// Note [Gloo reduce-scatter race]
// ReduceScatterHalvingDoubling on ordinary (asynchronous) pairs returns wrong elements now and then
// (seen in about one sweep of 4 at 2 ranks, near the end of rank 0's block): it moves its own
// reduced block to the front of the buffer while the send of that region to the peer may still be
// in flight. On busy-polling pairs sends complete before run() goes on, so "+bp" is correct. The
// racy configuration is left out unless asked for by --configs.
std::vector<std::string> default_configs(Op op, bool busy_poll) {
  std::vector<std::string> c = all_configs(op, busy_poll);
  if (op == Op::kReduceScatter) c.erase(std::find(c.begin(), c.end(), "halving_doubling"));
  return c;
}

class GlooBackend final : public coll::Backend {
 public:
  GlooBackend(std::string config, Op op, std::shared_ptr<gloo::Context> ctx,
              std::shared_ptr<gloo::Context> barrier_ctx)
      : config_(std::move(config)),
        op_(op),
        ctx_(std::move(ctx)),
        barrier_(std::move(barrier_ctx)) {}

  std::string config() const override { return config_; }

  void prepare(int64_t count) override {
    const int np = ctx_->size;
    buf_.prepare(op_, count, np);
    old_.reset();
    const std::string base = config_.substr(0, config_.find('+'));
    if (uses_new_api(base)) return;
    // The older classes bind their buffers when constructed, so build one per size.
    const int n = static_cast<int>(count);
    if (base == "ring_chunked") {
      old_ = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx_,
                                                                 std::vector<float*>{buf_.in.p}, n);
    } else if (base == "halving_doubling" && op_ == Op::kAllreduce) {
      old_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
          ctx_, std::vector<float*>{buf_.in.p}, n);
    } else if (base == "halving_doubling") {
      old_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          ctx_, std::vector<float*>{buf_.in.p}, n,
          std::vector<int>(static_cast<size_t>(np), static_cast<int>(buf_.block)));
    } else if (base == "allgather_ring") {
      old_ = std::make_unique<gloo::AllgatherRing<float>>(
          ctx_, std::vector<const float*>{buf_.in.p}, buf_.out.p, static_cast<int>(buf_.block));
    } else if (base == "one_to_all") {
      old_ = std::make_unique<gloo::BroadcastOneToAll<float>>(ctx_, std::vector<float*>{buf_.in.p},
                                                              static_cast<size_t>(count), 0, 0);
    } else {
      throw std::runtime_error("unknown Gloo configuration " + config_ + " for " +
                               coll::op_name(op_));
    }
  }

  float* in() override { return buf_.in.p; }
  float* out() override {
    if (op_ == Op::kAllgather) return buf_.out.p;
    // Reduce-scatter through an allreduce: this rank's block sits at its offset.
    if (config_ == "allreduce") return buf_.in.p + static_cast<int64_t>(ctx_->rank) * buf_.block;
    // ReduceScatterHalvingDoubling works in place and leaves this rank's block at the start.
    return buf_.in.p;
  }

  void run() override {
    if (old_) {
      old_->run();
      return;
    }
    const size_t n = static_cast<size_t>(buf_.count);
    if (op_ == Op::kAllreduce || op_ == Op::kReduceScatter) {
      gloo::AllreduceOptions o(ctx_);
      o.setOutput(buf_.in.p, n);
      o.setAlgorithm(config_ == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                        : gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      o.setTag(tag_++);
      gloo::allreduce(o);
    } else if (op_ == Op::kAllgather) {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(buf_.in.p, static_cast<size_t>(buf_.block));
      o.setOutput(buf_.out.p, n);
      o.setTag(tag_++);
      gloo::allgather(o);
    } else if (op_ == Op::kBroadcast) {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(buf_.in.p, n);
      o.setRoot(0);
      o.setTag(tag_++);
      gloo::broadcast(o);
    } else {
      throw std::runtime_error("no Gloo new-API " + config_ + " for " + coll::op_name(op_));
    }
  }

  void barrier() override { ::barrier(barrier_); }
  double max_over_ranks(double value) override { return ::max_over_ranks(barrier_, value); }

 private:
  std::string config_;
  Op op_;
  std::shared_ptr<gloo::Context> ctx_, barrier_;
  coll::RankBuffers buf_;
  std::unique_ptr<gloo::Algorithm> old_;
  uint32_t tag_ = 0;
};

std::shared_ptr<gloo::Context> connect(int rank, int np, gloo::rendezvous::Store& store,
                                       std::shared_ptr<gloo::transport::Device>& device,
                                       const std::string& name, bool busy_poll,
                                       std::chrono::milliseconds timeout) {
  gloo::rendezvous::PrefixStore prefixed(name, store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, np);
  // The pairs take their timeout from the context when they are made: every wait of theirs (a
  // busy-polling receive too) and of the collectives on them ends with an exception after it.
  ctx->setTimeout(timeout);
  ctx->connectFullMesh(prefixed, device);
  if (busy_poll) {
    for (int p = 0; p < np; ++p) {
      if (p != rank) ctx->getPair(p)->setSync(true, true);
    }
  }
  return ctx;
}

int run_rank(const coll::SweepOptions& o, int rank, const std::string& dir,
             const std::vector<std::string>& configs, std::chrono::milliseconds timeout) {
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto barrier_ctx = connect(rank, o.np, store, device, "barrier", false, timeout);
  std::vector<std::unique_ptr<GlooBackend>> owned;
  std::vector<coll::Backend*> backends;
  for (const auto& c : configs) {
    const bool bp = c.size() > 3 && c.compare(c.size() - 3, 3, "+bp") == 0;
    auto ctx = connect(rank, o.np, store, device, c, bp, timeout);
    owned.push_back(std::make_unique<GlooBackend>(c, o.op, ctx, barrier_ctx));
    backends.push_back(owned.back().get());
  }
  int failures = coll::run_sweep(o, rank, backends);
  barrier(barrier_ctx);  // nobody closes pairs a peer still reads
  return failures > 0 ? 3 : 0;
}

void usage() {
  std::printf(
      "usage: loom-anchor-gloo --np N --op OP --sizes MIN:MAX [--iters K] [--warmup W] [--repeats "
      "R]\n"
      "                        [--block-ms B] [--check] [--configs LIST] [--timeout S]\n"
      "                        [--rank R --store DIR] [--list-configs]\n"
      "  Run by `loom bench collectives --vs gloo`, which starts each rank itself (--rank R "
      "--store\n"
      "  DIR: this rank only, joined through the FileStore in DIR) for one configuration at a "
      "time;\n"
      "  without --rank the N ranks are forked here. --timeout S bounds every Gloo wait (300 s).\n"
      "  --list-configs prints the configurations that would run (\"configs A B ...\") and exits.\n"
      "  Test hook: LOOM_BENCH_TEST_FAULT (Note [sweep test hook] in collective_sweep.h).\n"
      "  Configurations per op (+bp: busy-polling pairs, only when N <= cores):\n"
      "    allreduce       ring bcube (new API), ring_chunked halving_doubling [+bp]\n"
      "    allgather       ring (new API), allgather_ring [+bp]\n"
      "    reduce_scatter  allreduce (new API; keeps this rank's block), halving_doubling+bp\n"
      "                    (halving_doubling on plain pairs only by --configs: it races, see\n"
      "                    Note [Gloo reduce-scatter race])\n"
      "    broadcast       binomial (new API), one_to_all [+bp]\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc), rest;
  coll::SweepOptions o;
  if (const char* fault = std::getenv("LOOM_BENCH_TEST_FAULT")) o.test_fault = fault;
  std::string err = coll::parse_sweep_args(args, &o, &rest);
  std::string only, store_dir;
  int rank = -1;
  double timeout_s = 300;
  bool list = false;
  for (size_t i = 0; err.empty() && i < rest.size(); ++i) {
    const std::string& a = rest[i];
    const bool has_value = i + 1 < rest.size();
    if (a == "--help") {
      usage();
      return 0;
    } else if (a == "--list-configs") {
      list = true;
    } else if (a == "--configs" && has_value) {
      only = rest[++i];
    } else if (a == "--store" && has_value) {
      store_dir = rest[++i];
    } else if (a == "--rank" && has_value) {
      char* end = nullptr;
      rank = static_cast<int>(std::strtol(rest[++i].c_str(), &end, 10));
      if (*end != '\0' || rank < 0) err = "--rank expects a rank but got '" + rest[i] + "'";
    } else if (a == "--timeout" && has_value) {
      char* end = nullptr;
      timeout_s = std::strtod(rest[++i].c_str(), &end);
      if (*end != '\0' || !(timeout_s > 0) || timeout_s > 1e6) {
        err = "--timeout expects seconds but got '" + rest[i] + "'";
      }
    } else {
      err = "unknown argument '" + a + "'";
    }
  }
  if (err.empty() && rank >= o.np) {
    err = "--rank " + std::to_string(rank) + " is not below --np " + std::to_string(o.np);
  }
  if (err.empty() && (rank >= 0) != !store_dir.empty()) err = "--rank and --store go together";
  if (!err.empty()) {
    std::fprintf(stderr, "loom-anchor-gloo: %s (see --help)\n", err.c_str());
    return 2;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const bool fits = static_cast<unsigned>(o.np) <= std::thread::hardware_concurrency();
  std::vector<std::string> configs = default_configs(o.op, fits);
  const std::vector<std::string> known = all_configs(o.op, fits);
  if (!only.empty()) {
    std::vector<std::string> chosen;
    std::string item;
    for (size_t i = 0; i <= only.size(); ++i) {
      if (i == only.size() || only[i] == ',') {
        if (std::find(known.begin(), known.end(), item) == known.end()) {
          std::fprintf(stderr,
                       "loom-anchor-gloo: no configuration '%s' for %s with %d ranks here\n",
                       item.c_str(), coll::op_name(o.op), o.np);
          return 2;
        }
        chosen.push_back(item);
        item.clear();
      } else {
        item += only[i];
      }
    }
    configs = chosen;
  }
  std::string names;
  for (const auto& c : configs) names += (names.empty() ? "" : " ") + c;
  const std::string about = "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
                            std::to_string(GLOO_VERSION_MINOR) + " over TCP 127.0.0.1" +
                            (fits ? "" : " (no busy-poll: more ranks than cores)");
  if (list) {
    coll::emit("configs " + names);
    coll::emit("info " + about);
    return 0;
  }
  if (rank >= 0) {
    // One rank, started by the driver, which bounds it and stops its peers when it fails.
    int rc = 1;
    try {
      std::filesystem::create_directories(store_dir);  // every rank may be first: EEXIST is fine
      rc = run_rank(o, rank, store_dir, configs, timeout);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-anchor-gloo: rank %d: %s\n", rank, e.what());
    }
    return rc;
  }
  coll::emit("info " + about + "; configs " + names);

  char tmpl[] = "/tmp/loom-anchor-gloo-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("loom-anchor-gloo: mkdtemp");
    return 1;
  }
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.np; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank must not outlive this launcher
      int rc = 1;
      try {
        rc = run_rank(o, r, tmpl, configs, timeout);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "loom-anchor-gloo: rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(rc);
    }
    if (pid < 0) {
      std::perror("loom-anchor-gloo: fork");
      break;
    }
    pids.push_back(pid);
  }
  // When a rank fails, its peers would wait for it until Gloo's timeout: stop them.
  int status = static_cast<int>(pids.size()) == o.np ? 0 : 1;
  size_t left = pids.size();
  while (left > 0) {
    int st = 0;
    pid_t pid = ::wait(&st);
    if (pid < 0) break;
    auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const int r = static_cast<int>(it - pids.begin());
    *it = -1;
    --left;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (status == 0) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (WIFEXITED(st)) {
          std::fprintf(stderr, "loom-anchor-gloo: rank %d exited with status %d\n", r,
                       WEXITSTATUS(st));
        } else {
          std::fprintf(stderr, "loom-anchor-gloo: rank %d was killed by signal %d\n", r,
                       WTERMSIG(st));
        }
      }
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGTERM);
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return status;
}
