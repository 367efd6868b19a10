// SimulatedDevice: device memory and streams simulated in host memory (see caching_allocator.h).
#include <cstdlib>
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

EventId SimulatedDevice::record_event(StreamId stream) {
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

void SimulatedDevice::complete(StreamId stream) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  for (auto& [s, n] : m.recorded) {
    if (stream < 0 || s == stream) m.completed[s] = n;
  }
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
