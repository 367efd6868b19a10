// Benchmark suites for `loom bench <suite>`. A suite is a list of measurements; each has a loom
// side (a function run in this process) and the same measurement by name in an anchor process (e.g.
// loom-anchor-torch, linked with libtorch). The driver keeps the anchor running as a co-process and
// alternates loom and anchor measurement by measurement, round after round, so both see the same
// machine conditions (this machine is shared and noisy); then it prints medians, ratios, spreads
// and verdicts in the format of report.h (Note [bench verdicts]). Anchor queries run under a
// deadline (Note [bench deadlines] in job.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::bench {

struct Measure {
  std::string name;  // also the name the anchor knows it by
  std::string unit;
  bool lower_is_better = true;
  double target = 0;  // target ratio loom/anchor (0: none); <= for lower, >= for higher is better
  int threads = 1;    // intra-op (and BLAS) threads for both sides
  std::function<double()> loom;  // runs once and returns the figure in `unit`
  double value_target =
      0;  // a bound on loom's own figure instead (0: none), for rows with no anchor
  // Why this row cannot run on this machine ("": it runs), e.g. "no CUDA device is visible": the
  // driver runs neither side and the row says "not run: <skip>".
  std::string skip = "";
};

struct SuiteOptions {
  int rounds = 5;
  bool quick = false;  // fewer repetitions, for smoke tests
  std::vector<int> threads = {1, 2};
};

struct Suite {
  std::string name;
  std::string description;
  std::string anchor_binary;  // built beside `loom`; empty: no anchor
  std::string anchor_name;    // e.g. "libtorch 1.13 (OpenBLAS)"
  std::function<std::vector<Measure>(const SuiteOptions&)> setup;
  // Optional: a suite with its own command line and table (collectives). When set, `loom bench NAME
  // ARGS...` calls run({NAME, ARGS...}) and returns its exit status; setup and the anchor fields
  // are unused.
  std::function<int(const std::vector<std::string>& args)> run;
  // For a suite without an anchor process: what its rows say instead of an anchor figure.
  std::string no_anchor = "";
  // Optional: more about the machine than the CPU, as (key, description) pairs, e.g. ("gpu",
  // "NVIDIA H200, ..."): printed in the table's header and added to the JSON's "machine".
  std::function<std::vector<std::pair<std::string, std::string>>()> machine = nullptr;
};

std::vector<Suite>& suites();
struct RegisterSuite {
  explicit RegisterSuite(Suite s) { suites().push_back(std::move(s)); }
};

// Median wall time in seconds of fn() over `reps` repetitions after one warm-up.
double median_seconds(const std::function<void()>& fn, int reps);
double median(std::vector<double> v);  // NaN entries ignored; NaN when none is left

// GPU rows (CUDA device 0). Why no row can run here, or "" when a CUDA device is visible.
std::string why_no_gpu();
// Median device milliseconds of fn() over `reps` repetitions after `warmup` calls, from CUDA
// events on the current stream (Note [gpu suite] in gpu_suite.cpp).
double device_ms(const std::function<void()>& fn, int warmup, int reps);
void synchronize_gpu();

std::string cpu_model();

}  // namespace loom::bench
