// `loom bench <suite>`: runs rounds of a suite, prints a table with medians, ratios, spreads and
// verdicts (report.h), optionally writes JSON ({"suite", "machine", "results": [{"name", "unit",
// "loom", "anchor", "anchor_value", "ratio", "better", "target", "verdict", "spread", ...}]}).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "bench.h"
#include "cli.h"
#include "job.h"
#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "loom/parallel.h"
#include "loom/parse.h"
#include "loom/stream.h"
#include "report.h"

namespace loom::bench {

std::vector<Suite>& suites() {
  static std::vector<Suite> s;
  return s;
}

double median(std::vector<double> v) {
  return report::median(std::move(v));
}

std::string why_no_gpu() {
  if (!cuda::is_built()) {
    return "no CUDA device is visible (this build has no CUDA backend: configure with "
           "-DLOOM_CUDA=ON)";
  }
  if (!cuda::is_available()) {
    return "no CUDA device is visible (the CUDA runtime reports none: no GPU, no driver, or "
           "CUDA_VISIBLE_DEVICES hides them)";
  }
  return "";
}

double device_ms(const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  const Device gpu(DeviceType::CUDA, 0);
  const Stream stream = current_stream(gpu);
  std::vector<std::pair<Event, Event>> events;
  events.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    events.emplace_back(Event::timed(DeviceType::CUDA), Event::timed(DeviceType::CUDA));
    events.back().first.record(stream);
    fn();
    events.back().second.record(stream);
  }
  events.back().second.synchronize();  // the stream runs in order: every event has passed
  std::vector<double> ms;
  for (const auto& [start, end] : events) ms.push_back(start.elapsed_ms(end));
  return median(ms);
}

void synchronize_gpu() {
  device_interface(DeviceType::CUDA).synchronize_device(0);
}

double median_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    fn();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
  }
  return median(t);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

// The anchor as a co-process in a process group of its own: we write "NAME THREADS QUICK" lines, it
// answers "NAME VALUE" (or "NAME nan" for a name it does not know). Each answer must come within a
// deadline; an anchor that misses it, dies or answers out of turn is stopped (its whole group) and
// every later row says why (Note [bench deadlines]). Its stderr is passed on to ours.
class AnchorProcess {
 public:
  // Returns "" or why the anchor does not run.
  std::string start(const std::string& path, const std::string& suite, double grace_s) {
    grace_s_ = grace_s;
    if (::access(path.c_str(), X_OK) != 0) {
      return detail::str_cat("cannot run ", path, ": ", std::strerror(errno));
    }
    int fds[6] = {-1, -1, -1, -1, -1, -1};
    int* to_child = fds;
    int* from_child = fds + 2;
    int* err_child = fds + 4;
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0 ||
        ::pipe2(err_child, O_CLOEXEC) != 0) {
      const int e = errno;
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
      return detail::str_cat("pipe: ", std::strerror(e));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!adopt_child(0, parent)) ::_exit(1);
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      ::dup2(err_child[1], 2);
      // libtorch's best configuration here: its OpenMP workers must not spin while OpenBLAS's
      // threads need the same cores (spinning made its 2-thread training step 10x slower).
      ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
      ::execl(path.c_str(), path.c_str(), "serve", suite.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "cannot run %s: %s\n", path.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    ::close(err_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
    err_ = err_child[0];
    if (pid_ < 0) {
      close_pipes();
      return detail::str_cat("fork: ", std::strerror(errno));
    }
    return "";
  }

  // The anchor's figure for `name`; NaN with *why set when there is none.
  double query(const std::string& name, int threads, bool quick, double deadline_s,
               std::string* why) {
    if (!failure_.empty() || pid_ <= 0) {
      *why = failure_.empty() ? "the anchor is not running" : failure_;
      return NAN;
    }
    const std::string request = detail::str_cat(name, " ", threads, " ", quick ? 1 : 0, "\n");
    if (::write(in_, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
      fail("", 5, name);  // it is gone (EPIPE): say how it ended
      *why = failure_;
      return NAN;
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(deadline_s);
    std::string line;
    while (!next_line(&line)) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) {
        char d[32];
        std::snprintf(d, sizeof(d), "%g", deadline_s);
        fail(detail::str_cat("timeout after ", d, " s on ", name, " (the anchor was stopped)"), 0);
        *why = failure_;
        return NAN;
      }
      pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      const int ms = static_cast<int>(std::min<int64_t>(
          200, std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1));
      if (::poll(p, err_ >= 0 ? 2 : 1, ms) <= 0) continue;
      if (p[1].revents && err_ >= 0) read_stderr();
      if (p[0].revents && !read_stdout()) {
        fail("", 5, name);
        *why = failure_;
        return NAN;
      }
    }
    std::istringstream is(line);
    std::string got, value;
    is >> got >> value;
    if (got != name || value.empty()) {
      fail(detail::str_cat("the anchor answered '", line, "' to ", name, " (it was stopped)"), 0);
      *why = failure_;
      return NAN;
    }
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || !std::isfinite(v)) {
      *why = "the anchor gave no figure for it (its answer was '" + value + "')";
      return NAN;
    }
    return v;
  }

