// `loom bench collectives` (internal to the loom command): the loom rank of a sweep. The driver
// (collectives_suite.cpp) forks one process per rank and runs run_loom_rank in each.
#pragma once

#include <string>

#include "collective_sweep.h"

namespace loom::bench {

struct LoomRankOptions {
  std::string store_path;  // FileStore shared by the ranks
  std::string algo;        // ProcessGroupOptions::algo ("" = auto)
  std::string transport;   // ProcessGroupOptions::transport ("" = auto)
  double timeout_s = 120;  // per collective and for connecting
};

// Joins the group, runs the sweep of collective_sweep.h and prints its lines on stdout. Returns 0,
// or 3 when a check failed on this rank. Throws loom's errors.
int run_loom_rank(const coll::SweepOptions& o, int rank, const LoomRankOptions& lo);

}  // namespace loom::bench
