// Caching allocator (memory layer): device memory carved from cached segments, with statistics,
// snapshots and an event history — the design of PyTorch's CUDACachingAllocator, written against a
// small DeviceMemory interface so that it runs in CPU-only tests on a SimulatedDevice and, with the
// CUDA backend, on cudaMalloc / cudaEvent.
//
// Note [caching allocator]
//   - Requests are rounded up to kRoundBytes (512). Requests of at most small_size (1 MiB) come
//   from
//     the small pool, whose segments are small_segment (2 MiB); larger ones from the large pool,
//     whose segments are the request rounded up to large_round (2 MiB), or large_segment (20 MiB)
//     for requests under 10 MiB so that several of them share a segment.
//   - A request takes the best-fitting cached free block of its pool and stream (smallest size that
//     fits; ties by address). A block larger than the request is split when the remainder is at
//     least kRoundBytes (small pool) or more than small_size (large pool). Large-pool blocks larger
//     than max_split_size are never split and serve only requests above max_split_size that leave
//     at most large_round of them unused; a large-pool segment that would exceed max_split_size is
//     sized to its request (rounded to large_round) instead. Freeing a block merges it with free
//     neighbours of the same segment (coalescing). A segment never exceeds the device capacity.
//   - Streams: free blocks are kept per stream. A block used on other streams (record_stream) is
//     not reusable until an event recorded on each of those streams at free time has completed;
//     until then it sits in a pending list that allocate() polls.
//   - When the device refuses a new segment: completed pending frees are reclaimed, then every
//     cached free block of the pools is released (empty_cache) and the segment retried
//     (num_alloc_retries); if that fails too, OutOfMemoryError (num_ooms) states the request, the
//     device's free and total memory, reserved, allocated, the largest free block, fragmentation
//     and a hint. With gc_threshold > 0, before growing beyond gc_threshold x capacity the
//     allocator first releases cached blocks that have been free longest (garbage collection).
//   - empty_cache() returns every segment with no allocated block to the device.
//
// Note [expandable segments]
//   With config.expandable (the "expandable" policy; PyTorch's expandable_segments:True) each
//   (pool, stream) has one segment whose address range is reserved up front (twice the device
//   capacity, virtual) and whose memory is mapped in pages of kExpandablePage (2 MiB) only under
//   blocks that are handed out. When no cached free block fits, the segment's end grows: the free
//   block at the end by the missing pages, or a new block of whole pages. Best fit, splitting and
//   coalescing work as above inside that one segment, so the segment granularity (20 MiB large
//   segments) and the holes between segments no longer cost reserved memory. A free block keeps
//   its pages mapped (cached) until empty_cache(), the OOM retry, garbage collection or a free
//   under cache = false unmaps its whole pages: at the end of the segment by shrinking it, inside
//   it by leaving a hole of unmapped pages that a later request taking that block maps again
//   (Note [expandable pages] in src/memory/caching_allocator_impl.h). A segment left without
//   blocks disappears (its range stays reserved for reuse).
//   reserved_bytes counts mapped bytes; a segment is counted (segments, num_device_mallocs /
//   num_device_frees) when its end first grows and when it shrinks to nothing; each device map and
//   unmap of a run of pages counts in num_device_maps / num_device_unmaps and has a SegmentAlloc /
//   SegmentFree event in the history. Needs a device with supports_expandable(); max_split_size
//   must stay unlimited. As in PyTorch, a large-pool block of an expandable segment is split
//   whenever the rest is at least kRoundBytes (not only when it is above small_size): the rest
//   stays usable instead of being handed out unused.
//   With share_pages as well (the "expandable-share" policy; not in PyTorch), a request about to
//   map pages first unmaps as many free pages elsewhere — in the other segments (other pool, other
//   streams) and in the holes of its own — those free longest first. Reserved memory then grows
//   only when no free page is left anywhere: cached pages move to where they are needed instead
//   of adding up. The price is a device unmap and map where PyTorch would keep both cached.
//
// Thread-safety: every method of CachingAllocator is thread-safe (one mutex). DeviceMemory
// implementations are called under that mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/memory.h"
#include "loom/stream.h"

