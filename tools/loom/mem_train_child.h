// `loom mem record --train`: records a real `loom train` run by running it as a child process with
// LOOM_MEM_RECORD set (Note [recording a process] in loom/memory/alloc_trace.h), so that the
// training command needs no recording code of its own.
#pragma once

#include <string>
#include <vector>

#include "loom/memory/alloc_trace.h"

namespace loom::cli {

// Runs `loom train --max-steps STEPS --no-progress TRAIN_ARGS...` (this executable) with
// LOOM_MEM_RECORD=OUT, its output on our stderr, and returns the trace it wrote (its source
// rewritten to name the command). ValueError for train arguments it cannot record (--nproc);
// DataError naming the exit status when the run fails or writes no trace.
memory::AllocTrace record_train_child(const std::string& out, int64_t steps,
                                      const std::vector<std::string>& train_args);

}  // namespace loom::cli
