// Fingerprints, contract checking and the flight recorder.
#include "distributed/group/contract.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "loom/json.h"

namespace loom::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
  }
  return "?";
}

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::Broadcast:
      return "broadcast";
    case CollKind::Allreduce:
      return "allreduce";
    case CollKind::Reduce:
      return "reduce";
    case CollKind::Allgather:
      return "allgather";
    case CollKind::ReduceScatter:
      return "reduce_scatter";
    case CollKind::Alltoall:
      return "alltoall";
    case CollKind::Gather:
      return "gather";
    case CollKind::Scatter:
      return "scatter";
    case CollKind::Barrier:
      return "barrier";
    case CollKind::Send:
      return "send";
    case CollKind::Recv:
      return "recv";
    case CollKind::Split:
      return "split";
  }
  return "?";
}

uint64_t hash_string(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Fingerprint make_fingerprint(const std::string& group, CollKind kind, DType dtype,
                             IntArrayRef sizes, uint64_t count, int root, int reduce_op) {
  return make_fingerprint(hash_string(group), kind, dtype, sizes, count, root, reduce_op);
}

Fingerprint make_fingerprint(uint64_t group_hash, CollKind kind, DType dtype, IntArrayRef sizes,
                             uint64_t count, int root, int reduce_op) {
  Fingerprint f;
  f.group_hash = group_hash;
  f.kind = static_cast<uint8_t>(kind);
  f.dtype = static_cast<int8_t>(dtype);
  f.count = count;
  f.root = root;
  f.reduce_op = static_cast<int8_t>(reduce_op);
  f.ndim = static_cast<uint8_t>(sizes.size());
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizes.size(); ++i) {
    h = (h ^ static_cast<uint64_t>(sizes[i])) * 0x100000001b3ull;
    if (i < 4) f.sizes[i] = sizes[i];
  }
  f.shape_hash = sizes.empty() ? 0 : h;
  return f;
}

namespace {

std::string shape_text(const Fingerprint& f) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < f.ndim && i < 4; ++i) os << (i ? ", " : "") << f.sizes[i];
  if (f.ndim > 4) os << ", ...";
  os << ']';
  return os.str();
}

const char* dtype_text(const Fingerprint& f) {
  return f.dtype < 0 ? "none" : dtype_name(static_cast<DType>(f.dtype));
}

}  // namespace

std::string describe(const Fingerprint& f) {
  std::ostringstream os;
  CollKind k = static_cast<CollKind>(f.kind);
  os << coll_name(k) << '(';
  if (k != CollKind::Barrier) {
    os << dtype_text(f);
    if (f.ndim) os << shape_text(f);
    os << ", count=" << f.count;
    if (f.reduce_op >= 0) os << ", op=" << reduce_op_name(static_cast<ReduceOp>(f.reduce_op));
    if (f.root >= 0) os << ", root=" << f.root;
  }
  os << ')';
  return os.str();
}

