// Internal pieces of the caching allocator (src/memory/caching_allocator.cpp): a free list for the
// nodes of its sets, a flat map from addresses to blocks, and the clock of its history. None is
// thread-safe; the allocator uses them under its lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "loom/memory/caching_allocator.h"

namespace loom::memory::detail {

// The nodes of the pools' sets, recycled through a free list (the general-purpose pool resources
// cost more than the rest of an allocation).
class NodeArena {
 public:
  NodeArena() = default;
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;
  ~NodeArena() {
    for (void* chunk : chunks_) ::operator delete(chunk);
  }

  void* get(size_t bytes) {
    if (node_size_ == 0) node_size_ = std::max(bytes, sizeof(FreeNode));
    if (bytes > node_size_) return ::operator new(bytes);  // not a node of the set (none are)
    if (free_ == nullptr) refill();
    FreeNode* n = free_;
    free_ = n->next;
    return n;
  }

  void put(void* p, size_t bytes) {
    if (bytes > node_size_) {
      ::operator delete(p);
      return;
    }
    auto* n = static_cast<FreeNode*>(p);
    n->next = free_;
    free_ = n;
  }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  static constexpr size_t kNodesPerChunk = 256;

  void refill() {
    size_t stride = (node_size_ + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) *
                    alignof(std::max_align_t);
    char* chunk = static_cast<char*>(::operator new(stride* kNodesPerChunk));
    chunks_.push_back(chunk);
    for (size_t i = kNodesPerChunk; i-- > 0;) put(chunk + i * stride, node_size_);
  }

  size_t node_size_ = 0;
  FreeNode* free_ = nullptr;
  std::vector<void*> chunks_;
};

template <class T>
struct ArenaAllocator {
  using value_type = T;
  explicit ArenaAllocator(NodeArena* a) : arena(a) {}
  template <class U>
  ArenaAllocator(const ArenaAllocator<U>& o) : arena(o.arena) {}  // NOLINT: rebinding
  T* allocate(size_t n) { return static_cast<T*>(arena->get(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { arena->put(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const ArenaAllocator<U>& o) const {
    return arena == o.arena;
  }
  NodeArena* arena;
};

// Values by address (the caching allocator's allocated blocks): open addressing with linear
// probing. Keys are block addresses, multiples of kRoundBytes and never 0, so 0 and 1 serve as the
// empty and deleted markers.
template <class T>
class AddressMap {
 public:
  AddressMap() { slots_.resize(kMinSlots); }

  T* find(uint64_t key) const {
    if (key <= kDeleted) return nullptr;
    for (size_t i = home(key);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.block;
      if (s.key == kEmpty) return nullptr;
    }
  }

  void insert(uint64_t key, T* block) {
    if ((used_ + 1) * 2 > slots_.size()) rehash();
    size_t i = home(key);
    while (slots_[i].key > kDeleted) i = (i + 1) & mask();
    if (slots_[i].key == kEmpty) ++used_;
    slots_[i] = {key, block};
    ++live_;
  }

  void erase(uint64_t key) {
    for (size_t i = home(key);; i = (i + 1) & mask()) {
      Slot& s = slots_[i];
      if (s.key == key) {
        // A slot followed by an empty one ends every probe through it: it can be empty too.
        if (slots_[(i + 1) & mask()].key == kEmpty) {
          s.key = kEmpty;
          --used_;
        } else {
          s.key = kDeleted;
        }
        --live_;
        return;
      }
      if (s.key == kEmpty) return;
    }
  }

  size_t size() const { return live_; }

  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.key > kDeleted) f(s.block);
    }
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kDeleted = 1;
  static constexpr size_t kMinSlots = 256;
  struct Slot {
    uint64_t key = kEmpty;
    T* block = nullptr;
  };

  size_t mask() const { return slots_.size() - 1; }
  size_t home(uint64_t key) const {
    return static_cast<size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }

  // Grows when live entries fill a quarter of the table, else only clears the deleted markers
  // (reusing the scratch vector, so a steady state does not allocate).
  void rehash() {
    size_t n = slots_.size();
    while (live_ * 4 >= n) n *= 2;
    scratch_.clear();
    for (const Slot& s : slots_) {
      if (s.key > kDeleted) scratch_.push_back(s);
    }
    slots_.assign(n, Slot{});
    used_ = live_ = 0;
    for (const Slot& s : scratch_) insert(s.key, s.block);
  }

  std::vector<Slot> slots_;
  std::vector<Slot> scratch_;
  size_t used_ = 0;  // live + deleted
  size_t live_ = 0;
};

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Note [history timestamps]
//   Reading the steady clock costs 30-50 ns in a virtual machine: as much as the rest of an
//   allocation. Where the kernel's clock source is the TSC (the steady clock is then derived from
//   it), the history stores raw TSC ticks (an instruction) and snapshot() maps them onto the steady
//   clock linearly through two anchors, the allocator's construction and the snapshot itself.
//   Elsewhere it stores steady-clock ns directly.
inline bool tsc_is_the_clock_source() {
#if defined(__x86_64__)
  static const bool tsc = [] {
    const char* path = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) return false;
    char buf[16] = {};
    bool yes = std::fgets(buf, sizeof(buf), f) != nullptr && std::strncmp(buf, "tsc", 3) == 0;
    std::fclose(f);
    return yes;
  }();
  return tsc;
#else
  return false;
#endif
}

class HistoryClock {
 public:
  HistoryClock()
      : use_tsc_(tsc_is_the_clock_source()), base_ns_(steady_ns()), base_stamp_(stamp()) {}

  // A raw time stamp: TSC ticks or steady ns.
  int64_t stamp() const {
#if defined(__x86_64__)
    if (use_tsc_) return static_cast<int64_t>(__rdtsc());
#endif
    return steady_ns();
  }

  // Maps raw stamps taken so far to steady-clock ns.
  class Mapping {
   public:
    explicit Mapping(const HistoryClock& c) : c_(c) {
      if (!c.use_tsc_) return;
      int64_t now_stamp = c.stamp();
      int64_t now_ns = steady_ns();
      if (now_stamp > c.base_stamp_) {
        ns_per_tick_ = static_cast<double>(now_ns - c.base_ns_) /
                       static_cast<double>(now_stamp - c.base_stamp_);
      }
    }
    int64_t operator()(int64_t stamp) const {
      if (!c_.use_tsc_) return stamp;
      return c_.base_ns_ +
             static_cast<int64_t>(static_cast<double>(stamp - c_.base_stamp_) * ns_per_tick_);
    }

   private:
    const HistoryClock& c_;
    double ns_per_tick_ = 0.0;
  };

 private:
  bool use_tsc_;
  int64_t base_ns_;
  int64_t base_stamp_;
};

}  // namespace loom::memory::detail
