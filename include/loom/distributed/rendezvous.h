// Rendezvous (distributed layer): how a process learns its rank, the world size and a store shared
// with its peers.
//
// init_method:
//   "env://"          (default) rank and sizes from the launcher's environment: torchrun (RANK,
//                     WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = 127.0.0.1,
//                     MASTER_PORT = 29500), else Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                     SLURM_NTASKS_PER_NODE or the first number of SLURM_TASKS_PER_NODE), else
//                     OpenMPI (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE). Rank 0
//                     hosts a TCPStoreServer on MASTER_ADDR:MASTER_PORT; the others connect to it.
//   "tcp://host:port" the same with an explicit address (rank 0 binds it).
//   "file:///path"    a FileStore; the file must not hold an earlier run's keys.
// rank / world_size = -1 take the value from the environment (as above); explicit values win.
// Without torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE one node is assumed (local = global).
//
// Every rank then registers: compare_set("rdzv/rank/<r>") catches a rank used twice (DistError),
// add
// ("rdzv/joined", 1) counts arrivals, and all ranks wait for every rank's key (TimeoutError listing
// the missing ranks). Bad environment values are ValueErrors naming the variable and its value.
//
// Ownership: the returned store is shared; it is a PrefixStore("default_pg") over the TCPStore or
// FileStore (whose rendezvous keys, "rdzv/...", stay outside the prefix). Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "loom/distributed/store.h"
#include "loom/export.h"

namespace loom::dist {

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // "" for file://
  int master_port = 0;      // 0 for file://
  // Where rank and sizes came from: "torchrun env", "slurm", "openmpi", "arguments" (env:// with
  // explicit rank and world size), or the init_method for tcp:// and file://.
  std::string source;
  std::shared_ptr<Store> store;  // PrefixStore("default_pg", base)
};

LOOM_API RendezvousInfo rendezvous(const std::string& init_method = "env://", int rank = -1,
                                   int world_size = -1, Duration timeout = default_timeout());

}  // namespace loom::dist
