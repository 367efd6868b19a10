// `loom bench collectives`: an nccl-tests-like table of one collective over N local processes,
// loom's process group side by side with Gloo (loom-anchor-gloo) and OpenMPI (loom-anchor-mpi under
// mpirun). Every side runs the sweep of collective_sweep.h (see Note [collective sweep]) as its own
// job of N processes; the driver runs the jobs one after the other, round after round with the
// order rotated, and takes per size the median over rounds (this 2-core machine is shared and
// noisy).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "bench.h"
#include "cli.h"
#include "collectives.h"
#include "loom/error.h"

namespace loom::bench {
namespace {

using coll::Op;
using Clock = std::chrono::steady_clock;

// ---- child processes ----

// Runs each body in a forked child whose stdout is one shared pipe, and calls on_line for every
// line they print. When a child fails the others get SIGTERM (SIGKILL 5 s later); after timeout_s
// all of them do. Returns "" or what went wrong. Children exit with _exit: they never return here.
std::string run_children(const std::vector<std::function<int()>>& bodies, double timeout_s,
                         const std::function<void(const std::string&)>& on_line) {
  int fds[2];
  LOOM_CHECK_AS(DistError, ::pipe2(fds, O_CLOEXEC) == 0, "[bench] pipe: ", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < bodies.size(); ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // no orphans left spinning if the driver dies
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      int rc = 1;
      try {
        rc = bodies[i]();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "loom bench collectives: process %zu: %s\n", i, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(rc);
    }
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      ::close(fds[0]);
      ::close(fds[1]);
      throw DistError(detail::str_cat("[bench] fork: ", std::strerror(errno)));
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);

  std::string failure, pending;
  std::vector<bool> alive(pids.size(), true);
  size_t n_alive = pids.size();
  bool eof = false;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  Clock::time_point stop_at{};
  bool stopping = false, killed = false;
  auto stop_all = [&](int sig) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (alive[i]) ::kill(pids[i], sig);
    }
  };
  while (!eof || n_alive > 0) {
    if (!eof) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char buf[65536];
        ssize_t n = ::read(fds[0], buf, sizeof(buf));
        if (n > 0) {
          pending.append(buf, static_cast<size_t>(n));
          size_t nl;
          while ((nl = pending.find('\n')) != std::string::npos) {
            on_line(pending.substr(0, nl));
            pending.erase(0, nl + 1);
          }
        } else if (n == 0 || errno != EINTR) {
          eof = true;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (!alive[i] || ::waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      alive[i] = false;
      --n_alive;
      bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && failure.empty()) {
        failure = WIFEXITED(st)
                      ? detail::str_cat("process ", i, " exited with status ", WEXITSTATUS(st))
                      : detail::str_cat("process ", i, " was killed by signal ", WTERMSIG(st));
      }
      if (!ok && !stopping) {
        stopping = true;
        stop_at = Clock::now();
        stop_all(SIGTERM);
      }
    }
    if (!stopping && Clock::now() > deadline) {
      if (failure.empty()) failure = detail::str_cat("timed out after ", timeout_s, " s");
      stopping = true;
      stop_at = Clock::now();
      stop_all(SIGTERM);
    }
    if (stopping && !killed && Clock::now() - stop_at > std::chrono::seconds(5)) {
      killed = true;
      stop_all(SIGKILL);
    }
    if (killed && n_alive == 0) break;  // a grandchild may still hold the pipe; do not wait for it
  }
  if (!pending.empty()) on_line(pending);
  ::close(fds[0]);
  return failure;
}

// ---- one side of the table ----

struct Side {
  std::string key;    // loom, gloo, mpi: the --vs names
  std::string title;  // for the table
  std::string unavailable;
  std::function<std::vector<std::function<int()>>(int round)> job;
  std::vector<std::string> info;
  // bytes -> configuration -> per-round medians
  std::map<int64_t, std::map<std::string, std::vector<double>>> times;
  std::map<int64_t, int64_t> counts;
  int checks_ok = 0;
  std::vector<std::string> check_failures;
  std::set<std::pair<std::string, long long>> failed_in_round;  // (config, bytes), this round
  std::vector<std::string> errors;

