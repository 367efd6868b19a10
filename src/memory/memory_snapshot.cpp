// Memory statistics and snapshots as JSON (see Snapshot in caching_allocator.h), and back.
#include <algorithm>
#include <map>
#include <string_view>

#include "loom/error.h"
#include "loom/json.h"
#include "loom/memory/snapshot_json.h"
#include "memory/memory_format.h"

namespace loom::memory {
namespace {

constexpr const char* kFormat = "loom-memory-snapshot";
constexpr int64_t kVersion = 1;

constexpr const char* kKindNames[] = {"alloc",        "free", "segment_alloc",
                                      "segment_free", "oom",  "step"};
static_assert(std::size(kKindNames) == static_cast<size_t>(TraceEvent::Kind::Step) + 1,
              "one name per TraceEvent::Kind");

Json stat_to_json(const Stat& s) {
  return Json::object(
      {{"current", s.current}, {"peak", s.peak}, {"allocated", s.allocated}, {"freed", s.freed}});
}

int64_t read_int(const Json& obj, std::string_view key) {
  return obj.at(key).as_int();
}

// A size or address: an integer that is not negative.
uint64_t read_unsigned(const Json& obj, std::string_view key) {
  int64_t v = obj.at(key).as_int();
  if (v < 0) LOOM_THROW(DataError, "'", key, "' must not be negative but is ", v);
  return static_cast<uint64_t>(v);
}

Stat stat_from_json(const Json& j) {
  Stat s;
  s.current = read_int(j, "current");
  s.peak = read_int(j, "peak");
  s.allocated = read_int(j, "allocated");
  s.freed = read_int(j, "freed");
  return s;
}

MemoryStats stats_from_json(const Json& j) {
  MemoryStats s;
  for (const detail::StatField& f : detail::kStatFields) {
    try {
      s.*(f.member) = stat_from_json(j.at(f.name));
    } catch (const DataError& e) {
      LOOM_THROW(DataError, f.name, ": ", e.what());
    }
  }
  s.num_ooms = read_int(j, "num_ooms");
  s.num_alloc_retries = read_int(j, "num_alloc_retries");
  s.num_device_mallocs = read_int(j, "num_device_mallocs");
  s.num_device_frees = read_int(j, "num_device_frees");
  // Snapshots written before the page counters existed have no such fields.
  if (j.find("num_device_maps") != nullptr) s.num_device_maps = read_int(j, "num_device_maps");
  if (j.find("num_device_unmaps") != nullptr)
    s.num_device_unmaps = read_int(j, "num_device_unmaps");
  s.largest_free_block = read_unsigned(j, "largest_free_block");
  return s;
}

TraceEvent::Kind kind_from_name(const std::string& name) {
  for (size_t i = 0; i < std::size(kKindNames); ++i) {
    if (name == kKindNames[i]) return static_cast<TraceEvent::Kind>(i);
  }
  LOOM_THROW(DataError, "unknown event kind '", name,
             "' (expected alloc, free, segment_alloc, segment_free, oom or step)");
}

SegmentInfo segment_from_json(const Json& j) {
  SegmentInfo seg;
  seg.address = read_unsigned(j, "address");
  seg.size = read_unsigned(j, "size");
  seg.small_pool = j.at("small_pool").as_bool();
  // Snapshots written before expandable segments existed have no such field.
  if (const Json* e = j.find("expandable")) seg.expandable = e->as_bool();
  seg.stream = read_int(j, "stream");
  const Json::Array& blocks = j.at("blocks").as_array();
  uint64_t expected = seg.address;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Json& b = blocks[i];
    BlockInfo info;
    try {
      info.address = read_unsigned(b, "address");
      info.size = read_unsigned(b, "size");
      info.requested = read_unsigned(b, "requested");
      info.allocated = b.at("allocated").as_bool();
      info.pending = b.at("pending").as_bool();
      info.stream = read_int(b, "stream");
      info.context = b.at("context").as_string();
      // Snapshots written before blocks named their operator have no "op".
      if (const Json* op = b.find("op")) info.op = op->as_string();
    } catch (const DataError& e) {
      LOOM_THROW(DataError, "block ", i, ": ", e.what());
    }
    if (info.address != expected || info.size == 0) {
      LOOM_THROW(DataError, "block ", i, " at ", info.address, " (", info.size,
                 " bytes) does not follow the previous block, which ends at ", expected);
    }
    expected += info.size;
    seg.blocks.push_back(std::move(info));
  }
  if (expected != seg.address + seg.size) {
    LOOM_THROW(DataError, "its blocks cover ", expected - seg.address, " of its ", seg.size,
               " bytes");
  }
  if (const Json* runs = j.find("unmapped")) {
    // Note [expandable pages]: ordered runs inside the segment, none under a block in use.
    uint64_t after = seg.address;
    size_t block = 0;
    const Json::Array& arr = runs->as_array();
    for (size_t i = 0; i < arr.size(); ++i) {
      const Json::Array& run = arr[i].as_array();
      if (run.size() != 2 || run[0].as_int() < 0 || run[1].as_int() <= 0) {
        LOOM_THROW(DataError, "unmapped run ", i, " is not [address, size > 0]");
      }
      const uint64_t lo = static_cast<uint64_t>(run[0].as_int());
      const uint64_t hi = lo + static_cast<uint64_t>(run[1].as_int());
      if (!seg.expandable || lo < after || hi > seg.address + seg.size) {
        LOOM_THROW(
            DataError, "unmapped run ", i, " [", lo, ", ", hi,
            ") is out of order, outside the segment, or in a segment that is not expandable");
      }
      for (; block < seg.blocks.size(); ++block) {
        const BlockInfo& b = seg.blocks[block];
        if (b.address + b.size <= lo) continue;
        if (b.address >= hi) break;
        if (b.allocated || b.pending) {
          LOOM_THROW(DataError, "unmapped run ", i, " [", lo, ", ", hi, ") lies under block ",
                     block, ", which is in use");
        }
        if (b.address + b.size > hi) break;
      }
      seg.unmapped.emplace_back(lo, static_cast<size_t>(hi - lo));
      after = hi;
    }
  }
  return seg;
}

TraceEvent event_from_json(const Json& j) {
  TraceEvent e;
  e.kind = kind_from_name(j.at("kind").as_string());
  e.address = read_unsigned(j, "address");
  e.size = read_unsigned(j, "size");
  e.stream = read_int(j, "stream");
  e.time_ns = read_int(j, "time_ns");
  e.context = j.at("context").as_string();
  if (const Json* op = j.find("op")) e.op = op->as_string();
  return e;
}

SnapshotPeak peak_from_json(const Json& j) {
  SnapshotPeak p;
  p.step = read_int(j, "step");
  p.trace_event = read_int(j, "trace_event");
  p.allocated = read_int(j, "allocated");
  p.reserved = read_int(j, "reserved");
  const Json::Array& segments = j.at("segments").as_array();
  for (size_t i = 0; i < segments.size(); ++i) {
    try {
      p.segments.push_back(segment_from_json(segments[i]));
    } catch (const DataError& e) {
      LOOM_THROW(DataError, "segment ", i, ": ", e.what());
    }
  }
  return p;
}

Snapshot parse_snapshot(const Json& j) {
  if (!j.is_object()) LOOM_THROW(DataError, "expected a JSON object but got ", j.type_name());
  const Json* format = j.find("format");
  if (format == nullptr || !format->is_string() || format->as_string() != kFormat) {
    LOOM_THROW(DataError, "not a memory snapshot: \"format\" must be \"", kFormat, "\"");
  }
  int64_t version = read_int(j, "version");
  if (version != kVersion) {
    LOOM_THROW(DataError, "unsupported version ", version, " (this loom reads version ", kVersion,
               ")");
  }
  Snapshot s;
  const Json& device = j.at("device");
  s.device = device.at("name").as_string();
  s.capacity = read_unsigned(device, "capacity");
  s.config = j.at("config").as_string();
  try {
    s.stats = stats_from_json(j.at("stats"));
  } catch (const DataError& e) {
    LOOM_THROW(DataError, "stats: ", e.what());
  }
  const Json::Array& segments = j.at("segments").as_array();
  s.segments.reserve(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    try {
      s.segments.push_back(segment_from_json(segments[i]));
    } catch (const DataError& e) {
      LOOM_THROW(DataError, "segment ", i, ": ", e.what());
    }
  }
  const Json::Array& history = j.at("history").as_array();
  s.history.reserve(history.size());
  for (size_t i = 0; i < history.size(); ++i) {
    try {
      s.history.push_back(event_from_json(history[i]));
    } catch (const DataError& e) {
      LOOM_THROW(DataError, "history event ", i, ": ", e.what());
    }
  }
  if (const Json* peak = j.find("peak")) {
    try {
      s.peak = peak_from_json(*peak);
    } catch (const DataError& e) {
      LOOM_THROW(DataError, "peak: ", e.what());
    }
  }
  return s;
}

}  // namespace