namespace loom::memory {

// Streams are loom::Stream values (loom/stream.h). One allocator serves one device, its
// DeviceMemory's device(): every stream given to it must be on that device (ValueError otherwise),
// and the snapshots, history and observer events name a stream by its id on that device.
using loom::StreamId;
using EventId = uint64_t;

constexpr size_t kRoundBytes = 512;
constexpr size_t kExpandablePage = size_t{2} << 20;  // Note [expandable segments]

// What the allocator needs from a device.
class LOOM_API DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual std::string name() const = 0;
  // Optional: the device whose memory this is (its streams are the allocator's). A simulated
  // device keeps this default: the CPU.
  virtual Device device() const { return kCPU; }
  virtual size_t capacity() const = 0;  // total bytes
  virtual size_t free_bytes() const = 0;
  // A new segment of exactly `bytes`, or nullptr when the device has not enough memory.
  virtual void* malloc(size_t bytes) = 0;
  virtual void free(void* p, size_t bytes) = 0;
  // Records an event on `stream` after all work queued on it so far; query() says whether it
  // passed.
  virtual EventId record_event(const Stream& stream) = 0;
  virtual bool query(EventId event) = 0;

  // Optional: virtual memory, for expandable segments (Note [expandable segments]). A device
  // without it keeps these defaults: supports_expandable() is false and the others throw
  // ValueError naming the device.
  virtual bool supports_expandable() const { return false; }
  // Reserves `bytes` of address space without memory behind it; nullptr when none is left.
  virtual void* reserve(size_t bytes);
  // Puts memory behind [address, address + bytes) of a reserved range (not mapped yet); false when
  // the device has not enough memory.
  virtual bool map(void* address, size_t bytes);
  // Takes the memory from behind a mapped [address, address + bytes) again.
  virtual void unmap(void* address, size_t bytes);
  // Returns a range from reserve() (its pages unmapped).
  virtual void release(void* base, size_t bytes);
};

// A device simulated in host memory for tests and tools: a capacity, real host memory behind each
// segment when `backed` (so callers may write to blocks) or fake, never-dereferenced addresses
// otherwise (so traces of hundreds of GiB replay on a laptop), and streams whose queued work
// completes only when the test says so (or at once with auto_complete).
class LOOM_API SimulatedDevice final : public DeviceMemory {
 public:
  explicit SimulatedDevice(size_t capacity, bool backed = false, bool auto_complete = true);
  ~SimulatedDevice() override;
  std::string name() const override;
  size_t capacity() const override;
  size_t free_bytes() const override;
  void* malloc(size_t bytes) override;
  void free(void* p, size_t bytes) override;
  EventId record_event(const Stream& stream) override;
  bool query(EventId event) override;
  // Virtual memory: fake address ranges when !backed, mmap'ed PROT_NONE ranges whose pages are
  // committed by map() when backed; mapped bytes count against the capacity.
  bool supports_expandable() const override { return true; }
  void* reserve(size_t bytes) override;
  bool map(void* address, size_t bytes) override;
  void unmap(void* address, size_t bytes) override;
  void release(void* base, size_t bytes) override;
  // Completes every event recorded so far on `stream`, or on every stream.
  void complete(const Stream& stream);
  void complete();
  int64_t malloc_calls() const;
  int64_t free_calls() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LOOM_API AllocatorConfig {
  size_t small_size = size_t{1} << 20;  // requests up to this use the small pool
  size_t small_segment = size_t{2} << 20;
  size_t large_segment = size_t{20} << 20;  // segment for large-pool requests under min_large_alloc
  size_t min_large_alloc = size_t{10} << 20;
  size_t large_round = size_t{2} << 20;  // larger requests: their own segment, rounded to this
  size_t max_split_size = SIZE_MAX;      // blocks above this are never split
  double gc_threshold = 0.0;             // 0: no garbage collection; else a fraction of capacity
  bool cache = true;                     // false: every free returns its segment at once
  size_t history_capacity = 100000;      // events kept in the history ring (0: none)
  bool expandable = false;               // Note [expandable segments]
  bool share_pages = false;              // expandable only: Note [expandable segments]
  // A named configuration for tools: "default", "no-cache", "no-split" (max_split_size = 0),
  // "max-split-64m", "gc-0.8", "small-segments" (large_segment = 2 MiB), "expandable"
  // (expandable = true), "expandable-share" (and share_pages = true). ValueError listing them.
  static AllocatorConfig policy(const std::string& name);
  static std::vector<std::string> policies();
  // One line: "policy=NAME" when it equals a named policy, then every field.
  std::string describe() const;
  // ValueError naming the field unless sizes are positive multiples of kRoundBytes, small_size <=
  // small_segment, 0 <= gc_threshold <= 1, max_split_size is unlimited when expandable and
  // share_pages only comes with expandable (the
  // CachingAllocator constructor calls it, and checks that the device supports expandable).
  void validate() const;
};

// current, peak, total allocated (sum of increases) and total freed (sum of decreases).
struct LOOM_API Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
  void add(int64_t n);  // n may be negative
};