  void take(const std::string& line, bool verbose) {
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "info") {
      std::string text = line.substr(std::min(line.size(), size_t{5}));
      if (std::find(info.begin(), info.end(), text) == info.end()) info.push_back(text);
    } else if (kind == "result") {
      std::string config, algorithm;
      long long bytes = 0, count = 0;
      double us = NAN;
      // A configuration whose answer was wrong at this size in this round has no speed to report.
      if (is >> config >> algorithm >> bytes >> count >> us &&
          !failed_in_round.count({config, bytes})) {
        times[bytes][algorithm].push_back(us);
        counts[bytes] = count;
      }
    } else if (kind == "check") {
      std::string config, verdict;
      long long bytes = 0;
      int rank = 0;
      is >> config >> bytes >> rank >> verdict;
      if (verdict == "ok") {
        ++checks_ok;
      } else {
        failed_in_round.insert({config, bytes});
        check_failures.push_back(
            detail::str_cat(key, " ", config, " at ", bytes, " bytes, rank ", rank, ": ",
                            line.substr(std::min(line.size(), line.find(verdict)))));
      }
    } else if (!line.empty()) {
      // Anything else (mpirun's notices, a library's warnings) goes to stderr, marked with the
      // side.
      std::fprintf(stderr, "[%s] %s\n", key.c_str(), line.c_str());
    }
    if (verbose && (kind == "result" || kind == "check"))
      std::fprintf(stderr, "[%s] %s\n", key.c_str(), line.c_str());
  }

  // The best configuration at a size (lowest median over rounds): {config, us}; {"", NaN} if none.
  std::pair<std::string, double> best(int64_t bytes) const {
    std::pair<std::string, double> b{"", NAN};
    auto it = times.find(bytes);
    if (it == times.end()) return b;
    for (const auto& [config, v] : it->second) {
      double m = median(v);
      if (std::isnan(b.second) || m < b.second) b = {config, m};
    }
    return b;
  }
};

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A body that replaces the child with argv.
std::function<int()> exec_body(std::vector<std::string> argv) {
  return [argv] {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::fprintf(stderr, "loom bench collectives: cannot run %s: %s\n", a[0], std::strerror(errno));
    return 127;
  };
}

// ---- targets from the issue ----

struct Target {
  const char* anchor;
  int64_t min_bytes, max_bytes;
  bool latency;  // loom time / anchor time <= ratio; otherwise loom busbw / anchor busbw >= ratio
  double ratio;
};
constexpr Target kTargets[] = {
    {"gloo", 1 << 20, INT64_MAX, false, 1.2},
    {"mpi", 1 << 20, INT64_MAX, false, 1.0},
    {"mpi", 4 << 10, 4 << 10, true, 1.0},
};

const Target* target_for(const std::string& anchor, int64_t bytes) {
  for (const Target& t : kTargets) {
    if (anchor == t.anchor && bytes >= t.min_bytes && bytes <= t.max_bytes) return &t;
  }
  return nullptr;
}

