// Allocation contexts: the per-thread context and the requests that ask a higher layer to set it
// (Note [allocation context] in loom/memory/alloc_context.h). Step marks are in alloc_trace.cpp,
// next to the recorders they notify.
#include "loom/memory/alloc_context.h"

#include <mutex>

namespace loom::memory {

namespace detail {
thread_local const char* tls_alloc_context __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace detail

namespace {
std::mutex g_mu;
int g_requests = 0;                         // guarded by g_mu
void (*g_listener)(bool wanted) = nullptr;  // guarded by g_mu
}  // namespace

// The listener runs under g_mu, so that "wanted" and "not wanted" reach it in order.
AllocContextRequest::AllocContextRequest() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_requests++ == 0 && g_listener != nullptr) g_listener(true);
}

AllocContextRequest::~AllocContextRequest() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (--g_requests == 0 && g_listener != nullptr) g_listener(false);
}

bool alloc_contexts_wanted() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_requests > 0;
}

void set_alloc_context_listener(void (*listener)(bool wanted)) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_listener != nullptr && g_requests > 0) g_listener(false);
  g_listener = listener;
  if (g_listener != nullptr && g_requests > 0) g_listener(true);
}

}  // namespace loom::memory