struct LOOM_API MemoryStats {
  Stat allocated_bytes;       // bytes handed out (rounded sizes)
  Stat requested_bytes;       // bytes asked for
  Stat reserved_bytes;        // bytes in segments
  Stat active_bytes;          // allocated, plus freed blocks still waiting for their events
  Stat inactive_split_bytes;  // free bytes in segments that also hold allocated blocks
  Stat allocations;           // counts
  Stat segments;
  int64_t num_ooms = 0;
  int64_t num_alloc_retries = 0;
  int64_t num_device_mallocs = 0;
  int64_t num_device_frees = 0;
  int64_t num_device_maps = 0;    // expandable segments: device map calls (runs of pages)
  int64_t num_device_unmaps = 0;  // and unmap calls
  size_t largest_free_block = 0;  // computed by stats()
  // 1 - largest free block / free bytes in segments (reserved - active: freed blocks still waiting
  // for events are not free), 0 when nothing is free.
  double fragmentation() const;
  size_t free_reserved_bytes() const {
    return static_cast<size_t>(reserved_bytes.current - allocated_bytes.current);
  }
};

struct BlockInfo {
  uint64_t address = 0;  // offset-free device address (as handed out)
  size_t size = 0;       // rounded
  size_t requested = 0;  // 0 when free
  bool allocated = false;
  bool pending = false;  // freed, waiting for events on other streams
  StreamId stream = 0;
  std::string context;  // from the context provider (e.g. the trace event of a replay); "" if none
  // The operator (or scope) that allocated it, from current_alloc_context() at allocation
  // (Note [allocation context] in loom/memory/alloc_context.h); "" when unknown.
  std::string op;
};

struct SegmentInfo {
  uint64_t address = 0;
  size_t size = 0;
  bool small_pool = false;
  bool expandable = false;  // Note [expandable segments]
  StreamId stream = 0;
  std::vector<BlockInfo> blocks;  // in address order, covering the segment
  // Expandable segments: the runs of pages within [address, address + size) that are not mapped
  // (in address order; only under free blocks). Reserved bytes are size minus these.
  std::vector<std::pair<uint64_t, size_t>> unmapped;
  size_t mapped_bytes() const {
    size_t n = size;
    for (const auto& run : unmapped) n -= run.second;
    return n;
  }
};

struct TraceEvent {
  // Step: a training step ended here (record_step), so that tools can draw memory over steps.
  enum class Kind : uint8_t { Alloc, Free, SegmentAlloc, SegmentFree, Oom, Step };
  Kind kind = Kind::Alloc;
  uint64_t address = 0;
  size_t size = 0;  // block or segment size (Oom: the request; Step: the number of steps ended)
  StreamId stream = 0;
  int64_t time_ns = 0;  // steady clock
  std::string context;
  std::string op;  // Alloc, Free, Oom: the block's operator (BlockInfo::op)
};
LOOM_API const char* trace_event_kind_name(TraceEvent::Kind k);

// The segments at the moment allocated bytes peaked (a replay takes it with
// ReplayOptions::peak_snapshot): what was live when memory was scarcest.
struct SnapshotPeak {
  int64_t step = -1;         // steps ended before the peak (-1: the trace has no step markers)
  int64_t trace_event = -1;  // the replayed trace event that reached the peak
  int64_t allocated = 0;     // allocated and reserved bytes then
  int64_t reserved = 0;
  std::vector<SegmentInfo> segments;
};

// Segments, blocks and the history, with the stats and the configuration: what `loom mem viz`
// draws. JSON format {"format": "loom-memory-snapshot", "version": 1, "device": {...}, "config":
// "...", "stats": {...}, "segments": [...], "history": [...], "peak": {...} (optional)}; blocks and
// history events carry "op" (optional when read). The JSON conversions are in
// loom/memory/snapshot_json.h, so that this header needs no JSON.
struct LOOM_API Snapshot {
  std::string device;
  size_t capacity = 0;
  std::string config;
  MemoryStats stats;
  std::vector<SegmentInfo> segments;
  std::vector<TraceEvent> history;
  std::optional<SnapshotPeak> peak;
};