// Rows below this size also get a latency ratio, and their JSON figure is the time.
constexpr int64_t kLatencyBytes = 1 << 20;

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string num_or_null(double v) {
  if (std::isnan(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

void usage() {
  std::printf(
      "usage: loom bench collectives [--np N] [--op OP] [--sizes MIN:MAX] [--algo A] [--transport "
      "T]\n"
      "                              [--vs gloo,mpi] [--check] [--iters K] [--warmup W] [--repeats "
      "R]\n"
      "                              [--block-ms B] [--rounds R] [--gloo-configs LIST] [--json "
      "FILE]\n"
      "                              [--verbose]\n"
      "  One collective over N local processes, nccl-tests style: per size (powers of two, bytes "
      "of\n"
      "  f32) the time per call, algbw = bytes/time and busbw = algbw * factor (allreduce "
      "2(n-1)/n,\n"
      "  allgather and reduce_scatter (n-1)/n, broadcast 1), loom's algorithm, and for each anchor "
      "its\n"
      "  best configuration with loom/anchor ratios (bw x: busbw ratio, higher is better; lat x "
      "below\n"
      "  1 MiB: time ratio, lower is better).\n"
      "  --np N            ranks (default 2)\n"
      "  --op OP           allreduce (default), allgather, reduce_scatter or broadcast\n"
      "  --sizes MIN:MAX   e.g. 4K:64M (default)\n"
      "  --algo A          loom's allreduce algorithm: ring, tree, dbt, rhd, oneshot, ... (auto)\n"
      "  --transport T     loom's transport: shm or tcp (default: auto)\n"
      "  --vs LIST         anchors: gloo (loom-anchor-gloo), mpi (loom-anchor-mpi under mpirun)\n"
      "  --check           verify every result against closed-form sums; non-zero exit on a "
      "mismatch\n"
      "  --block-ms B      a timed block lasts about B ms (20) at the warm-up's pace: small "
      "messages\n"
      "                    get many calls, big ones few; --iters K caps the calls per block "
      "(1000)\n"
      "  --repeats R       timed blocks per size, each after a barrier (5; the median is kept);\n"
      "                    --warmup W untimed calls before them (5)\n"
      "  --rounds R        each side runs R times, order rotated; medians over rounds (default 3)\n"
      "  --gloo-configs L  Gloo configurations to try (default: all that fit, see loom-anchor-gloo "
      "--help)\n");
}

int run_collectives(const std::vector<std::string>& argv) {
  cli::Args args(argv, {"help", "check", "verbose"},
                 {"np", "op", "sizes", "algo", "transport", "vs", "iters", "warmup", "repeats",
                  "block-ms", "rounds", "json", "gloo-configs", "timeout"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  LOOM_CHECK(args.positionals().empty(), "[bench collectives] unexpected argument '",
             args.positionals()[0], "' (see --help)");
  coll::SweepOptions o;
  o.np = static_cast<int>(args.get_int("np", 2));
  LOOM_CHECK(o.np >= 2 && o.np <= 64, "[bench collectives] --np must be from 2 to 64 but got ",
             o.np);
  std::string op = args.get_or("op", "allreduce");
  LOOM_CHECK(coll::parse_op(op, &o.op), "[bench collectives] --op must be allreduce, allgather, ",
             "reduce_scatter or broadcast but got '", op, "'");
  std::string err = coll::parse_sizes(args.get_or("sizes", "4K:64M"), &o);
  LOOM_CHECK(err.empty(), "[bench collectives] ", err);
  auto positive = [&](const char* name, int64_t fallback) {
    int64_t v = args.get_int(name, fallback);
    LOOM_CHECK(v >= 1, "[bench collectives] --", name, " must be positive but got ", v);
    return static_cast<int>(v);
  };
  o.iters = positive("iters", 1000);
  o.warmup = positive("warmup", 5);
  o.repeats = positive("repeats", 5);
  o.block_ms = positive("block-ms", 20);
  o.check = args.flag("check");
  const int rounds = positive("rounds", 3);
  const double timeout_s = static_cast<double>(positive("timeout", 900));
  const bool verbose = args.flag("verbose");
  LoomRankOptions lo;
  lo.algo = args.get_or("algo", "");
  lo.transport = args.get_or("transport", "");
  if (lo.algo == "auto") lo.algo.clear();
  if (lo.transport == "auto") lo.transport.clear();
  // Algorithm names are loom's to check (a rank reports an unknown one); transports are few.
  LOOM_CHECK(lo.transport.empty() || lo.transport == "shm" || lo.transport == "tcp",
             "[bench collectives] --transport must be shm, tcp or auto but got '", lo.transport,
             "'");
  std::vector<std::string> vs;
  {
    std::stringstream ss(args.get_or("vs", ""));
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty() || item == "none") continue;
      LOOM_CHECK(item == "gloo" || item == "mpi",
                 "[bench collectives] --vs takes gloo and/or mpi but got '", item, "'");
      if (std::find(vs.begin(), vs.end(), item) == vs.end()) vs.push_back(item);
    }
  }

  char tmpl[] = "/tmp/loom-bench-collectives-XXXXXX";
  LOOM_CHECK_AS(DistError, ::mkdtemp(tmpl) != nullptr,
                "[bench collectives] mkdtemp: ", std::strerror(errno));
  const std::string tmp = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmp};

  std::vector<Side> sides;
  {
    Side s;
    s.key = "loom";
    s.title = "loom";
    s.job = [o, lo, tmp](int round) {
      LoomRankOptions l = lo;
      l.store_path = tmp + "/loom-store-" + std::to_string(round);
      std::vector<std::function<int()>> bodies;
      for (int r = 0; r < o.np; ++r) bodies.push_back([o, l, r] { return run_loom_rank(o, r, l); });
      return bodies;
    };
    sides.push_back(std::move(s));
  }
  const std::vector<std::string> sweep = coll::sweep_args(o);
  for (const std::string& a : vs) {
    Side s;
    s.key = a;
    std::vector<std::string> argv;
    if (a == "gloo") {
      s.title = "Gloo";
      std::string bin = cli::self_dir() + "/loom-anchor-gloo";
      if (::access(bin.c_str(), X_OK) != 0) {
        s.unavailable =
            "loom-anchor-gloo is not built (needs libgloo-dev: run scripts/setup.sh, reconfigure)";
      }
      argv = {bin};
      argv.insert(argv.end(), sweep.begin(), sweep.end());
      if (auto c = args.get("gloo-configs")) argv.insert(argv.end(), {"--configs", *c});
    } else {
      s.title = "OpenMPI";
      std::string bin = cli::self_dir() + "/loom-anchor-mpi";
      std::string mpirun = find_in_path("mpirun");
      if (::access(bin.c_str(), X_OK) != 0) {
        s.unavailable =
            "loom-anchor-mpi is not built (needs libopenmpi-dev: run scripts/setup.sh, "
            "reconfigure)";
      } else if (mpirun.empty()) {
        s.unavailable = "mpirun is not on PATH (needs openmpi-bin: run scripts/setup.sh)";
      }
      // OpenMPI's best configuration on one host, made explicit: the shared-memory BTL (vader, with
      // single-copy CMA by default); --oversubscribe lets N exceed the cores.
      argv = {mpirun, "--allow-run-as-root", "--oversubscribe",
              "-np",  std::to_string(o.np),  "--mca",
              "btl",  "self,vader",          bin};
      argv.insert(argv.end(), sweep.begin(), sweep.end());
    }
    s.job = [argv](int) { return std::vector<std::function<int()>>{exec_body(argv)}; };
    sides.push_back(std::move(s));
  }

  const unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "loom bench collectives: %s, %d ranks, f32, %s..%s, %d round(s); sides take turns, order "
      "rotated per round\ncpu: %s, %u cores%s\n",
      coll::op_name(o.op), o.np, coll::format_bytes(o.min_bytes).c_str(),
      coll::format_bytes(o.max_bytes).c_str(), rounds, cpu_model().c_str(), cores,
      static_cast<unsigned>(o.np) > cores ? " (more ranks than cores: they time-share)" : "");
  std::fflush(stdout);

  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < sides.size(); ++k) {
      Side& s = sides[(k + static_cast<size_t>(round)) % sides.size()];
      if (!s.unavailable.empty()) continue;
      s.failed_in_round.clear();
      auto t0 = Clock::now();
      std::string failed = run_children(s.job(round), timeout_s,
                                        [&](const std::string& line) { s.take(line, verbose); });
      if (!failed.empty()) {
        s.errors.push_back(detail::str_cat("round ", round + 1, ": ", failed));
        std::fprintf(stderr, "bench collectives: %s failed in round %d: %s\n", s.key.c_str(),
                     round + 1, failed.c_str());
      }
      std::fprintf(stderr, "bench collectives: round %d/%d: %s took %.1f s\n", round + 1, rounds,
                   s.key.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }

  // ---- the table ----
  const double factor = coll::busbw_factor(o.op, o.np);
  std::printf("\n");
  for (const Side& s : sides) {
    std::string algo_note;
    if (s.key == "loom") {
      algo_note = detail::str_cat("algo ", lo.algo.empty() ? "auto" : lo.algo, ", transport ",
                                  lo.transport.empty() ? "auto" : lo.transport, "; ");
    }
    std::string info;
    for (const auto& i : s.info) info += (info.empty() ? "" : "; ") + i;
    std::printf("%-5s %s%s\n", (s.key + ":").c_str(), algo_note.c_str(),
                !s.unavailable.empty() ? ("not run: " + s.unavailable).c_str() : info.c_str());
  }
  std::string head1 = detail::str_cat(std::string(23, ' '), "loom");
  char line[512];
  std::snprintf(line, sizeof(line), "%10s %10s %-9s %9s %7s %7s", "size(B)", "count", "algo",
                "time(us)", "algbw", "busbw");
  std::string head2 = line;
  head1.resize(head2.size(), ' ');
  std::vector<const Side*> anchors;
  for (const Side& s : sides) {
    if (s.key != "loom" && s.unavailable.empty()) anchors.push_back(&s);
  }
  for (const Side* a : anchors) {
    std::snprintf(line, sizeof(line), " | %-19s %9s %7s %6s %6s %-6s", "config", "time(us)",
                  "busbw", "bw x", "lat x", "target");
    std::string h = " | " + a->title;
    h.resize(std::strlen(line), ' ');
    head1 += h;
    head2 += line;
  }
  std::printf("%s\n%s\n", head1.c_str(), head2.c_str());

  const Side& loom = sides[0];
  std::ostringstream js;
  js << "{\"suite\": \"collectives\", \"machine\": {\"cpu\": \"" << json_escape(cpu_model())
     << "\", \"cores\": " << cores << "}, \"config\": {\"op\": \"" << coll::op_name(o.op)
     << "\", \"np\": " << o.np << ", \"algo\": \"" << (lo.algo.empty() ? "auto" : lo.algo)
     << "\", \"transport\": \"" << (lo.transport.empty() ? "auto" : lo.transport)
     << "\", \"rounds\": " << rounds << "}, \"results\": [";
  bool first_json = true;
  std::vector<std::string> misses;
  int met = 0;
  for (int64_t nominal : coll::sweep_sizes(o)) {
    const int64_t count = coll::count_for(o, nominal);
    const int64_t bytes = count * 4;
    if (count <= 0) continue;
    auto [algo, us] = loom.best(bytes);
    double algbw = bytes / us / 1e3;
    double busbw = algbw * factor;
    std::snprintf(line, sizeof(line), "%10lld %10lld %-9s %9.1f %7.3f %7.3f",
                  static_cast<long long>(bytes), static_cast<long long>(count),
                  algo.empty() ? "-" : algo.c_str(), us, algbw, busbw);
    std::string row = line;
    const std::string name =
        detail::str_cat(coll::op_name(o.op), "_np", o.np, "_", coll::format_bytes(bytes));
    const bool lat_row = bytes < kLatencyBytes;
    auto json_entry = [&](const std::string& anchor, double loom_v, double anchor_v,
                          const Target* t) {
      double ratio = std::isnan(anchor_v) ? NAN : loom_v / anchor_v;
      js << (first_json ? "" : ", ") << "{\"name\": \"" << name << "\", \"unit\": \""
         << (lat_row ? "us" : "GB/s busbw") << "\", \"loom\": " << num_or_null(loom_v)
         << ", \"anchor\": " << (anchor.empty() ? "null" : "\"" + json_escape(anchor) + "\"")
         << ", \"anchor_value\": " << num_or_null(anchor_v) << ", \"ratio\": " << num_or_null(ratio)
         << ", \"better\": \"" << (lat_row ? "lower" : "higher") << "\", \"bytes\": " << bytes
         << ", \"loom_algo\": \"" << json_escape(algo) << "\"";
      if (t) {
        char target[48];
        std::snprintf(target, sizeof(target), "%s %.1fx",
                      t->latency ? "time <=" : "busbw >=", t->ratio);
        js << ", \"target\": \"" << target << "\"";
      }
      js << "}";
      first_json = false;
    };
    for (const Side* a : anchors) {
      auto [config, aus] = a->best(bytes);
      double abus = bytes / aus / 1e3 * factor;
      double bw_x = busbw / abus;
      double lat_x = us / aus;
      const Target* t = target_for(a->key, bytes);
      std::string verdict;
      if (t && !std::isnan(bw_x)) {
        bool ok = t->latency ? lat_x <= t->ratio : bw_x >= t->ratio;
        verdict = ok ? "ok" : "MISS";
        if (ok) {
          ++met;
        } else {
          char m[200];
          if (t->latency) {
            std::snprintf(m, sizeof(m),
                          "%s vs %s (%s): loom %.1f us vs %.1f us, lat x %.2f, target <= %.1f",
                          coll::format_bytes(bytes).c_str(), a->key.c_str(), config.c_str(), us,
                          aus, lat_x, t->ratio);
          } else {
            std::snprintf(m, sizeof(m),
                          "%s vs %s (%s): loom %.2f vs %.2f GB/s busbw, bw x %.2f, target >= %.1f",
                          coll::format_bytes(bytes).c_str(), a->key.c_str(), config.c_str(), busbw,
                          abus, bw_x, t->ratio);
          }
          misses.push_back(m);
        }
      }
      char lat[16] = "";
      if (lat_row && !std::isnan(lat_x)) std::snprintf(lat, sizeof(lat), "%6.2f", lat_x);
      std::snprintf(line, sizeof(line), " | %-19s %9.1f %7.3f %6.2f %6s %-6s",
                    config.empty() ? "-" : config.c_str(), aus, abus, bw_x, lat, verdict.c_str());
      row += line;
      json_entry(a->title + (config.empty() ? "" : " (" + config + ")"), lat_row ? us : busbw,
                 lat_row ? aus : abus, t);
    }
    if (anchors.empty()) json_entry("", lat_row ? us : busbw, NAN, nullptr);
    std::printf("%s\n", row.c_str());
  }
  js << "]}\n";
  std::printf(
      "\ntime: per call, median over rounds of each round's median over blocks (a block: calls "
      "after a barrier, timed by its slowest rank); anchors: their fastest configuration per "
      "size.\nbw x = loom busbw / anchor busbw "
      "(higher is better); lat x = loom time / anchor time (lower is better).\n");
  if (met + static_cast<int>(misses.size()) > 0) {
    std::printf(
        "targets (busbw >= 1.2x Gloo and >= 1.0x OpenMPI from 1 MiB; time <= OpenMPI's at 4 KiB): "
        "%d met, %zu missed\n",
        met, misses.size());
    for (const auto& m : misses) std::printf("  MISS %s\n", m.c_str());
  }

  int status = 0;
  for (const Side& s : sides) {
    for (const auto& e : s.errors) {
      std::printf("%s failed: %s\n", s.key.c_str(), e.c_str());
      if (s.key == "loom") status = 1;
    }
  }
  if (loom.times.empty()) status = 1;
  if (o.check) {
    std::vector<std::string> failures;
    int ok = 0;
    std::string counts;
    for (const Side& s : sides) {
      if (!s.unavailable.empty()) continue;
      failures.insert(failures.end(), s.check_failures.begin(), s.check_failures.end());
      ok += s.checks_ok;
      counts += detail::str_cat(counts.empty() ? "" : ", ", s.key, " ", s.checks_ok);
    }
    if (failures.empty() && loom.checks_ok > 0 && loom.errors.empty()) {
      std::printf(
          "check OK: %d results match the closed-form values (%s; every size, configuration, rank "
          "and round)\n",
          ok, counts.c_str());
    } else {
      std::printf(
          "check FAILED: %zu mismatches (loom %zu)%s; a wrong anchor result is left out of the "
          "table\n",
          failures.size(), loom.check_failures.size(),
          loom.checks_ok == 0 ? ", and loom produced no verified result" : "");
      for (const auto& f : failures) std::printf("  %s\n", f.c_str());
      status = 1;
    }
  }
  if (auto path = args.get("json")) {
    std::ofstream out(*path);
    LOOM_CHECK(out.good(), "[bench collectives] cannot write ", *path);
    out << js.str();
    std::printf("wrote %s\n", path->c_str());
  }
  return status;
}

const RegisterSuite kCollectives([] {
  Suite s;
  s.name = "collectives";
  s.description =
      "allreduce/allgather/reduce_scatter/broadcast over N processes vs Gloo and OpenMPI "
      "(own options: --help)";
  s.run = run_collectives;
  return s;
}());

}  // namespace
}  // namespace loom::bench