const char* trace_event_kind_name(TraceEvent::Kind k) {
  size_t i = static_cast<size_t>(k);
  return i < std::size(kKindNames) ? kKindNames[i] : "unknown";
}

Json to_json(const MemoryStats& stats) {
  Json j = Json::object();
  for (const detail::StatField& f : detail::kStatFields)
    j.set(f.name, stat_to_json(stats.*(f.member)));
  j.set("num_ooms", stats.num_ooms);
  j.set("num_alloc_retries", stats.num_alloc_retries);
  j.set("num_device_mallocs", stats.num_device_mallocs);
  j.set("num_device_frees", stats.num_device_frees);
  j.set("num_device_maps", stats.num_device_maps);
  j.set("num_device_unmaps", stats.num_device_unmaps);
  j.set("largest_free_block", stats.largest_free_block);
  j.set("fragmentation", stats.fragmentation());  // derived; not read back
  return j;
}

namespace {
Json segments_to_json(const std::vector<SegmentInfo>& segments) {
  Json segs = Json::array();
  for (const SegmentInfo& seg : segments) {
    Json blocks = Json::array();
    for (const BlockInfo& b : seg.blocks) {
      blocks.push_back(Json::object({{"address", b.address},
                                     {"size", b.size},
                                     {"requested", b.requested},
                                     {"allocated", b.allocated},
                                     {"pending", b.pending},
                                     {"stream", b.stream},
                                     {"context", b.context},
                                     {"op", b.op}}));
    }
    Json sj = Json::object({{"address", seg.address},
                            {"size", seg.size},
                            {"small_pool", seg.small_pool},
                            {"expandable", seg.expandable},
                            {"stream", seg.stream}});
    sj.set("blocks", std::move(blocks));  // set, not the initializer list: that would copy
    if (!seg.unmapped.empty()) {
      Json runs = Json::array();
      for (const auto& [address, size] : seg.unmapped) {
        runs.push_back(Json::array({Json(address), Json(size)}));
      }
      sj.set("unmapped", std::move(runs));
    }
    segs.push_back(std::move(sj));
  }
  return segs;
}
}  // namespace