// Live (allocated) bytes of segments grouped by BlockInfo::op, largest first ("" for unknown):
// which operators hold the memory, for `loom mem snapshot` and `loom mem viz`.
struct OpUsage {
  std::string op;
  int64_t bytes = 0;      // block sizes
  int64_t requested = 0;  // bytes asked for
  int64_t blocks = 0;
};
LOOM_API std::vector<OpUsage> usage_by_op(const std::vector<SegmentInfo>& segments);

class LOOM_API CachingAllocator {
 public:
  // `device` must outlive the allocator. The destructor returns every segment (blocks still
  // allocated are reported with a warning on stderr, not freed twice).
  CachingAllocator(DeviceMemory& device, AllocatorConfig config = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`. bytes == 0 gives nullptr. OutOfMemoryError
  // (see Note [caching allocator]) when the device cannot provide it; ValueError when bytes exceeds
  // the device's capacity, naming both.
  // Without a stream: the CPU's default stream (a SimulatedDevice's, in tests and tools).
  void* allocate(size_t bytes, const Stream& stream = Stream());
  // Returns a block. ValueError naming the pointer for a pointer this allocator did not hand out
  // (foreign) or one already freed (double free).
  void free(void* p);
  // Marks that `p` is also used by work on `stream`: its reuse after free waits for that work.
  void record_stream(void* p, const Stream& stream);
  // Returns every segment without allocated blocks to the device, but those of kept streams.
  void empty_cache();
  // Note [Kept streams]: while kept (a count per stream), the cached memory of `stream` stays
  // reserved: empty_cache, garbage collection and the retry after a failed device malloc skip its
  // segments and pages. A CUDA graph recorded on a stream of its own keeps it, since the graph
  // addresses the blocks its recording freed as well as those it holds; no other stream's
  // requests take those blocks (free blocks are per stream).
  void keep_stream(const Stream& stream);
  void release_stream(const Stream& stream);

  MemoryStats stats() const;
  void reset_peak_stats();
  Snapshot snapshot() const;
  const AllocatorConfig& config() const;
  DeviceMemory& device() const;

  // The context string stored with each allocation (e.g. the trace event of a replay). Called under
  // the allocator's lock on every allocate; may be empty (the default). Independently, each block
  // keeps current_alloc_context() as its op (Note [allocation context]).
  void set_context_provider(std::function<std::string()> fn);
  // Adds a Step event (`steps` steps have ended) to the history; nothing else changes.
  void record_step(int64_t steps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Observer seam: a CachingAllocator reports each allocation (delta_bytes > 0), free (< 0) and
// change of its reserved bytes alone (0) to the observer set here, with its totals afterwards,
// under its lock. The profiler sets one while a Profile records memory, so this layer needs no
// profiler. One relaxed load and branch per event while none is set.
struct AllocatorEvent {
  const void* ptr = nullptr;
  int64_t delta_bytes = 0;
  StreamId stream = 0;
  int64_t total_allocated = 0;
  int64_t total_reserved = 0;
  Device device = kCPU;  // the allocator's device (its DeviceMemory's)
};
using AllocatorObserver = void (*)(const AllocatorEvent& event);
// nullptr removes it. Thread-safe.
LOOM_API void set_allocator_observer(AllocatorObserver observer);
namespace detail {
extern LOOM_API std::atomic<AllocatorObserver> g_allocator_observer;
}  // namespace detail
inline void notify_allocator_observer(const AllocatorEvent& event) {
  if (AllocatorObserver o = detail::g_allocator_observer.load(std::memory_order_relaxed)) o(event);
}

// An Allocator (memory.h) for loom tensors backed by a CachingAllocator over a backed
// SimulatedDevice or a real device: set_allocator(DeviceType::CPU, &adapter) makes CPU tensors come
// from the caching allocator (used to record real traces of loom workloads). allocate() takes the
// calling thread's current stream of `device`.
class LOOM_API CachingAllocatorAdapter final : public Allocator {
 public:
  CachingAllocatorAdapter(CachingAllocator& a, Device device);
  DataPtr allocate(size_t nbytes) override;
  DataPtr allocate_on(size_t nbytes, const Stream& stream) override;
  DeleterFn raw_deleter() const override;
  // The caching allocator behind memory an adapter handed out, else nullptr.
  static CachingAllocator* allocator_of(const DataPtr& data);

 private:
  CachingAllocator& a_;
  Device device_;
};

}  // namespace loom::memory
