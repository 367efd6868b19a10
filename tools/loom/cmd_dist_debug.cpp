// `loom dist-debug DIR`: explains the flight records that process groups write on a timeout or
// error (LOOM_FLIGHT_DIR): where each rank stopped and which rank did not join which collective.
#include <cstdio>

#include "cli.h"
#include "distributed/group/contract.h"

namespace loom::cli {
namespace {

int run_dist_debug(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom dist-debug DIR\n  Reads DIR/flight-*.json (written by every rank on a "
        "collective timeout or\n"
        "  error; LOOM_FLIGHT_DIR chooses DIR) and names which rank did not join which "
        "collective.\n");
    return args.flag("help") ? 0 : 2;
  }
  std::fputs(dist::analyze_flight_records(args.positionals()[0]).c_str(), stdout);
  return 0;
}

const RegisterCommand kDistDebug("dist-debug",
                                 "explain the flight records of a failed distributed run",
                                 run_dist_debug);

}  // namespace
}  // namespace loom::cli
