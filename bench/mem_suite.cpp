// `loom bench mem`: the caching allocator's fast path and its memory overhead on a real workload.
// No anchor: glibc's malloc/free of the same size is measured beside the cached pair for scale. The
// peak ratio's target (<= 1.1, on the wide trace with expandable-share) bounds loom's own figure.
//   alloc_free_pair_4k     ns for allocate(4096) + free of a cached block (SimulatedDevice);
//                          _nohist: the same with the history ring off
//   glibc_malloc_free_4k   ns for malloc(4096) + free
//   replay_ns_per_event    the allocator's time per event replaying the training trace
//   replay_peak_ratio      peak reserved / peak allocated of the default policy on the training
//                          trace of `loom mem record` (Note [training trace] in alloc_trace.h)
//   replay_peak_ratio_expandable        the same for the "expandable" policy
//   replay_peak_ratio_expandable_share  and for "expandable-share" (Note [expandable segments])
//   replay_h4096_peak_ratio*  the same three on the trace of `loom mem record --hidden 4096`
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench.h"
#include "loom/memory/alloc_trace.h"
#include "loom/memory/caching_allocator.h"
#include "training_trace.h"

namespace loom::bench {
namespace {

// Keeps the compiler from removing a malloc/free pair whose pointer is never used.
inline void escape(void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

std::vector<Measure> setup_mem(const SuiteOptions& opt) {
  const int iters = opt.quick ? 100000 : 1000000;
  const int reps = opt.quick ? 2 : 5;
  std::vector<Measure> m;
  // With the default history ring (two clock reads per pair) and without it.
  for (bool history : {true, false}) {
    m.push_back({history ? "alloc_free_pair_4k" : "alloc_free_pair_4k_nohist", "ns/pair", true, 0,
                 1, [iters, reps, history] {
                   memory::SimulatedDevice device(size_t{1} << 30);
                   memory::AllocatorConfig config;
                   if (!history) config.history_capacity = 0;
                   memory::CachingAllocator a(device, config);
                   a.free(a.allocate(4096));  // the segment is cached from here on
                   const double t = median_seconds(
                       [&] {
                         for (int i = 0; i < iters; ++i) {
                           void* p = a.allocate(4096);
                           escape(p);
                           a.free(p);
                         }
                       },
                       reps);
                   return t / iters * 1e9;
                 }});
  }
  m.push_back({"glibc_malloc_free_4k", "ns/pair", true, 0, 1, [iters, reps] {
                 const double t = median_seconds(
                     [&] {
                       for (int i = 0; i < iters; ++i) {
                         void* p = std::malloc(4096);
                         escape(p);
                         std::free(p);
                       }
                     },
                     reps);
                 return t / iters * 1e9;
               }});
  // The same trace as `loom mem record` with its defaults (a few steps when quick).
  memory::TrainingTraceOptions to;
  if (opt.quick) to.steps = 6;
  auto trace = std::make_shared<memory::AllocTrace>(memory::record_training_trace(to));
  m.push_back({"replay_ns_per_event", "ns/event", true, 0, 1, [trace, reps] {
                 memory::ReplayOptions o;
                 o.track_peak = false;
                 double best = 0;
                 for (int r = 0; r < reps; ++r) {
                   const double ns = memory::replay_trace(*trace, o).ns_per_event();
                   best = r == 0 ? ns : std::min(best, ns);
                 }
                 return best;
               }});
  // The same workload four times wider (about 335 MiB at its peak, where the 2 MiB pages of
  // expandable segments are a smaller part of each block).
  memory::TrainingTraceOptions wide = to;
  wide.hidden = 4096;
  auto wide_trace = std::make_shared<memory::AllocTrace>(memory::record_training_trace(wide));
  for (const auto& [prefix, t] :
       {std::make_pair(std::string("replay_peak_ratio"), trace),
        std::make_pair(std::string("replay_h4096_peak_ratio"), wide_trace)}) {
    for (const char* policy : {"default", "expandable", "expandable-share"}) {
      std::string name = prefix;
      if (std::string(policy) != "default") {
        name += '_';
        name += policy;
      }
      for (char& c : name) c = c == '-' ? '_' : c;
      m.push_back({name, "rsv/alloc", true, 0, 1, [t, policy] {
                     memory::ReplayOptions o;
                     o.policy = policy;
                     o.track_peak = false;
                     return memory::replay_trace(*t, o).peak_ratio();
                   }});
      if (name == "replay_h4096_peak_ratio_expandable_share") m.back().value_target = 1.1;
    }
  }
  return m;
}

const RegisterSuite kMem(Suite{
    "mem",
    "caching allocator: cached 4 KiB alloc+free (glibc for scale), replay of the training traces "
    "of hidden width 1024 and 4096 (target: peak reserved <= 1.1 x peak allocated)",
    "", "", setup_mem, nullptr,
    "this suite has none: glibc_malloc_free_4k is measured beside loom's rows for scale"});

}  // namespace
}  // namespace loom::bench
