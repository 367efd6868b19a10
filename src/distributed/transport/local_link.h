// In-process links for tests (distributed layer, internal): make_local_comms(size) returns `size`
// Comms connected by mutex-protected in-memory queues, one queue per direction. A send copies its
// bytes into the queue and completes at once; a receive completes when its message is there. Each
// Comm is then driven by its own thread, as the process group would drive a real one.
//
// Ownership: each Comm owns its links; the links of all Comms share the queues (shared_ptr), so the
// Comms may be destroyed in any order. Thread-safety: one thread per Comm, as for any Comm.
#pragma once

#include <memory>
#include <vector>

#include "distributed/transport/communicator.h"
#include "loom/export.h"

namespace loom::dist {

LOOM_API std::vector<std::unique_ptr<Comm>> make_local_comms(int size);

}  // namespace loom::dist
