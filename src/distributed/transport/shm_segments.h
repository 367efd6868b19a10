// Names and cleanup of the shared-memory segments of process groups (distributed layer, internal).
// See Note [Orphaned segments] in shm_segments.cpp.
//
// Thread-safety: every function may be called from any thread; the sweep only reads /proc and
// removes files whose owner is dead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::dist {

// The name (for shm_open) of a new inbox segment owned by this process:
// "/loom-pg-<pid namespace>-<pid>-<start time>-<rank>-<nonce in hex>".
LOOM_API std::string shm_segment_name(int rank, uint64_t nonce);

struct OrphanSegment {
  std::string path;  // e.g. /dev/shm/loom-pg-4026531836-1234-56789-0-1f2e3d
  int pid = 0;       // its dead owner
};

struct SegmentSweep {
  std::vector<OrphanSegment> removed;
  std::vector<std::string> errors;  // segments of dead owners that could not be removed, and why
};

// Removes the process-group segments in `dir` (/dev/shm) whose owner has exited (or whose pid now
// belongs to another process). Keeps segments of live owners, of other users and of other pid
// namespaces, and files it cannot parse.
LOOM_API SegmentSweep remove_orphan_segments(const std::string& dir = "/dev/shm");

// "removed 2 shared-memory segment(s) left by dead processes: /dev/shm/... (pid 12), ..." or ""
// when nothing was removed and nothing failed.
LOOM_API std::string describe(const SegmentSweep& sweep);

}  // namespace loom::dist
