// rendezvous(): rank and sizes from the launcher's environment or the caller, a store, and the
// registration of every rank (see include/loom/distributed/rendezvous.h).
#include "loom/distributed/rendezvous.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <random>

#include "distributed/store/store_detail.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

// Rank and sizes, with the names they were read under (for error messages).
struct Ranks {
  int rank = -1, world = -1, local_rank = -1, local_world = -1;
  std::string rank_name = "rank", world_name = "world_size", local_rank_name, local_world_name;
  std::string source;
};

// RANK, WORLD_SIZE, SLURM_*, OMPI_* and MASTER_*: the launchers' variables, not loom's settings.
const char* env(const char* name) {
  return std::getenv(name);  // bare getenv: another program's variable
}

int parse_int(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  LOOM_CHECK(!value.empty() && end == value.c_str() + value.size(), "[rendezvous] ", name, "=",
             value, " is not an integer");
  LOOM_CHECK(errno == 0 && v >= INT_MIN && v <= INT_MAX, "[rendezvous] ", name, "=", value,
             " is out of range");
  return static_cast<int>(v);
}

int env_int(const char* name) {
  return parse_int(name, env(name));
}

// "2(x3),1" -> 2: Slurm's tasks per node, first node.
int first_count(const char* name, const std::string& value) {
  size_t n = 0;
  while (n < value.size() && value[n] >= '0' && value[n] <= '9') ++n;
  LOOM_CHECK(n > 0, "[rendezvous] ", name, "=", value, " does not start with a task count");
  return parse_int(name, value.substr(0, n));
}

void require(const char* have, const char* need) {
  LOOM_CHECK(env(need) != nullptr, "[rendezvous] ", have, " is set but ", need,
             " is not (the launcher sets both)");
}

// The launcher's variables, or source "" when none is recognised.
Ranks from_environment() {
  Ranks r;
  auto set_names = [&](const char* rank, const char* world, const char* lrank, const char* lworld) {
    r.rank_name = rank;
    r.world_name = world;
    r.local_rank_name = lrank;
    r.local_world_name = lworld;
  };
  if (env("RANK") || env("WORLD_SIZE")) {
    require(env("RANK") ? "RANK" : "WORLD_SIZE", env("RANK") ? "WORLD_SIZE" : "RANK");
    r.source = "torchrun env";
    set_names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    r.rank = env_int("RANK");
    r.world = env_int("WORLD_SIZE");
    if (env("LOCAL_RANK")) r.local_rank = env_int("LOCAL_RANK");
    if (env("LOCAL_WORLD_SIZE")) r.local_world = env_int("LOCAL_WORLD_SIZE");
  } else if (env("SLURM_PROCID")) {
    require("SLURM_PROCID", "SLURM_NTASKS");
    r.source = "slurm";
    set_names("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
    r.rank = env_int("SLURM_PROCID");
    r.world = env_int("SLURM_NTASKS");
    if (env("SLURM_LOCALID")) r.local_rank = env_int("SLURM_LOCALID");
    if (env("SLURM_NTASKS_PER_NODE")) {
      r.local_world = env_int("SLURM_NTASKS_PER_NODE");
    } else if (const char* t = env("SLURM_TASKS_PER_NODE")) {
      r.local_world_name = "SLURM_TASKS_PER_NODE";
      r.local_world = first_count("SLURM_TASKS_PER_NODE", t);
    }
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    require("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    r.source = "openmpi";
    set_names("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE");
    r.rank = env_int("OMPI_COMM_WORLD_RANK");
    r.world = env_int("OMPI_COMM_WORLD_SIZE");
    if (env("OMPI_COMM_WORLD_LOCAL_RANK")) r.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env("OMPI_COMM_WORLD_LOCAL_SIZE")) r.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  return r;
}

Ranks resolve_ranks(int rank, int world_size) {
  Ranks r;
  if (rank < 0 || world_size < 0) {
    r = from_environment();
    LOOM_CHECK(!r.source.empty(),
               "[rendezvous] cannot tell this process's rank: RANK/WORLD_SIZE (torchrun), "
               "SLURM_PROCID (srun) and OMPI_COMM_WORLD_RANK (mpirun) are unset; pass rank and "
               "world_size");
  }
  if (rank >= 0) {
    r.rank = rank;
    r.rank_name = "rank";
  }
  if (world_size >= 0) {
    r.world = world_size;
    r.world_name = "world_size";
  }
  if (rank >= 0 && world_size >= 0) {
    r.source = "arguments";
    r.local_rank = r.local_world = -1;
  }
  if (r.local_rank < 0 && r.local_world < 0) {  // one node assumed
    r.local_rank = r.rank;
    r.local_world = r.world;
    r.local_rank_name = r.rank_name;
    r.local_world_name = r.world_name;
  } else if (r.local_world < 0) {
    r.local_world = r.world;
    r.local_world_name = r.world_name;
  } else if (r.local_rank < 0) {
    r.local_rank = r.rank % r.local_world;
    r.local_rank_name = r.rank_name;
  }
  LOOM_CHECK(r.world >= 1, "[rendezvous] ", r.world_name, "=", r.world, " must be at least 1");
  LOOM_CHECK(r.rank >= 0 && r.rank < r.world, "[rendezvous] ", r.rank_name, "=", r.rank,
             " is out of range for ", r.world_name, "=", r.world, " (ranks are 0..", r.world - 1,
             ")");
  LOOM_CHECK(r.local_world >= 1 && r.local_world <= r.world, "[rendezvous] ", r.local_world_name,
             "=", r.local_world, " must be between 1 and ", r.world_name, "=", r.world);
  LOOM_CHECK(r.local_rank >= 0 && r.local_rank < r.local_world, "[rendezvous] ", r.local_rank_name,
             "=", r.local_rank, " is out of range for ", r.local_world_name, "=", r.local_world);
  return r;
}

int parse_port(const std::string& name, const std::string& value) {
  const int port = parse_int(name, value);
  LOOM_CHECK(port >= 1 && port <= 65535, "[rendezvous] ", name, "=", value,
             " is out of range 1..65535");
  return port;
}

// "host:port" or "[v6]:port".
void parse_host_port(const std::string& init, const std::string& rest, std::string* host,
                     int* port) {
  size_t colon = rest.rfind(':');
  LOOM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < rest.size(),
             "[rendezvous] init_method '", init, "' needs a host and a port (tcp://host:port)");
  *host = rest.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  const std::string p = rest.substr(colon + 1);
  const bool digits = p.find_first_not_of("0123456789") == std::string::npos && p.size() <= 5;
  *port = digits ? std::stoi(p) : -1;
  LOOM_CHECK(*port >= 1 && *port <= 65535, "[rendezvous] init_method '", init, "': port '", p,
             "' is not a port number (1..65535)");
}

std::string identity() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(rd());
}

