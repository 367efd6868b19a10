// `loom bench <suite>`: runs rounds of a suite, prints a table with medians and ratios, optionally
// writes JSON ({"suite", "machine", "results": [{"name", "unit", "loom", "anchor", "anchor_value",
// "ratio", "better"}]}).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

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

std::map<std::string, double> run_anchor(const std::string& binary, const std::string& args) {
  std::map<std::string, double> out;
  std::string path = cli::self_dir() + "/" + binary;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    std::fprintf(stderr, "bench: anchor %s not built (needs libtorch; run scripts/setup.sh)\n",
                 binary.c_str());
    return out;
  }
  std::fclose(f);
  std::string cmd = "'" + path + "' " + args;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof(line), p)) {
    std::istringstream is(line);
    std::string name;
    double v;
    if (is >> name >> v) out[name] = v;
  }
  int rc = pclose(p);
  if (rc != 0) std::fprintf(stderr, "bench: anchor %s exited with status %d\n", binary.c_str(), rc);
  return out;
}

std::string loom_blas_info() { return loom::blas_config(); }

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
  cli::Args args(argv, {"help", "quick", "list"}, {"json", "rounds", "threads"});
  if (args.flag("help") || args.flag("list") || args.positionals().empty()) {
    std::printf("usage: loom bench SUITE [--rounds N] [--threads 1,2] [--quick] [--json FILE]\n"
                "  Runs loom and its anchor side by side; prints medians and loom/anchor ratios.\n"
                "suites:\n");
    for (const auto& s : suites()) std::printf("  %-8s %s\n", s.name.c_str(), s.description.c_str());
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
  opt.rounds = static_cast<int>(args.get_int("rounds", opt.quick ? 1 : 3));
  if (auto t = args.get("threads")) {
    opt.threads.clear();
    std::stringstream ss(*t);
    std::string item;
    while (std::getline(ss, item, ',')) opt.threads.push_back(std::stoi(item));
  }
  const int saved_threads = get_num_threads();
  std::printf("loom bench %s: %d round(s); cpu: %s, %u cores\nloom BLAS: %s\n", name.c_str(),
              opt.rounds, cpu_model().c_str(), std::thread::hardware_concurrency(),
              loom_blas_info().c_str());
  std::fflush(stdout);
  // Collect each row's values over rounds.
  std::vector<std::string> order;
  std::map<std::string, Row> proto;
  std::map<std::string, std::vector<double>> loom_vals, anchor_vals;
  for (int r = 0; r < opt.rounds; ++r) {
    for (const Row& row : suite->run(opt)) {
      if (!proto.count(row.name)) order.push_back(row.name);
      proto[row.name] = row;
      loom_vals[row.name].push_back(row.loom);
      if (row.anchor >= 0) anchor_vals[row.name].push_back(row.anchor);
    }
    std::fprintf(stderr, "bench: round %d/%d done\n", r + 1, opt.rounds);
  }
  set_num_threads(saved_threads);
  std::printf("\n%-26s %-9s %12s %12s %8s %8s  %s\n", "benchmark", "unit", "loom", "anchor",
              "ratio", "target", "");
  std::ostringstream js;
  js << "{\"suite\": \"" << name << "\", \"machine\": {\"cpu\": \"" << json_escape(cpu_model())
     << "\", \"cores\": " << std::thread::hardware_concurrency() << ", \"blas\": \""
     << json_escape(loom_blas_info()) << "\"}, \"results\": [";
  bool first = true;
  for (const std::string& n : order) {
    const Row& p = proto[n];
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
    std::printf("%-26s %-9s %12.4g %12.4g %8.3f %8s  %s\n", n.c_str(), p.unit.c_str(), l, a, ratio,
                target, verdict.c_str());
    js << (first ? "" : ", ") << "{\"name\": \"" << n << "\", \"unit\": \"" << p.unit
       << "\", \"loom\": " << l << ", \"anchor\": \"" << json_escape(p.anchor_name)
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
