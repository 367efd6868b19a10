// `loom launch`: starts the workers of one node with torchrun's environment (RANK, WORLD_SIZE,
// LOCAL_RANK, ...), prefixes their output with the rank, forwards signals, stops the group when a
// worker fails and optionally restarts it. The logic lives in src/distributed/launch/launch.cpp.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>

#include "cli.h"
#include "loom/error.h"
// Internal header of the dist layer (loom_cli has no src/ include path; launch() is exported).
#include "distributed/launch/launch.h"

namespace loom::cli {
namespace {

constexpr const char* kUsage =
    "usage: loom launch --nproc N [--nnodes M --node-rank K] [--master-addr A] [--master-port P]\n"
    "                   [--max-restarts R] [--log-dir DIR] [--run-id ID] -- CMD [ARGS...]\n"
    "\n"
    "  Starts N workers of CMD on this node with torchrun's environment: RANK (node_rank*N +\n"
    "  local_rank), WORLD_SIZE (M*N), LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR\n"
    "  (default 127.0.0.1), MASTER_PORT (default: a free port with one node, else 29500),\n"
    "  LOOM_RESTART_COUNT (= TORCHELASTIC_RESTART_COUNT) and LOOM_RUN_ID.\n"
    "  Worker output lines are prefixed with \"[rankR]: \". SIGINT/SIGTERM/SIGHUP are\n"
    "  forwarded to the workers (SIGKILL after LOOM_LAUNCH_GRACE seconds, default 10); the\n"
    "  launcher then exits with 128+signal. When a worker fails, the others are stopped and the\n"
    "  launcher exits with its code (128+signal if it was killed), unless --max-restarts allows\n"
    "  restarting the whole group (workers resume from their own checkpoints).\n"
    "  --log-dir DIR also writes each rank's raw output to DIR/attempt_K/rank_R.{stdout,stderr}.\n"
    "  A command that cannot be run exits with 127 (not found) or 126.\n"
    "\n"
    "  example: loom launch --nproc 2 -- loom train --epochs 1\n";

constexpr int64_t kMaxProcesses = int64_t{1} << 20;

int to_int(const Args& args, const std::string& name, int fallback, int64_t min, int64_t max) {
  return static_cast<int>(args.get_int(name, fallback, min, max));
}

int run_launch(const std::vector<std::string>& argv) {
  // Everything after the first `--` is the worker command, untouched by the option parser.
  auto dashes = std::find(argv.begin() + 1, argv.end(), "--");
  std::vector<std::string> own(argv.begin(), dashes);
  std::vector<std::string> command;
  if (dashes != argv.end()) command.assign(dashes + 1, argv.end());

  Args args(own, {"help"},
            {"nproc", "nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port",
             "max-restarts", "log-dir", "run-id"});
  if (args.flag("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  LOOM_CHECK(args.positionals().empty(), "[loom launch] unexpected argument '",
             args.positionals().front(),
             "' before `--`: the worker command goes after `--`, e.g. "
             "loom launch --nproc 2 -- ",
             args.positionals().front());
  std::optional<std::string> nproc_name;
  if (args.get("nproc")) {
    nproc_name = "nproc";
  } else if (args.get("nproc-per-node")) {
    nproc_name = "nproc-per-node";
  }
  LOOM_CHECK(nproc_name.has_value(),
             "[loom launch] --nproc is required (the number of workers on this node), e.g. "
             "loom launch --nproc 2 -- ./train");

  dist::LaunchOptions opts;
  opts.nproc = to_int(args, *nproc_name, 0, 1, kMaxProcesses);
  opts.nnodes = to_int(args, "nnodes", 1, 1, kMaxProcesses);
  opts.node_rank = to_int(args, "node-rank", 0, 0, kMaxProcesses - 1);
  opts.master_addr = args.get_or("master-addr", "127.0.0.1");
  opts.master_port = to_int(args, "master-port", 0, 0, 65535);
  opts.max_restarts = to_int(args, "max-restarts", 0, 0, 1000000);
  opts.log_dir = args.get_or("log-dir", "");
  opts.run_id = args.get_or("run-id", "");
  opts.command = std::move(command);
  return dist::launch(opts);
}

const RegisterCommand kLaunch("launch", "start N worker processes with torchrun's environment",
                              run_launch);

}  // namespace
}  // namespace loom::cli
