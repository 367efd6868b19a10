// Activation checkpointing (autograd layer): autograd::checkpoint, torch.utils.checkpoint's
// reentrant scheme over loom's engine (include/loom/autograd.h).
//
// Note [Activation checkpointing]: checkpoint(fn, inputs) runs fn without recording a graph, so
// none of its intermediate tensors are kept: only the inputs (and the outputs the caller holds).
// Its outputs hang from one CheckpointBackward node whose edges are the inputs'. When the backward
// reaches that node it runs fn again on detached copies of the inputs with grad enabled, the
// generators set back to their state of the first run (so dropout draws the same masks), and runs
// a nested backward of the recomputed outputs with the incoming gradients: the parameters fn uses
// accumulate their .grad() there, and the inputs' gradients go on through the outer graph. This is
// the reentrant scheme (torch.utils.checkpoint with use_reentrant=True). Hence its limits, checked
// or documented: fn must be deterministic given the generators' states (on the CPU the recompute
// gives the same bits, so gradients are bitwise those of the plain run); it must return new
// tensors (not an input itself); backward through it must be autograd::backward (autograd::grad
// would still accumulate the parameters' .grad() inside it), without create_graph; the objects fn
// captures (a module) must outlive the backward. Under NoGradGuard it just runs fn; when no input
// requires grad it runs fn recording as usual and warns (a reentrant checkpoint would lose the
// parameters' gradients there).
#pragma once

#include <functional>
#include <vector>

#include "loom/export.h"
#include "loom/generator.h"
#include "loom/tensor.h"

namespace loom::autograd {

struct CheckpointOptions {
  // Save the generators' states before fn and restore them for the recompute (costs nothing when
  // fn draws no random numbers).
  bool preserve_rng_state = true;
  // Generators fn may draw from besides default_generator() (e.g. a module's dropout generator).
  std::vector<Generator> generators;
};

// The outputs of fn(inputs), recomputed in the backward instead of kept (Note [Activation
// checkpointing]). ValueError when fn returns an input or an undefined tensor.
LOOM_API std::vector<Tensor> checkpoint(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
    const std::vector<Tensor>& inputs, const CheckpointOptions& options = {});

}  // namespace loom::autograd