  // Ends the anchor: closing its stdin asks it to exit; its group is stopped if it does not.
  void stop() {
    if (pid_ > 0) {
      ::close(in_);
      in_ = -1;
      end_group(pid_, grace_s_, grace_s_);
      drain_stderr();
      pid_ = -1;
    }
    close_pipes();
  }
  ~AnchorProcess() { stop(); }
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }

 private:
  // Stops the anchor's group (after wait_s for it to end by itself) and records why.
  void fail(const std::string& why, double wait_s, const std::string& during = "") {
    const ExitInfo info = end_group(pid_, wait_s, grace_s_);
    pid_ = -1;
    drain_stderr();
    failure_ = !why.empty() ? why
                            : "the anchor " + info.describe() + " during " + during +
                                  (last_err_.empty() ? "" : " (" + last_err_ + ")");
    std::fprintf(stderr, "bench: %s\n", failure_.c_str());
  }
  bool next_line(std::string* line) {
    const size_t nl = out_pending_.find('\n');
    if (nl == std::string::npos) return false;
    *line = out_pending_.substr(0, nl);
    out_pending_.erase(0, nl + 1);
    return true;
  }
  bool read_stdout() {
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof(buf));
    if (n > 0) out_pending_.append(buf, static_cast<size_t>(n));
    return n > 0 || (n < 0 && errno == EINTR);
  }
  void read_stderr() {
    char buf[4096];
    const ssize_t n = ::read(err_, buf, sizeof(buf));
    if (n <= 0) {
      if (n == 0 || errno != EINTR) {
        ::close(err_);
        err_ = -1;
      }
      return;
    }
    err_pending_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = err_pending_.find('\n')) != std::string::npos) {
      const std::string l = err_pending_.substr(0, nl);
      err_pending_.erase(0, nl + 1);
      std::fprintf(stderr, "%s\n", l.c_str());
      if (!l.empty()) last_err_ = l;
    }
  }
  void drain_stderr() {
    while (err_ >= 0) {
      pollfd p{err_, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      read_stderr();
    }
  }
  void close_pipes() {
    for (int* fd : {&in_, &out_, &err_}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  double grace_s_ = 5;
  std::string out_pending_, err_pending_, last_err_, failure_;
};

// Ignores SIGPIPE while it lives (a write to an anchor that died must fail, not kill us).
struct IgnoreSigpipe {
  struct sigaction old {};
  IgnoreSigpipe() {
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &sa, &old);
  }
  ~IgnoreSigpipe() { ::sigaction(SIGPIPE, &old, nullptr); }
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(item);
  return v;
}

int run_bench(const std::vector<std::string>& argv) {
  if (argv.size() >= 2) {
    for (const auto& s : suites()) {
      if (s.name == argv[1] && s.run) {
        std::vector<std::string> rest(argv.begin() + 1, argv.end());
        rest[0] = "bench " + rest[0];  // the suite's errors say "[loom bench NAME] --option ..."
        return s.run(rest);
      }
    }
  }
  cli::Args args(argv, {"help", "quick", "list"},
                 {"json", "rounds", "threads", "only", "anchor", "deadline"});
  if (args.flag("help") || args.flag("list") || args.positionals().empty()) {
    std::printf(
        "usage: loom bench SUITE [--rounds N] [--threads 1,2] [--quick] [--only NAME,...]\n"
        "                        [--anchor PATH|none] [--deadline S] [--json FILE]\n"
        "  Runs loom and its anchor side by side; prints per measurement the medians over rounds,\n"
        "  the ratio loom/anchor, the spread across rounds, the target and a verdict (ok, MISS, "
        "no\n"
        "  target), a legend of the units, and 'targets: N met, M missed'.\n"
        "  --only      keeps the measurements whose name starts with one of the given prefixes\n"
        "  --anchor    the anchor program to run instead of the suite's (none: run without one)\n"
        "  --deadline  seconds the anchor may take per measurement (300); past it, the anchor's\n"
        "              process group is stopped and the remaining rows say why\n"
        "  Exit status: 0, or 3 when the anchor failed during the run (the table says where).\n"
        "  Suites with their own options: loom bench collectives --help, loom bench prof --help\n"
        "suites:\n");
    for (const auto& s : suites())
      std::printf("  %-12s %s\n", s.name.c_str(), s.description.c_str());
    return args.positionals().empty() && !args.flag("help") && !args.flag("list") ? 2 : 0;
  }
  const std::string name = args.positionals()[0];
  const Suite* suite = nullptr;
  for (const auto& s : suites()) {
    if (s.name == name) suite = &s;
  }
  LOOM_CHECK(suite != nullptr, "[bench] unknown suite '", name, "' (see loom bench --list)");
  SuiteOptions opt;
  opt.quick = args.flag("quick");
  opt.rounds = static_cast<int>(args.get_int("rounds", opt.quick ? 1 : 5, 1, 10000));
  if (auto t = args.get("threads")) {
    opt.threads.clear();
    for (const std::string& item : split_commas(*t)) {
      opt.threads.push_back(
          static_cast<int>(parse_int(item, "[bench] --threads (thread counts like 1,2)", 1, 1024)));
    }
  }
  const double deadline_s = args.get_double("deadline", 300, 0.001, 86400);
  // The anchor program and, when there is none, why.
  std::string anchor_path, no_anchor;
  const std::string anchor_opt = args.get_or("anchor", "");
  if (anchor_opt == "none") {
    no_anchor = "not run: --anchor none";
  } else if (!anchor_opt.empty()) {
    anchor_path = anchor_opt;
  } else if (suite->anchor_binary.empty()) {
    no_anchor = suite->no_anchor.empty() ? "this suite has none" : suite->no_anchor;
  } else {
    anchor_path = cli::self_dir() + "/" + suite->anchor_binary;
    if (::access(anchor_path.c_str(), X_OK) != 0) {
      no_anchor = suite->anchor_binary + " is not built (run scripts/setup.sh, reconfigure)";
      anchor_path.clear();
    }
  }
  const std::string anchor_label =
      !anchor_opt.empty() && anchor_opt != "none" ? anchor_opt : suite->anchor_name;
  const int saved_threads = get_num_threads();
  std::printf(
      "loom bench %s: %d round(s), loom and %s alternating per measurement\n"
      "cpu: %s, %u cores\nloom BLAS: %s\n",
      name.c_str(), opt.rounds, anchor_label.empty() ? "no anchor" : anchor_label.c_str(),
      cpu_model().c_str(), std::thread::hardware_concurrency(), blas_config().c_str());
  std::vector<std::pair<std::string, std::string>> machine;
  if (suite->machine) machine = suite->machine();
  for (const auto& [key, value] : machine) std::printf("%s: %s\n", key.c_str(), value.c_str());
  std::fflush(stdout);
  std::vector<Measure> measures = suite->setup(opt);
  if (auto only = args.get("only")) {
    // Prefixes, so that `--only mlp_step` keeps every thread count of that row.
    const std::vector<std::string> keep = split_commas(*only);
    std::erase_if(measures, [&](const Measure& m) {
      return std::none_of(keep.begin(), keep.end(),
                          [&](const std::string& k) { return m.name.rfind(k, 0) == 0; });
    });
    LOOM_CHECK(!measures.empty(), "[bench] --only ", *only, " matches no measurement of suite ",
               name);
  }
  IgnoreSigpipe ignore_sigpipe;
  AnchorProcess anchor;
  // Rows that cannot run here run on neither side: no anchor to start when none can.
  const bool any_runs = std::any_of(measures.begin(), measures.end(),
                                    [](const Measure& m) { return m.skip.empty(); });
  if (!anchor_path.empty() && any_runs) {
    no_anchor = anchor.start(anchor_path, name, /*grace_s=*/5);
    if (!no_anchor.empty()) std::fprintf(stderr, "bench: %s\n", no_anchor.c_str());
  }
  const bool have_anchor = no_anchor.empty();
  std::map<std::string, std::vector<double>> loom_vals, anchor_vals;
  std::map<std::string, std::string> why_missing;  // why a row has no anchor figure
  for (int r = 0; r < opt.rounds; ++r) {
    // Who goes first alternates by round: a measurement right after the other process's BLAS
    // call can find that process's OpenBLAS workers still spinning on the other core.
    const bool anchor_first = r % 2 == 1;
    for (const Measure& m : measures) {
      if (!m.skip.empty()) continue;
      auto run_anchor_side = [&] {
        if (!have_anchor) return;
        std::string why;
        const double a = anchor.query(m.name, m.threads, opt.quick, deadline_s, &why);
        if (std::isnan(a)) {
          why_missing.emplace(m.name, why);  // the first: a row's own answer before a later failure
        } else {
          anchor_vals[m.name].push_back(a);
        }
      };
      if (anchor_first) run_anchor_side();
      set_num_threads(m.threads);
      loom_vals[m.name].push_back(m.loom());
      if (!anchor_first) run_anchor_side();
    }
    std::fprintf(stderr, "bench: round %d/%d done\n", r + 1, opt.rounds);
  }
  anchor.stop();
  set_num_threads(saved_threads);

  std::vector<report::Row> rows;
  for (const Measure& m : measures) {
    report::Row row;
    row.name = m.name;
    row.unit = m.unit;
    row.lower_is_better = m.lower_is_better;
    row.target = m.target > 0         ? report::Target::ratio(m.target)
                 : m.value_target > 0 ? report::Target::value(m.value_target)
                                      : report::Target::none();
    row.loom_rounds = loom_vals[m.name];
    row.anchor_rounds = anchor_vals[m.name];
    if (!m.skip.empty()) {
      row.anchor_missing = "not run: " + m.skip;
    } else if (!have_anchor) {
      row.anchor_missing = no_anchor;
    } else if (row.anchor_rounds.empty()) {
      row.anchor_missing = why_missing.count(m.name) ? why_missing[m.name] : "no figure";
    }
    rows.push_back(std::move(row));
  }
  std::printf("\n%s", report::render_table(rows).c_str());
  if (anchor.failed()) {
    std::printf("anchor FAILED: %s; the measurements after it have no anchor figure\n",
                anchor.failure().c_str());
  }
  if (auto path = args.get("json")) {
    std::ostringstream js;
    js << "{\"suite\": " << report::json_string(name)
       << ", \"machine\": {\"cpu\": " << report::json_string(cpu_model())
       << ", \"cores\": " << std::thread::hardware_concurrency()
       << ", \"blas\": " << report::json_string(blas_config());
    for (const auto& [key, value] : machine) {
      js << ", " << report::json_string(key) << ": " << report::json_string(value);
    }
    js << "}, \"rounds\": " << opt.rounds << ", \"results\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      js << (i ? ", " : "") << report::json_row(rows[i], anchor_label);
    }
    js << "]}\n";
    std::ofstream out(*path);
    LOOM_CHECK(out.good(), "[bench] cannot write ", *path);
    out << js.str();
    std::printf("wrote %s\n", path->c_str());
  }
  return anchor.failed() ? 3 : 0;
}

const cli::RegisterCommand kBench("bench", "run a benchmark suite side by side with its anchor",
                                  run_bench);

}  // namespace
}  // namespace loom::bench