std::string contract_mismatch(const std::string& group, const std::vector<Fingerprint>& all) {
  bool same = true;
  for (const auto& f : all) same = same && std::memcmp(&f, &all[0], sizeof(Fingerprint)) == 0;
  if (same) return {};
  // Group the ranks by fingerprint.
  std::vector<std::pair<Fingerprint, std::vector<int>>> groups;
  for (size_t r = 0; r < all.size(); ++r) {
    bool placed = false;
    for (auto& g : groups) {
      if (std::memcmp(&g.first, &all[r], sizeof(Fingerprint)) == 0) {
        g.second.push_back(static_cast<int>(r));
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({all[r], {static_cast<int>(r)}});
  }
  auto ranks_text = [](const std::vector<int>& rs) {
    std::ostringstream os;
    os << (rs.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < rs.size(); ++i) os << (i ? "," : "") << rs[i];
    return os.str();
  };
  std::ostringstream os;
  os << "[dist] collective mismatch in group '" << group << "' at sequence number " << all[0].seq
     << ": ";
  for (size_t i = 0; i < groups.size(); ++i) {
    os << (i ? "; " : "") << ranks_text(groups[i].second) << " called "
       << describe(groups[i].first);
    if (groups[i].first.seq != all[0].seq) os << " as #" << groups[i].first.seq;
  }
  const Fingerprint& a = groups[0].first;
  std::vector<std::string> fields;
  for (size_t i = 1; i < groups.size(); ++i) {
    const Fingerprint& b = groups[i].first;
    auto diff = [&](const char* name, const std::string& x, const std::string& y) {
      fields.push_back(std::string(name) + " (" + ranks_text(groups[0].second) + ": " + x + ", " +
                       ranks_text(groups[i].second) + ": " + y + ")");
    };
    if (a.kind != b.kind)
      diff("op", coll_name(static_cast<CollKind>(a.kind)),
           coll_name(static_cast<CollKind>(b.kind)));
    if (a.seq != b.seq) diff("sequence number", std::to_string(a.seq), std::to_string(b.seq));
    if (a.dtype != b.dtype) diff("dtype", dtype_text(a), dtype_text(b));
    if (a.count != b.count) diff("count", std::to_string(a.count), std::to_string(b.count));
    if (a.shape_hash != b.shape_hash && a.count == b.count)
      diff("shape", shape_text(a), shape_text(b));
    if (a.root != b.root) diff("root", std::to_string(a.root), std::to_string(b.root));
    if (a.reduce_op != b.reduce_op) {
      diff("reduce op",
           a.reduce_op < 0 ? "none" : reduce_op_name(static_cast<ReduceOp>(a.reduce_op)),
           b.reduce_op < 0 ? "none" : reduce_op_name(static_cast<ReduceOp>(b.reduce_op)));
    }
    if (a.group_hash != b.group_hash)
      diff("group", "hash " + std::to_string(a.group_hash), "hash " + std::to_string(b.group_hash));
  }
  os << ". Differing fields: ";
  for (size_t i = 0; i < fields.size(); ++i) os << (i ? "; " : "") << fields[i];
  return os.str();
}

// ---- flight recorder ----

// Note [Flight recorder slots]
// Every collective writes its entry three times (scheduled, started, completed), on the hot path of
// calls that take about a microsecond, while a dump may read the ring from another thread at any
// time. With one mutex, an Entry holding two std::strings reset per call and a wall-clock read per
// state, recording cost ~0.3 us per collective. Now each slot is a seqlock: `seq` is odd while a
// writer holds it (taken with one compare-exchange, so the caller's thread and the worker never
// write a slot at once, even when a ticket `capacity` later reuses the slot of a collective still
// queued), every field is a relaxed atomic, and a reader copies the fields and retries if `seq`
// moved. The algorithm name is a pointer to a literal; error messages, rare, live in a map under a
// mutex that the hot path never takes. Timestamps come from the caller's steady-clock reading
// (wall_us), so an inline collective reads the clock twice (start, end) instead of four times.
struct FlightRecorder::Slot {
  static constexpr size_t kFpWords = sizeof(Fingerprint) / sizeof(uint64_t);
  static_assert(sizeof(Fingerprint) % sizeof(uint64_t) == 0);
  std::atomic<uint32_t> seq{0};           // odd while written
  std::atomic<uint64_t> ticket_plus1{0};  // 0: never used
  std::atomic<uint8_t> state{Scheduled};
  std::atomic<uint64_t> fp[kFpWords] = {};
  std::atomic<int64_t> t_scheduled{0};
  std::atomic<int64_t> t_started{0};
  std::atomic<int64_t> t_completed{0};
  std::atomic<const char*> algo{""};
  std::atomic<const char*> backend{""};
};

namespace {
int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* flight_state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::Scheduled:
      return "scheduled";
    case FlightRecorder::Started:
      return "started";
    case FlightRecorder::Completed:
      return "completed";
    case FlightRecorder::Failed:
      return "failed";
  }
  return "?";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity ? capacity : 1), slots_(new Slot[capacity_]) {
  const int64_t steady_us =
      std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now().time_since_epoch())
          .count();
  wall_minus_steady_us_ = system_now_us() - steady_us;
}

FlightRecorder::~FlightRecorder() = default;

template <class W>
void FlightRecorder::write_slot(uint64_t ticket, bool claim, W&& write) {
  Slot& s = slots_[ticket % capacity_];
  for (int spins = 0;; ++spins) {
    uint32_t v = s.seq.load(std::memory_order_relaxed);
    const uint64_t held = s.ticket_plus1.load(std::memory_order_relaxed);
    // A newer collective owns the slot: this one's entry was overwritten (or, for claim, is older).
    if (claim ? held > ticket + 1 : held != ticket + 1) return;
    if ((v & 1) == 0 && s.seq.compare_exchange_weak(v, v + 1, std::memory_order_acquire)) {
      // Re-check under the lock: the owner may have changed between the load and the exchange.
      const uint64_t now_held = s.ticket_plus1.load(std::memory_order_relaxed);
      if (claim ? now_held <= ticket + 1 : now_held == ticket + 1) {
        std::atomic_thread_fence(std::memory_order_release);  // field stores stay after the odd seq
        write(s);
      }
      s.seq.store(v + 2, std::memory_order_release);
      return;
    }
    if (spins > 64) std::this_thread::yield();  // the writer holding it was preempted
  }
}

uint64_t FlightRecorder::scheduled(const Fingerprint& fp, int64_t t_us) {
  const uint64_t t = next_.fetch_add(1, std::memory_order_relaxed);
  uint64_t words[Slot::kFpWords];
  std::memcpy(words, &fp, sizeof(fp));
  write_slot(t, true, [&](Slot& s) {
    s.ticket_plus1.store(t + 1, std::memory_order_relaxed);
    s.state.store(Scheduled, std::memory_order_relaxed);
    for (size_t i = 0; i < Slot::kFpWords; ++i) s.fp[i].store(words[i], std::memory_order_relaxed);
    s.t_scheduled.store(t_us, std::memory_order_relaxed);
    s.t_started.store(0, std::memory_order_relaxed);
    s.t_completed.store(0, std::memory_order_relaxed);
    s.algo.store("", std::memory_order_relaxed);
    s.backend.store("", std::memory_order_relaxed);
  });
  return t;
}

