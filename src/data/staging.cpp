// HostBufferPool (see loom/data/staging.h).
#include "loom/data/staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "loom/cuda.h"
#include "loom/error.h"

namespace loom::data {

namespace {
size_t page_size() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

// What a DataPtr's context points at: the buffer and the pool it goes back to (kept alive by the
// lease, so a batch may outlive the loader that made it).
struct HostBufferPool::Lease {
  std::shared_ptr<HostBufferPool> pool;
  void* p;
};

std::shared_ptr<HostBufferPool> HostBufferPool::create(size_t buffer_bytes, int keep, bool pin) {
  return std::shared_ptr<HostBufferPool>(new HostBufferPool(buffer_bytes, keep, pin));
}

HostBufferPool::HostBufferPool(size_t bytes, int keep, bool pin)
    : bytes_((bytes + page_size() - 1) / page_size() * page_size()),
      keep_(keep < 1 ? 1 : keep),
      want_pin_(pin) {
  if (bytes_ == 0) bytes_ = page_size();
  // Pinned when the first buffer could be page-locked; later buffers try the same way.
  pinned_ = want_pin_;
}

HostBufferPool::~HostBufferPool() {
  for (void* p : idle_) {
    if (want_pin_) {
      if (cuda::is_available()) {
        cuda::host_unregister(p);
      } else {
        ::munlock(p, bytes_);
      }
    }
    std::free(p);
  }
}

DataPtr HostBufferPool::acquire() {
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!idle_.empty()) {
      p = idle_.back();
      idle_.pop_back();
      ++reused_;
    }
    ++in_use_;
  }
  if (!p) {
    p = std::aligned_alloc(page_size(), bytes_);
    if (!p) {
      std::lock_guard<std::mutex> g(mu_);
      --in_use_;
      LOOM_THROW(OutOfMemoryError, "[data.staging] cannot allocate a host batch buffer of ", bytes_,
                 " bytes");
    }
    bool locked = false;
    if (want_pin_) {
      locked = cuda::is_available() ? cuda::host_register(p, bytes_) : ::mlock(p, bytes_) == 0;
    }
    std::lock_guard<std::mutex> g(mu_);
    ++allocated_;
    if (!locked) pinned_ = false;
  }
  auto* lease = new Lease{shared_from_this(), p};
  return DataPtr(p, lease, &HostBufferPool::return_lease, kCPU);
}

void HostBufferPool::return_lease(void* ctx) {
  auto* lease = static_cast<Lease*>(ctx);
  std::shared_ptr<HostBufferPool> pool = std::move(lease->pool);
  void* p = lease->p;
  delete lease;
  pool->release(p);
}

void HostBufferPool::release(void* p) {
  {
    std::lock_guard<std::mutex> g(mu_);
    --in_use_;
    if (static_cast<int>(idle_.size()) < keep_) {
      idle_.push_back(p);
      return;
    }
  }
  if (want_pin_) {
    if (cuda::is_available()) {
      cuda::host_unregister(p);
    } else {
      ::munlock(p, bytes_);
    }
  }
  std::free(p);
}

HostPoolStats HostBufferPool::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  HostPoolStats s;
  s.allocated = allocated_;
  s.reused = reused_;
  s.in_use = in_use_;
  s.idle = static_cast<int64_t>(idle_.size());
  s.pinned = pinned_ && allocated_ > 0;
  s.buffer_bytes = bytes_;
  return s;
}

}  // namespace loom::data
