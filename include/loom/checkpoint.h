// Training checkpoints (io layer): tensors in a safetensors file, everything else (optimizer
// hyperparameters, scheduler, RNG and training-loop state) in a JSON sidecar.
//
// A checkpoint of step S is DIR/step-<S>.safetensors + DIR/step-<S>.json, each written atomically
// (temporary file, fsync, rename); then DIR/latest is atomically replaced by the name "step-<S>".
// A crash at any moment leaves `latest` naming a complete checkpoint (or no checkpoint at all),
// never a torn one. Older checkpoints beyond `keep` are removed after `latest` moves; temporaries
// that a killed writer left behind are removed by the next save (remove_orphan_temp_files, io.h).
//
// Note [Checkpoint checksums]: the sidecar's "checkpoint" member lists every tensor with its dtype,
// shape and the CRC32C of its bytes, and carries the CRC32C of the sidecar itself (of its compact
// JSON with that one field left out). Loading verifies both, so a flipped bit in a weight or an
// edited field is a DataError naming the file and the tensor or field, never a silent resume.
//
// The safetensors file is an ordinary one: PyTorch / Hugging Face tools read its tensors (model
// parameters are stored under "model.<name>", optimizer state under "optim.<name>").
//
// Not thread-safe for one directory: one writer at a time (the training loop).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/export.h"
#include "loom/io.h"
#include "loom/json.h"

namespace loom::io {

struct Checkpoint {
  int64_t step = 0;
  TensorMap tensors;
  Json sidecar;           // as given to save_checkpoint, plus the "checkpoint" member
  std::string path;       // DIR/step-<S> (without extension)
  bool verified = false;  // checksums present and checked (false only for version-1 checkpoints)
};

// Writes checkpoint `step` and returns the path prefix written. Creates dir if needed. Keeps the
// newest `keep` checkpoints (at least 1). `sidecar` must be an object without a "checkpoint"
// member.
LOOM_API std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors,
                                     const Json& sidecar, int keep = 2);
// The checkpoint `latest` names, or nullopt if the directory has none. A corrupt, truncated or
// altered checkpoint raises DataError naming the file (and the tensor or field).
LOOM_API std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir);
// The checkpoint DIR/step-<S> (prefix as returned by save_checkpoint), verified the same way.
LOOM_API Checkpoint load_checkpoint(const std::string& prefix);

// The CRC32C a sidecar carries (Note [Checkpoint checksums]), computed over `sidecar` with its
// "checkpoint"."sidecar_crc32c" member left out.
LOOM_API uint32_t sidecar_checksum(const Json& sidecar);

}  // namespace loom::io
