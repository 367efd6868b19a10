// SimulatedDevice: device memory and streams simulated in host memory (see caching_allocator.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "loom/error.h"
#include "loom/memory/caching_allocator.h"
#include "memory/memory_format.h"

namespace loom::memory {

struct SimulatedDevice::Impl {
  size_t capacity = 0;
  bool backed = false;
  bool auto_complete = true;
  mutable std::mutex mutex;
  size_t used = 0;                                 // guarded by mutex
  uint64_t next_fake_address = uint64_t{1} << 32;  // guarded by mutex; bump pointer when !backed
  std::unordered_map<uintptr_t, size_t> segments;  // guarded by mutex; live segment -> bytes
  std::map<uintptr_t, size_t> reserved;            // guarded by mutex; reserve()d range -> bytes
  std::map<uintptr_t, uintptr_t> mapped;           // guarded by mutex; mapped start -> end, merged

  // The reserved range holding [a, a + bytes), or reserved.end().
  std::map<uintptr_t, size_t>::iterator range_of(uintptr_t a, size_t bytes) {
    auto it = reserved.upper_bound(a);
    if (it == reserved.begin()) return reserved.end();
    --it;
    return a + bytes <= it->first + it->second ? it : reserved.end();
  }
  // Mapped bytes within [a, a + bytes).
  size_t mapped_within(uintptr_t a, size_t bytes) const {
    size_t n = 0;
    auto it = mapped.upper_bound(a);
    if (it != mapped.begin()) --it;
    for (; it != mapped.end() && it->first < a + bytes; ++it) {
      uintptr_t lo = std::max(it->first, a), hi = std::min(it->second, a + bytes);
      if (hi > lo) n += hi - lo;
    }
    return n;
  }
  // Events: event id e (from 1) is the events[e-1]-th piece of work queued on its stream; it has
  // passed once that stream's completed count reaches it.
  struct Event {
    StreamId stream;
    uint64_t seq;
  };
  std::vector<Event> events;                         // guarded by mutex
  std::unordered_map<StreamId, uint64_t> recorded;   // guarded by mutex
  std::unordered_map<StreamId, uint64_t> completed;  // guarded by mutex
  int64_t malloc_calls = 0;                          // guarded by mutex
  int64_t free_calls = 0;                            // guarded by mutex
};

SimulatedDevice::SimulatedDevice(size_t capacity, bool backed, bool auto_complete)
    : impl_(std::make_unique<Impl>()) {
  LOOM_CHECK(capacity > 0, "[simulated device] capacity must be positive");
  impl_->capacity = capacity;
  impl_->backed = backed;
  impl_->auto_complete = auto_complete;
}

SimulatedDevice::~SimulatedDevice() {
  if (!impl_->backed) return;
  for (auto& [p, bytes] : impl_->segments) std::free(reinterpret_cast<void*>(p));
  for (auto& [p, bytes] : impl_->reserved) ::munmap(reinterpret_cast<void*>(p), bytes);
}

std::string SimulatedDevice::name() const {
  return "simulated device (" + detail::format_bytes(impl_->capacity) +
         (impl_->backed ? ", backed)" : ")");
}

size_t SimulatedDevice::capacity() const {
  return impl_->capacity;
}

size_t SimulatedDevice::free_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->capacity - impl_->used;
}

