// `loom bench <suite>`: runs rounds of a suite, prints a table with medians and ratios, optionally
// writes JSON ({"suite", "machine", "results": [{"name", "unit", "loom", "anchor", "anchor_value",
// "ratio", "better"}]}).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "loom/error.h"
#include "loom/parallel.h"


namespace loom::bench {

std::vector<Suite>& suites() {
  static std::vector<Suite> s;
  return s;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

namespace {

// The anchor as a co-process: we write "NAME THREADS QUICK" lines, it answers "NAME VALUE" (or
// "NAME nan" for a name it does not know). Dies with us.
class AnchorProcess {
 public:
  bool start(const std::string& binary, const std::string& suite) {
    std::string path = cli::self_dir() + "/" + binary;
    if (access(path.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "bench: anchor %s not built (needs libtorch; run scripts/setup.sh)\n",
                   binary.c_str());
      return false;
    }
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      // libtorch's best configuration here: its OpenMP workers must not spin while OpenBLAS's
      // threads need the same cores (spinning made its 2-thread training step 10x slower).
      setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
      execl(path.c_str(), path.c_str(), "serve", suite.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    return pid_ > 0 && in_ && out_;
  }
  double query(const std::string& name, int threads, bool quick) {
    if (!in_) return NAN;
    std::fprintf(in_, "%s %d %d\n", name.c_str(), threads, quick ? 1 : 0);
    std::fflush(in_);
    char line[512];
    if (!std::fgets(line, sizeof(line), out_)) {
      std::fprintf(stderr, "bench: the anchor process stopped answering\n");
      stop();
      return NAN;
    }
    std::istringstream is(line);
    std::string got;
    std::string value;
    is >> got >> value;
    return got == name ? std::strtod(value.c_str(), nullptr) : NAN;
  }
  void stop() {
    if (in_) std::fclose(in_);
    if (out_) std::fclose(out_);
    in_ = out_ = nullptr;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  ~AnchorProcess() { stop(); }

 private:
  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

}  // namespace

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int run_bench(const std::vector<std::string>& argv) {
  if (argv.size() >= 2) {
    for (const auto& s : suites()) {
      if (s.name == argv[1] && s.run) return s.run({argv.begin() + 1, argv.end()});
    }
  }
  cli::Args args(argv, {"help", "quick", "list"}, {"json", "rounds", "threads", "only"});
  if (args.flag("help") || args.flag("list") || args.positionals().empty()) {
    std::printf("usage: loom bench SUITE [--rounds N] [--threads 1,2] [--quick] [--only NAME,...]"
                " [--json FILE]\n"
                "  Runs loom and its anchor side by side; prints medians and loom/anchor ratios.\n"
                "  --only keeps the measurements whose name starts with one of the given prefixes.\n"
                "  Suites with their own options: loom bench collectives --help\n"
                "suites:\n");
    for (const auto& s : suites()) std::printf("  %-12s %s\n", s.name.c_str(), s.description.c_str());
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
  opt.rounds = static_cast<int>(args.get_int("rounds", opt.quick ? 1 : 5));
  if (auto t = args.get("threads")) {
    opt.threads.clear();
    std::stringstream ss(*t);
    std::string item;
    while (std::getline(ss, item, ',')) opt.threads.push_back(std::stoi(item));
  }
  const int saved_threads = get_num_threads();
  std::printf("loom bench %s: %d round(s), loom and %s alternating per measurement\n"
              "cpu: %s, %u cores\nloom BLAS: %s\n",
              name.c_str(), opt.rounds, suite->anchor_name.c_str(), cpu_model().c_str(),
              std::thread::hardware_concurrency(), blas_config().c_str());
  std::fflush(stdout);
  std::vector<Measure> measures = suite->setup(opt);
  if (auto only = args.get("only")) {
    // Prefixes, so that `--only mlp_step` keeps every thread count of that row.
    std::vector<std::string> keep;
    std::stringstream ss(*only);
    std::string item;
    while (std::getline(ss, item, ',')) keep.push_back(item);
    std::erase_if(measures, [&](const Measure& m) {
      return std::none_of(keep.begin(), keep.end(),
                          [&](const std::string& k) { return m.name.rfind(k, 0) == 0; });
    });
    LOOM_CHECK(!measures.empty(), "[bench] --only ", *only, " matches no measurement of suite ", name);
  }
  AnchorProcess anchor;
  bool have_anchor = !suite->anchor_binary.empty() && anchor.start(suite->anchor_binary, name);
  std::map<std::string, std::vector<double>> loom_vals, anchor_vals;
  for (int r = 0; r < opt.rounds; ++r) {
    // Who goes first alternates by round: a measurement right after the other process's BLAS
    // call can find that process's OpenBLAS workers still spinning on the other core.
    const bool anchor_first = r % 2 == 1;
    for (const Measure& m : measures) {
      auto run_anchor_side = [&] {
        if (!have_anchor) return;
        double a = anchor.query(m.name, m.threads, opt.quick);
        if (!std::isnan(a)) anchor_vals[m.name].push_back(a);
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
  int width = 26;  // the name column fits the longest name
  for (const Measure& p : measures) width = std::max(width, static_cast<int>(p.name.size()));
  std::printf("\n%-*s %-9s %12s %12s %8s %8s  %s\n", width, "benchmark", "unit", "loom", "anchor",
              "ratio", "target", "");
  std::ostringstream js;
  js << "{\"suite\": \"" << name << "\", \"machine\": {\"cpu\": \"" << json_escape(cpu_model())
     << "\", \"cores\": " << std::thread::hardware_concurrency() << ", \"blas\": \""
     << json_escape(blas_config()) << "\"}, \"results\": [";
  bool first = true;
  for (const Measure& p : measures) {
    const std::string& n = p.name;
    double l = median(loom_vals[n]);
    double a = anchor_vals[n].empty() ? NAN : median(anchor_vals[n]);
    double ratio = std::isnan(a) ? NAN : l / a;
    std::string verdict;
    if (p.target > 0 && !std::isnan(ratio)) {
      bool ok = p.lower_is_better ? ratio <= p.target : ratio >= p.target;
      verdict = ok ? "ok" : "MISS";
    }
    char target[32] = "";
    if (p.target > 0) std::snprintf(target, sizeof(target), "%s%.2f", p.lower_is_better ? "<=" : ">=", p.target);
    std::printf("%-*s %-9s %12.4g %12.4g %8.3f %8s  %s\n", width, n.c_str(), p.unit.c_str(), l, a,
                ratio, target, verdict.c_str());
    js << (first ? "" : ", ") << "{\"name\": \"" << n << "\", \"unit\": \"" << p.unit
       << "\", \"loom\": " << l << ", \"anchor\": \"" << json_escape(suite->anchor_name)
       << "\", \"anchor_value\": " << (std::isnan(a) ? std::string("null") : std::to_string(a))
       << ", \"ratio\": " << (std::isnan(ratio) ? std::string("null") : std::to_string(ratio))
       << ", \"better\": \"" << (p.lower_is_better ? "lower" : "higher") << "\"}";
    first = false;
  }
  js << "]}\n";
  std::printf("\nratio = loom / anchor (medians over rounds); for ns and ms lower is better, for "
              "GB/s and GFLOP/s higher is better.\n");
  if (auto path = args.get("json")) {
    std::ofstream out(*path);
    LOOM_CHECK(out.good(), "[bench] cannot write ", *path);
    out << js.str();
    std::printf("wrote %s\n", path->c_str());
  }
  return 0;
}

const cli::RegisterCommand kBench("bench", "run a benchmark suite side by side with its anchor",
                                  run_bench);

}  // namespace
}  // namespace loom::bench
