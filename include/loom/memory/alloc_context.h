// Allocation contexts and step marks (memory layer): which operator is allocating on this thread,
// and where training steps end, for allocators that record (RecordingAllocator, CachingAllocator's
// blocks and history).
//
// Note [allocation context]
//   The memory layer knows no operators. A higher layer sets a per-thread context string while an
//   operator runs (AllocContextGuard: a thread-local pointer store); allocators read it with
//   current_alloc_context(). The dispatcher does this through RecordFunction
//   (src/dispatch/record_function.cpp), whose recorded path already costs eager calls nothing while
//   nobody records: it turns that path on only while an AllocContextRequest lives (it registers the
//   listener below), so eager overhead stays one predictable branch when no recording wants
//   contexts. The context is the innermost operator or scope ("loom::addmm", "AddmmBackward",
//   "data.read"); the pointer is valid only while that operator runs, so keepers copy the string.
//   mark_step() says one training step ended (optimizers call it after each step()); recordings
//   turn it into step markers so that tools can show memory over steps.
// Thread-safety: contexts are per thread; requests, the listener and step marks are thread-safe.
#pragma once

#include <cstdint>

#include "loom/export.h"

namespace loom::memory {

namespace detail {
extern LOOM_API thread_local const char* tls_alloc_context
    __attribute__((tls_model("initial-exec")));
}  // namespace detail

// The innermost operator or scope allocating on this thread, or nullptr
// (Note [allocation context]).
inline const char* current_alloc_context() {
  return detail::tls_alloc_context;
}

// Sets this thread's context for a scope and restores the previous one.
class AllocContextGuard {
 public:
  explicit AllocContextGuard(const char* context) : saved_(detail::tls_alloc_context) {
    detail::tls_alloc_context = context;
  }
  ~AllocContextGuard() { detail::tls_alloc_context = saved_; }
  AllocContextGuard(const AllocContextGuard&) = delete;
  AllocContextGuard& operator=(const AllocContextGuard&) = delete;

 private:
  const char* saved_;
};

// While at least one lives, the layer that knows operators sets contexts.
class LOOM_API AllocContextRequest {
 public:
  AllocContextRequest();
  ~AllocContextRequest();
  AllocContextRequest(const AllocContextRequest&) = delete;
  AllocContextRequest& operator=(const AllocContextRequest&) = delete;
};
LOOM_API bool alloc_contexts_wanted();
// The one listener, called with true when the first request starts and false when the last ends,
// and at once with true if requests exist when it is set (so the order of static initialisation
// does not matter). nullptr removes it.
LOOM_API void set_alloc_context_listener(void (*listener)(bool wanted));

// Marks the end of a training step. Every live RecordingAllocator logs a step marker with the
// number of steps it has seen end (1 after the first). Costs one relaxed load while nothing
// records.
LOOM_API void mark_step();
// Steps marked so far in this process.
LOOM_API int64_t steps_marked();

}  // namespace loom::memory