void* SimulatedDevice::malloc(size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  ++m.malloc_calls;
  if (bytes == 0 || bytes > m.capacity - m.used) return nullptr;
  size_t rounded = (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
  void* p = nullptr;
  if (m.backed) {
    p = std::aligned_alloc(kRoundBytes, rounded);
    if (!p) return nullptr;
  } else {
    p = reinterpret_cast<void*>(m.next_fake_address);
    m.next_fake_address += rounded;
  }
  m.used += bytes;
  m.segments.emplace(reinterpret_cast<uintptr_t>(p), bytes);
  return p;
}

void SimulatedDevice::free(void* p, size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = m.segments.find(reinterpret_cast<uintptr_t>(p));
  LOOM_CHECK(it != m.segments.end(), "[simulated device] free(", p,
             "): not a segment of this device (double free or foreign pointer)");
  LOOM_CHECK(it->second == bytes, "[simulated device] free(", p, ", ", bytes, "): the segment has ",
             it->second, " bytes");
  ++m.free_calls;
  m.used -= bytes;
  m.segments.erase(it);
  if (m.backed) std::free(p);
}

void* SimulatedDevice::reserve(size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  LOOM_CHECK(bytes > 0, "[simulated device] reserve of 0 bytes");
  size_t rounded = (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
  void* p = nullptr;
  if (m.backed) {
    p = ::mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
  } else {
    p = reinterpret_cast<void*>(m.next_fake_address);
    m.next_fake_address += rounded;
  }
  m.reserved.emplace(reinterpret_cast<uintptr_t>(p), rounded);
  return p;
}

bool SimulatedDevice::map(void* address, size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  LOOM_CHECK(bytes > 0 && m.range_of(a, bytes) != m.reserved.end(), "[simulated device] map(",
             address, ", ", bytes, "): not inside a reserved range");
  LOOM_CHECK(m.mapped_within(a, bytes) == 0, "[simulated device] map(", address, ", ", bytes,
             "): part of it is mapped already");
  if (bytes > m.capacity - m.used) return false;
  if (m.backed) {
    void* p = ::mmap(address, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return false;
    LOOM_CHECK(p == address, "[simulated device] mmap(MAP_FIXED) of ", address, " gave ", p);
  }
  m.used += bytes;
  uintptr_t lo = a, hi = a + bytes;
  auto next = m.mapped.find(hi);  // merge with the mapped pieces on both sides
  if (next != m.mapped.end()) {
    hi = next->second;
    m.mapped.erase(next);
  }
  auto it = m.mapped.lower_bound(lo);
  if (it != m.mapped.begin() && std::prev(it)->second == lo) {
    std::prev(it)->second = hi;
  } else {
    m.mapped.emplace(lo, hi);
  }
  return true;
}

void SimulatedDevice::unmap(void* address, size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  auto it = m.mapped.upper_bound(a);
  LOOM_CHECK(bytes > 0 && it != m.mapped.begin() && std::prev(it)->second >= a + bytes,
             "[simulated device] unmap(", address, ", ", bytes, "): not mapped");
  --it;
  if (m.backed) {
    // Back to PROT_NONE: the pages are returned, the range stays reserved.
    void* p = ::mmap(address, bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    LOOM_CHECK(p == address, "[simulated device] unmap(", address, ", ", bytes,
               "): mmap(PROT_NONE) failed");
  }
  uintptr_t lo = it->first, hi = it->second;
  m.mapped.erase(it);
  if (lo < a) m.mapped.emplace(lo, a);
  if (a + bytes < hi) m.mapped.emplace(a + bytes, hi);
  m.used -= bytes;
}

void SimulatedDevice::release(void* base, size_t bytes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(base);
  auto it = m.reserved.find(a);
  LOOM_CHECK(it != m.reserved.end() && it->second >= bytes, "[simulated device] release(", base,
             ", ", bytes, "): not a reserved range of this device");
  LOOM_CHECK(m.mapped_within(a, it->second) == 0, "[simulated device] release(", base,
             "): the range still has mapped pages");
  if (m.backed) ::munmap(base, it->second);
  m.reserved.erase(it);
}

EventId SimulatedDevice::record_event(const Stream& s) {
  const StreamId stream = s.id();
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  uint64_t seq = ++m.recorded[stream];
  if (m.auto_complete) m.completed[stream] = seq;
  m.events.push_back({stream, seq});
  return m.events.size();
}

bool SimulatedDevice::query(EventId event) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  LOOM_CHECK(event >= 1 && event <= m.events.size(), "[simulated device] query of unknown event ",
             event, " (", m.events.size(), " events recorded)");
  const Impl::Event& e = m.events[event - 1];
  auto it = m.completed.find(e.stream);
  return it != m.completed.end() && it->second >= e.seq;
}

void SimulatedDevice::complete(const Stream& stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto& [s, n] : m.recorded) {
    if (s == stream.id()) m.completed[s] = n;
  }
}

void SimulatedDevice::complete() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto& [s, n] : m.recorded) m.completed[s] = n;
}

int64_t SimulatedDevice::malloc_calls() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->malloc_calls;
}

int64_t SimulatedDevice::free_calls() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->free_calls;
}

}  // namespace loom::memory
