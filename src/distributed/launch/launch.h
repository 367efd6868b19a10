// The process launcher behind `loom launch` (distributed layer, internal): starts the local workers
// of one node with torchrun's environment, prefixes their output with the rank, forwards the
// launcher's signals to them, stops the group when one fails and optionally restarts it. See Note
// [Launcher].
//
// Ownership: launch() owns every worker it starts and never returns while one is alive.
// Thread-safety: launch() installs process-wide signal handlers while it runs; run one at a time,
// in a process whose other threads do not fork.
#pragma once

#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::dist {

struct LaunchOptions {
  int nproc = 0;                          // workers on this node (LOCAL_WORLD_SIZE)
  int nnodes = 1;                         // nodes in the job; WORLD_SIZE = nnodes * nproc
  int node_rank = 0;                      // GROUP_RANK; RANK = node_rank * nproc + local_rank
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 0;                    // MASTER_PORT; 0: a free port (1 node) or 29500
  int max_restarts = 0;                   // group restarts allowed after a worker fails
  std::string log_dir;                    // also write DIR/attempt_K/rank_R.{stdout,stderr}
  std::string run_id;                     // LOOM_RUN_ID; empty: LOOM_RUN_ID from env or generated
  double grace_seconds = -1;              // SIGTERM -> SIGKILL delay; < 0: LOOM_LAUNCH_GRACE (10)
  std::vector<std::string> command;       // the worker command line (argv, looked up in PATH)
};

// Throws ValueError naming the bad field ("[loom launch] ...").
LOOM_API void validate(const LaunchOptions& opts);

// Runs the workers to completion and returns the launcher's exit status: 0 when every worker of the
// last attempt succeeded; the first failed worker's exit code (128 + signal when it was killed);
// 128 + signo when the launcher itself got SIGINT/SIGTERM/SIGHUP; 127 (not found) or 126 when the
// command cannot be run. Throws ValueError for bad options, DistError when the system refuses pipes
// or processes.
LOOM_API int launch(const LaunchOptions& opts);

}  // namespace loom::dist