std::string rank_key(int r) {
  return "rdzv/rank/" + std::to_string(r);
}

// Claims this rank's key, counts in, and waits for everyone.
void register_rank(Store& store, const Ranks& r, Duration timeout, const std::string& via) {
  const std::string me = identity();
  const std::string held = store.compare_set(rank_key(r.rank), "", me);
  if (held != me) {
    LOOM_THROW(DistError, "[rendezvous] rank ", r.rank, " joined twice: ", rank_key(r.rank),
               " is held by ", held, " and this process is ", me, " (", r.rank_name, "=", r.rank,
               " via ", via, "; a stale file:// store also causes this)");
  }
  store.add("rdzv/joined", 1);
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(r.world));
  for (int i = 0; i < r.world; ++i) keys.push_back(rank_key(i));
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError& e) {
    std::string missing;
    int n_missing = 0;
    try {
      for (int i = 0; i < r.world; ++i) {
        if (store.check({keys[static_cast<size_t>(i)]})) continue;
        if (n_missing < 32) missing += (n_missing ? ", " : "") + std::to_string(i);
        ++n_missing;
      }
    } catch (const Error&) {
      throw e;  // the store is gone too: the original error says more
    }
    if (n_missing > 32) missing += ", ... (" + std::to_string(n_missing - 32) + " more)";
    LOOM_THROW(TimeoutError, "[rendezvous] rank ", r.rank, " timed out after ",
               detail::format_seconds(timeout), " waiting for rank", n_missing == 1 ? " " : "s ",
               missing, " (", r.world - n_missing, " of ", r.world, " joined via ", via, ")");
  }
}

}  // namespace

RendezvousInfo rendezvous(const std::string& init_method, int rank, int world_size,
                          Duration timeout) {
  LOOM_CHECK(timeout.count() > 0, "[rendezvous] timeout must be positive but is ", timeout.count(),
             " ms");
  const std::string init = init_method.empty() ? "env://" : init_method;
  const bool is_env = init == "env://";
  const bool is_tcp = init.rfind("tcp://", 0) == 0;
  const bool is_file = init.rfind("file://", 0) == 0;
  LOOM_CHECK(is_env || is_tcp || is_file, "[rendezvous] unknown init_method '", init,
             "': expected env://, tcp://host:port or file:///path");

  const Ranks r = resolve_ranks(rank, world_size);
  RendezvousInfo info;
  info.rank = r.rank;
  info.world_size = r.world;
  info.local_rank = r.local_rank;
  info.local_world_size = r.local_world;
  info.source = is_env ? r.source : init;

  std::shared_ptr<Store> base;
  if (is_file) {
    const std::string path = init.substr(7);
    LOOM_CHECK(!path.empty(), "[rendezvous] init_method '", init, "' needs a path (file:///path)");
    base = std::make_shared<FileStore>(path);
    base->set_timeout(timeout);
  } else {
    if (is_env) {
      const char* addr = env("MASTER_ADDR");
      info.master_addr = addr && *addr ? addr : "127.0.0.1";
      const char* port = env("MASTER_PORT");
      info.master_port = port ? parse_port("MASTER_PORT", port) : 29500;
    } else {
      parse_host_port(init, init.substr(6), &info.master_addr, &info.master_port);
    }
    TCPStoreOptions opt;
    opt.host = info.master_addr;
    opt.port = info.master_port;
    opt.is_server = r.rank == 0;
    opt.timeout = timeout;
    base = std::make_shared<TCPStore>(opt);
  }
  const std::string via = is_env ? "env:// (" + r.source + ", " + info.master_addr + ":" +
                                       std::to_string(info.master_port) + ")"
                                 : init;
  register_rank(*base, r, timeout, via);
  info.store = std::make_shared<PrefixStore>("default_pg", base);
  return info;
}

}  // namespace loom::dist
