// Benchmark suites for `loom bench <suite>`. A suite measures loom and its anchor (another system
// run side by side, usually in a separate process so that thread pools never mix) and returns one
// row per figure. The driver repeats rounds, takes medians and prints ratios.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace loom::bench {

struct Row {
  std::string name;
  std::string unit;
  double loom = 0;
  double anchor = -1;       // < 0: no anchor figure
  std::string anchor_name;  // e.g. "libtorch 1.13"
  bool lower_is_better = true;
  double target = 0;        // target ratio loom/anchor (0: none); <= for lower, >= for higher
};

struct SuiteOptions {
  int rounds = 3;
  bool quick = false;  // fewer repetitions, for smoke tests
  std::vector<int> threads = {1, 2};
};

struct Suite {
  std::string name;
  std::string description;
  // Runs one round: loom's figures and the anchor's, keyed by row name.
  std::function<std::vector<Row>(const SuiteOptions&)> run;
};

std::vector<Suite>& suites();
struct RegisterSuite {
  explicit RegisterSuite(Suite s) { suites().push_back(std::move(s)); }
};

// Median wall time in seconds of fn() over `reps` repetitions after one warm-up.
double median_seconds(const std::function<void()>& fn, int reps);
double median(std::vector<double> v);

// Runs a helper binary built beside `loom` with args and parses "name value" lines from its output.
// Returns an empty map (and prints why) when the binary is missing or fails.
std::map<std::string, double> run_anchor(const std::string& binary, const std::string& args);

// "OpenBLAS 0.3.21 ..." for loom's BLAS; the anchor reports its own.
std::string loom_blas_info();
std::string cpu_model();

}  // namespace loom::bench