void FlightRecorder::started(uint64_t ticket, int64_t t_us, const char* algo, const char* backend) {
  write_slot(ticket, false, [&](Slot& s) {
    s.state.store(Started, std::memory_order_relaxed);
    s.t_started.store(t_us, std::memory_order_relaxed);
    s.algo.store(algo ? algo : "", std::memory_order_relaxed);
    s.backend.store(backend ? backend : "", std::memory_order_relaxed);
  });
}

void FlightRecorder::completed(uint64_t ticket, int64_t t_us, const char* algo) {
  write_slot(ticket, false, [&](Slot& s) {
    s.state.store(Completed, std::memory_order_relaxed);
    s.t_completed.store(t_us, std::memory_order_relaxed);
    if (algo) s.algo.store(algo, std::memory_order_relaxed);
  });
}

void FlightRecorder::failed(uint64_t ticket, const std::string& error) {
  {
    std::lock_guard<std::mutex> g(errors_mu_);
    errors_[ticket] = error;
    // Keep only messages of entries still in the ring.
    const uint64_t next = next_.load(std::memory_order_relaxed);
    if (next > capacity_) errors_.erase(errors_.begin(), errors_.lower_bound(next - capacity_));
  }
  const int64_t t_us = now_us();
  write_slot(ticket, false, [&](Slot& s) {
    s.state.store(Failed, std::memory_order_relaxed);
    s.t_completed.store(t_us, std::memory_order_relaxed);
  });
}

std::vector<FlightRecorder::Entry> FlightRecorder::entries() const {
  const uint64_t next = next_.load(std::memory_order_acquire);
  const uint64_t lo = next - std::min<uint64_t>(next, capacity_);
  std::vector<std::pair<uint64_t, Entry>> got;
  for (size_t i = 0; i < capacity_; ++i) {
    const Slot& s = slots_[i];
    Entry e;
    uint64_t ticket_plus1 = 0;
    for (int spins = 0;; ++spins) {
      const uint32_t v = s.seq.load(std::memory_order_acquire);
      if (v & 1) {
        if (spins > 64) std::this_thread::yield();
        continue;
      }
      ticket_plus1 = s.ticket_plus1.load(std::memory_order_relaxed);
      uint64_t words[Slot::kFpWords];
      for (size_t k = 0; k < Slot::kFpWords; ++k) {
        words[k] = s.fp[k].load(std::memory_order_relaxed);
      }
      std::memcpy(&e.fp, words, sizeof(words));
      e.state = static_cast<State>(s.state.load(std::memory_order_relaxed));
      e.t_scheduled_us = s.t_scheduled.load(std::memory_order_relaxed);
      e.t_started_us = s.t_started.load(std::memory_order_relaxed);
      e.t_completed_us = s.t_completed.load(std::memory_order_relaxed);
      const char* algo = s.algo.load(std::memory_order_relaxed);
      const char* backend = s.backend.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) == v) {
        e.algo = algo;
        e.backend = backend;
        break;
      }
    }
    // Skip unused slots and ones whose ticket is outside the window (a scheduled() in progress).
    if (ticket_plus1 == 0 || ticket_plus1 - 1 < lo || ticket_plus1 - 1 >= next) continue;
    got.emplace_back(ticket_plus1 - 1, std::move(e));
  }
  std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Entry> out;
  out.reserve(got.size());
  std::lock_guard<std::mutex> g(errors_mu_);
  for (auto& [ticket, e] : got) {
    if (auto it = errors_.find(ticket); it != errors_.end()) e.error = it->second;
    out.push_back(std::move(e));
  }
  return out;
}

std::string FlightRecorder::json(const std::string& group, int rank, int size) const {
  std::string out = Json::object({{"group", group},
                                  {"rank", rank},
                                  {"size", size},
                                  {"pid", static_cast<int64_t>(::getpid())},
                                  {"written_us", system_now_us()}})
                        .dump() +
                    "\n";
  for (const Entry& e : entries()) {
    Json j = Json::object(
        {{"seq", e.fp.seq},
         {"op", coll_name(static_cast<CollKind>(e.fp.kind))},
         {"desc", describe(e.fp)},
         {"dtype", dtype_text(e.fp)},
         {"count", e.fp.count},
         {"root", e.fp.root},
         {"reduce_op",
          e.fp.reduce_op < 0 ? "" : reduce_op_name(static_cast<ReduceOp>(e.fp.reduce_op))},
         {"state", flight_state_name(e.state)},
         {"algo", e.algo},
         {"backend", e.backend},
         {"t_scheduled_us", e.t_scheduled_us},
         {"t_started_us", e.t_started_us},
         {"t_completed_us", e.t_completed_us}});
    if (!e.error.empty()) j.set("error", e.error);
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace loom::dist
