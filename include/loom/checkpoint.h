// Training checkpoints (io layer): tensors in a safetensors file, everything else (optimizer
// hyperparameters, scheduler, RNG and training-loop state) in a JSON sidecar.
//
// A checkpoint of step S is DIR/step-<S>.safetensors + DIR/step-<S>.json, each written atomically
// (temporary file, fsync, rename); then DIR/latest is atomically replaced by the name "step-<S>".
// A crash at any moment leaves `latest` naming a complete checkpoint (or no checkpoint at all), never
// a torn one. Older checkpoints beyond `keep` are removed after `latest` moves.
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
  Json sidecar;
  std::string path;  // DIR/step-<S> (without extension)
};

// Returns the path prefix written. Creates dir if needed.
LOOM_API std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors,
                                     const Json& sidecar, int keep = 2);
// The checkpoint `latest` names, or nullopt if the directory has none. A corrupt or truncated
// checkpoint raises DataError naming the file (and the tensor).
LOOM_API std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir);

}  // namespace loom::io
