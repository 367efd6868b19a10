// Fingerprints, contract checking and the flight recorder.
#include "dist/contract.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <sstream>

#include "loom/json.h"

namespace loom::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "sum";
    case ReduceOp::PROD: return "prod";
    case ReduceOp::MIN: return "min";
    case ReduceOp::MAX: return "max";
    case ReduceOp::AVG: return "avg";
  }
  return "?";
}

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kAllreduce: return "allreduce";
    case CollKind::kReduce: return "reduce";
    case CollKind::kAllgather: return "allgather";
    case CollKind::kReduceScatter: return "reduce_scatter";
    case CollKind::kAlltoall: return "alltoall";
    case CollKind::kGather: return "gather";
    case CollKind::kScatter: return "scatter";
    case CollKind::kBarrier: return "barrier";
    case CollKind::kSend: return "send";
    case CollKind::kRecv: return "recv";
    case CollKind::kSplit: return "split";
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

Fingerprint make_fingerprint(const std::string& group, CollKind kind, DType dtype, IntArrayRef sizes,
                             uint64_t count, int root, int reduce_op) {
  Fingerprint f;
  f.group_hash = hash_string(group);
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
  if (k != CollKind::kBarrier) {
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
  os << "[dist] collective mismatch in group '" << group << "' at sequence number " << all[0].seq << ": ";
  for (size_t i = 0; i < groups.size(); ++i) {
    os << (i ? "; " : "") << ranks_text(groups[i].second) << " called " << describe(groups[i].first);
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
    if (a.kind != b.kind) diff("op", coll_name(static_cast<CollKind>(a.kind)), coll_name(static_cast<CollKind>(b.kind)));
    if (a.seq != b.seq) diff("sequence number", std::to_string(a.seq), std::to_string(b.seq));
    if (a.dtype != b.dtype) diff("dtype", dtype_text(a), dtype_text(b));
    if (a.count != b.count) diff("count", std::to_string(a.count), std::to_string(b.count));
    if (a.shape_hash != b.shape_hash && a.count == b.count) diff("shape", shape_text(a), shape_text(b));
    if (a.root != b.root) diff("root", std::to_string(a.root), std::to_string(b.root));
    if (a.reduce_op != b.reduce_op) {
      diff("reduce op", a.reduce_op < 0 ? "none" : reduce_op_name(static_cast<ReduceOp>(a.reduce_op)),
           b.reduce_op < 0 ? "none" : reduce_op_name(static_cast<ReduceOp>(b.reduce_op)));
    }
    if (a.group_hash != b.group_hash) diff("group", "hash " + std::to_string(a.group_hash), "hash " + std::to_string(b.group_hash));
  }
  os << ". Differing fields: ";
  for (size_t i = 0; i < fields.size(); ++i) os << (i ? "; " : "") << fields[i];
  return os.str();
}

// ---- flight recorder ----

namespace {
int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* flight_state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::kScheduled: return "scheduled";
    case FlightRecorder::kStarted: return "started";
    case FlightRecorder::kCompleted: return "completed";
    case FlightRecorder::kFailed: return "failed";
  }
  return "?";
}

uint64_t FlightRecorder::scheduled(const Fingerprint& fp) {
  std::lock_guard<std::mutex> g(mu_);
  if (ring_.empty()) ring_.resize(capacity_);
  uint64_t t = next_++;
  Entry& e = ring_[t % ring_.size()];
  e = Entry{};
  e.fp = fp;
  e.t_scheduled_us = now_us();
  return t;
}

FlightRecorder::Entry* FlightRecorder::find(uint64_t ticket) {
  if (ticket + ring_.size() < next_) return nullptr;  // overwritten
  return &ring_[ticket % ring_.size()];
}

void FlightRecorder::started(uint64_t ticket, const std::string& algo) {
  std::lock_guard<std::mutex> g(mu_);
  if (Entry* e = find(ticket)) {
    e->state = kStarted;
    e->t_started_us = now_us();
    e->algo = algo;
  }
}

void FlightRecorder::completed(uint64_t ticket) {
  std::lock_guard<std::mutex> g(mu_);
  if (Entry* e = find(ticket)) {
    e->state = kCompleted;
    e->t_completed_us = now_us();
  }
}

void FlightRecorder::failed(uint64_t ticket, const std::string& error) {
  std::lock_guard<std::mutex> g(mu_);
  if (Entry* e = find(ticket)) {
    e->state = kFailed;
    e->t_completed_us = now_us();
    e->error = error;
  }
}

std::vector<FlightRecorder::Entry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Entry> out;
  if (ring_.empty()) return out;
  uint64_t n = std::min<uint64_t>(next_, ring_.size());
  for (uint64_t t = next_ - n; t < next_; ++t) out.push_back(ring_[t % ring_.size()]);
  return out;
}

std::string FlightRecorder::json(const std::string& group, int rank, int size) const {
  std::string out = Json::object({{"group", group},
                                  {"rank", rank},
                                  {"size", size},
                                  {"pid", static_cast<int64_t>(::getpid())},
                                  {"written_us", now_us()}})
                        .dump() +
                    "\n";
  for (const Entry& e : entries()) {
    Json j = Json::object({{"seq", e.fp.seq},
                           {"op", coll_name(static_cast<CollKind>(e.fp.kind))},
                           {"desc", describe(e.fp)},
                           {"dtype", dtype_text(e.fp)},
                           {"count", e.fp.count},
                           {"root", e.fp.root},
                           {"reduce_op", e.fp.reduce_op < 0 ? "" : reduce_op_name(static_cast<ReduceOp>(e.fp.reduce_op))},
                           {"state", flight_state_name(e.state)},
                           {"algo", e.algo},
                           {"t_scheduled_us", e.t_scheduled_us},
                           {"t_started_us", e.t_started_us},
                           {"t_completed_us", e.t_completed_us}});
    if (!e.error.empty()) j.set("error", e.error);
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace loom::dist
