// Memory statistics and snapshots as JSON (memory layer): the file format of `loom mem snapshot`
// and `loom mem viz` (see Snapshot in loom/memory/caching_allocator.h), kept apart so that the
// caching allocator's header needs no JSON. Pure functions; thread-safe.
#pragma once

#include <string>

#include "loom/export.h"
#include "loom/json.h"
#include "loom/memory/caching_allocator.h"

namespace loom::memory {

LOOM_API Json to_json(const MemoryStats& stats);
LOOM_API Json to_json(const Snapshot& snapshot);
// DataError naming `source` and what is wrong for a corrupt or truncated snapshot.
LOOM_API Snapshot snapshot_from_json(const Json& j, const std::string& source);

}  // namespace loom::memory