Json to_json(const Snapshot& snapshot) {
  const Snapshot& s = snapshot;
  Json segs = segments_to_json(s.segments);
  Json events = Json::array();
  for (const TraceEvent& e : s.history) {
    events.push_back(Json::object({{"kind", trace_event_kind_name(e.kind)},
                                   {"address", e.address},
                                   {"size", e.size},
                                   {"stream", e.stream},
                                   {"time_ns", e.time_ns},
                                   {"context", e.context},
                                   {"op", e.op}}));
  }
  Json j = Json::object({{"format", kFormat},
                         {"version", kVersion},
                         {"device", Json::object({{"name", s.device}, {"capacity", s.capacity}})},
                         {"config", s.config},
                         {"stats", to_json(s.stats)}});
  j.set("segments", std::move(segs));
  j.set("history", std::move(events));
  if (s.peak) {
    Json p = Json::object({{"step", s.peak->step},
                           {"trace_event", s.peak->trace_event},
                           {"allocated", s.peak->allocated},
                           {"reserved", s.peak->reserved}});
    p.set("segments", segments_to_json(s.peak->segments));
    j.set("peak", std::move(p));
  }
  return j;
}

std::vector<OpUsage> usage_by_op(const std::vector<SegmentInfo>& segments) {
  std::map<std::string, OpUsage> by_op;
  for (const SegmentInfo& seg : segments) {
    for (const BlockInfo& b : seg.blocks) {
      if (!b.allocated) continue;
      OpUsage& u = by_op[b.op];
      u.op = b.op;
      u.bytes += static_cast<int64_t>(b.size);
      u.requested += static_cast<int64_t>(b.requested);
      ++u.blocks;
    }
  }
  std::vector<OpUsage> out;
  out.reserve(by_op.size());
  for (auto& [op, u] : by_op) out.push_back(std::move(u));
  std::stable_sort(out.begin(), out.end(),
                   [](const OpUsage& a, const OpUsage& b) { return a.bytes > b.bytes; });
  return out;
}

Snapshot snapshot_from_json(const Json& j, const std::string& source) {
  try {
    return parse_snapshot(j);
  } catch (const DataError& e) {
    LOOM_THROW(DataError, "[memory snapshot] ", source, ": ", e.what());
  }
}

}  // namespace loom::memory
