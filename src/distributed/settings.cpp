// The distributed layer's settings: what each LOOM_* variable accepts, its default and what it
// does.
#include "distributed/settings.h"

#include <climits>

namespace loom::dist::settings {

const config::RealSetting kTimeout(
    "LOOM_DIST_TIMEOUT", 300, 0.001, 1e8,
    "seconds (fractions allowed) that store operations, connects and "
    "collectives may take");
const config::ChoiceSetting kAlgo("LOOM_ALGO", "auto",
                                  {"auto", "ring", "tree", "dbt", "rhd", "oneshot", "hier",
                                   "hier_tree", "model"},
                                  "allreduce algorithm; auto chooses by size and rank count (Note "
                                  "[Allreduce thresholds]), model by the cost model over the "
                                  "group's topology (Note [Collective cost model]); hier and "
                                  "hier_tree are the hierarchical ones across hosts (Note "
                                  "[Hierarchical allreduce])");
const config::IntSetting kChunkBytes("LOOM_DIST_CHUNK_BYTES", 512 << 10, 1, 1 << 30,
                                     "bytes per pipelined piece of ring, tree and halving-doubling "
                                     "collectives (the same on every rank; at least 64 are used)");
const config::IntSetting kSpinUs(
    "LOOM_DIST_SPIN_US", 1000, 0, 10'000'000,
    "microseconds a waiting rank spins before it sleeps (Note [Waiting] "
    "in src/distributed/transport/communicator.cpp)");
const config::IntSetting kYieldUs("LOOM_DIST_YIELD_US", 1000, 0, 10'000'000,
                                  "microseconds a waiting rank yields before it sleeps when the "
                                  "host's ranks outnumber its cores (Note [Waiting])");
const config::ChoiceSetting kTransport("LOOM_TRANSPORT", "auto", {"auto", "tcp", "shm"},
                                       "links between ranks: auto (shared memory on one host, TCP "
                                       "across hosts), tcp or shm");
const config::IntSetting kTcpChannels(
    "LOOM_TCP_CHANNELS", 2, 1, 64,
    "TCP connections per peer; large messages are split across them");
const config::IntSetting kShmCmaMin("LOOM_SHM_CMA_MIN", 64 << 10, 1, INT_MAX,
                                    "bytes from which a shared-memory message moves in one copy "
                                    "(process_vm_readv) instead of through the rings");
const config::FlagSetting kShmNoCma("LOOM_SHM_NO_CMA", false,
                                    "1: large shared-memory messages stream through the rings (two "
                                    "copies) instead of process_vm_readv");
const config::FlagSetting kShmNoCoop(
    "LOOM_SHM_NO_COOP", false,
    "1: senders do not help copy large shared-memory messages (Note "
    "[Cooperative copies])");
const config::StringSetting kHostId(
    "LOOM_HOST_ID", "",
    "names this process's host for the group (ranks with one name share memory, others use "
    "TCP); default: hostname, boot id and network namespace");
const config::StringSetting kSocketAddr(
    "LOOM_SOCKET_ADDR", "",
    "IPv4 address this rank binds and advertises for TCP links "
    "(default: binds all interfaces, advertises the host name's "
    "address)");
const config::ChoiceSetting kDebug("LOOM_DIST_DEBUG", "off", {"off", "detail"},
                                   "detail: every collective's fingerprint is checked on all ranks "
                                   "before it runs");
const config::PathSetting kFlightDir("LOOM_FLIGHT_DIR", "",
                                     "where flight records go on a failure (default: "
                                     "$TMPDIR/loom-flight-<run id or uid>)");
const config::IntSetting kFlightEntries("LOOM_FLIGHT_ENTRIES", 2000, 1, 1'000'000,
                                        "collectives the flight recorder keeps per group");
const config::StringSetting kStoreToken("LOOM_STORE_TOKEN", "",
                                        "shared secret a store client must present (stores "
                                        "created without a token)",
                                        /*secret=*/true);
const config::StringSetting kRunId("LOOM_RUN_ID", "",
                                   "names this run (flight-record directories); `loom launch` sets "
                                   "it for its workers, default: made up by the launcher");
const config::IntSetting kRestartCount("LOOM_RESTART_COUNT", 0, 0, INT_MAX,
                                       "set by `loom launch` for its workers: how many times they "
                                       "were restarted");
const config::RealSetting kLaunchGrace("LOOM_LAUNCH_GRACE", 10, 0, 1'000'000,
                                       "seconds `loom launch` waits after SIGTERM (or a forwarded "
                                       "signal) before SIGKILL");

}  // namespace loom::dist::settings
