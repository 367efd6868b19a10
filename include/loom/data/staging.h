// Staging (data layer): the pool of host buffers that batches are collated into. (The device stage
// that moves batches to an accelerator is DeviceStage in loader.h.)
//
// HostBufferPool hands out buffers of one size. A buffer comes back to the pool when the last
// tensor using it is destroyed, so a training loop that drops each batch before taking the next
// reuses a handful of buffers forever. The pool never blocks: when every buffer is in use (a
// consumer keeping batches alive) it allocates another one and counts it, and it keeps at most
// `keep` idle buffers. Buffers are page-locked when asked: with the CUDA backend through the CUDA
// runtime (what asynchronous host-to-device copies need); in a CPU-only build with mlock(2), best
// effort (the RLIMIT_MEMLOCK limit often forbids it; stats().pinned says what happened).
//
// Thread-safety: HostBufferPool is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/export.h"
#include "loom/memory.h"

namespace loom::data {

struct HostPoolStats {
  int64_t allocated = 0;  // buffers ever allocated
  int64_t reused = 0;     // acquisitions served from the pool
  int64_t in_use = 0;
  int64_t idle = 0;
  bool pinned = false;  // buffers are page-locked
  size_t buffer_bytes = 0;
};

class LOOM_API HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  static std::shared_ptr<HostBufferPool> create(size_t buffer_bytes, int keep, bool pin);
  ~HostBufferPool();

  // A buffer of buffer_bytes (page-aligned). Destroying the DataPtr returns it to the pool, which
  // stays alive until then.
  DataPtr acquire();
  HostPoolStats stats() const;
  size_t buffer_bytes() const { return bytes_; }

 private:
  HostBufferPool(size_t bytes, int keep, bool pin);
  void release(void* p);
  struct Lease;
  static void return_lease(void* lease);

  size_t bytes_;
  int keep_;
  bool want_pin_;
  bool pinned_ = false;
  mutable std::mutex mu_;
  std::vector<void*> idle_;
  int64_t allocated_ = 0, reused_ = 0, in_use_ = 0;
};

}  // namespace loom::data
