// Allocation traces: the file format (Note [alloc trace format] in loom/memory/alloc_trace.h), its
// validation, the summary replays are checked against, and RecordingAllocator.
#include "loom/memory/alloc_trace.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "loom/error.h"
#include "loom/io.h"

namespace loom::memory {
namespace {

constexpr const char* kFormat = "loom-alloc-trace";
constexpr int64_t kVersion = 1;

int64_t round_up(int64_t n) {
  const auto r = static_cast<int64_t>(kRoundBytes);
  return (n + r - 1) / r * r;
}

// Throws the DataError for event `index` of `what`.
template <class... Args>
[[noreturn]] void bad_event(const std::string& what, size_t index, const Args&... args) {
  LOOM_THROW(DataError, "[alloc trace] ", what, ": event ", index, ": ", args...);
}

int64_t event_int(const Json& e, size_t k, const char* field, const std::string& what,
                  size_t index) {
  const Json& v = e.at(k);
  if (!v.is_int()) {
    bad_event(what, index, field, " must be an integer but got ", v.type_name(), " ", v.dump());
  }
  const int64_t x = v.as_int();
  if (x < 0) bad_event(what, index, "negative ", field, " ", x);
  return x;
}

AllocEvent parse_event(const Json& e, const std::string& what, size_t index,
                       std::unordered_map<int64_t, size_t>& live,
                       std::unordered_map<int64_t, size_t>& freed_at) {
  if (!e.is_array() || e.size() == 0 || !e.at(size_t{0}).is_string()) {
    bad_event(what, index, "expected [\"a\", id, bytes, stream] or [\"f\", id] but got ", e.dump());
  }
  const std::string& op = e.at(size_t{0}).as_string();
  AllocEvent ev;
  if (op == "a") {
    if (e.size() != 4)
      bad_event(what, index, "an alloc has 4 fields [\"a\", id, bytes, stream] but got ", e.dump());
    ev.op = AllocEvent::Op::Alloc;
    ev.id = event_int(e, 1, "id", what, index);
    ev.size = event_int(e, 2, "size", what, index);
    ev.stream = event_int(e, 3, "stream", what, index);
    if (auto it = live.find(ev.id); it != live.end()) {
      bad_event(what, index, "alloc of id ", ev.id, " which is still live (allocated at event ",
                it->second, ")");
    }
    live.emplace(ev.id, index);
    freed_at.erase(ev.id);
  } else if (op == "f") {
    if (e.size() != 2) bad_event(what, index, "a free has 2 fields [\"f\", id] but got ", e.dump());
    ev.op = AllocEvent::Op::Free;
    ev.id = event_int(e, 1, "id", what, index);
    if (live.erase(ev.id) == 0) {
      if (auto it = freed_at.find(ev.id); it != freed_at.end()) {
        bad_event(what, index, "free of id ", ev.id, " which was already freed at event ",
                  it->second);
      }
      bad_event(what, index, "free of id ", ev.id, " which was never allocated");
    }
    freed_at[ev.id] = index;
  } else {
    bad_event(what, index, "unknown op \"", op, "\" (expected \"a\" or \"f\")");
  }
  return ev;
}

}  // namespace

Json trace_to_json(const AllocTrace& trace) {
  Json::Array events;
  events.reserve(trace.events.size());
  for (const AllocEvent& e : trace.events) {
    if (e.op == AllocEvent::Op::Alloc) {
      events.push_back(Json::array({"a", e.id, e.size, e.stream}));
    } else {
      events.push_back(Json::array({"f", e.id}));
    }
  }
  return Json::object({{"format", kFormat},
                       {"version", kVersion},
                       {"source", trace.source},
                       {"events", Json(std::move(events))}});
}

AllocTrace trace_from_json(const Json& doc, const std::string& what) {
  if (!doc.is_object()) {
    LOOM_THROW(DataError, "[alloc trace] ", what, ": expected a JSON object but got ",
               doc.type_name());
  }
  const Json* format = doc.find("format");
  if (!format || !format->is_string() || format->as_string() != kFormat) {
    LOOM_THROW(DataError, "[alloc trace] ", what, ": not a loom allocation trace (format ",
               format ? format->dump() : std::string("missing"), ", expected \"", kFormat, "\")");
  }
  const Json* version = doc.find("version");
  if (!version || !version->is_int() || version->as_int() != kVersion) {
    LOOM_THROW(DataError, "[alloc trace] ", what, ": unsupported version ",
               version ? version->dump() : std::string("(missing)"), " (this loom reads version ",
               kVersion, ")");
  }
  AllocTrace trace;
  if (const Json* source = doc.find("source")) {
    if (!source->is_string()) {
      LOOM_THROW(DataError, "[alloc trace] ", what, ": \"source\" must be a string but got ",
                 source->type_name());
    }
    trace.source = source->as_string();
  }
  const Json* events = doc.find("events");
  if (!events || !events->is_array()) {
    LOOM_THROW(DataError, "[alloc trace] ", what, ": \"events\" must be an array but got ",
               events ? events->type_name() : "nothing");
  }
  std::unordered_map<int64_t, size_t> live, freed_at;  // id -> event index
  trace.events.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    trace.events.push_back(parse_event(events->at(i), what, i, live, freed_at));
  }
  return trace;
}

void write_trace(const std::string& path, const AllocTrace& trace) {
  // One event per line: traces stay readable and diffable.
  std::string out = "{\"format\": \"";
  out += kFormat;
  out += "\", \"version\": " + std::to_string(kVersion) +
         ", \"source\": " + Json(trace.source).dump() + ", \"events\": [";
  bool first = true;
  for (const AllocEvent& e : trace.events) {
    out += first ? "\n" : ",\n";
    first = false;
    if (e.op == AllocEvent::Op::Alloc) {
      out += "[\"a\", " + std::to_string(e.id) + ", " + std::to_string(e.size) + ", " +
             std::to_string(e.stream) + "]";
    } else {
      out += "[\"f\", " + std::to_string(e.id) + "]";
    }
  }
  out += "\n]}\n";
  io::atomic_write_file(path, out);
}

AllocTrace read_trace(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const DataError& e) {
    LOOM_THROW(DataError, "[alloc trace] ", e.what());
  }
  Json doc;
  try {
    doc = Json::parse(text, path);
  } catch (const DataError& e) {
    std::string_view msg = e.what();
    if (msg.rfind("[json] ", 0) == 0) msg.remove_prefix(7);
    LOOM_THROW(DataError, "[alloc trace] ", msg, " (file of ", text.size(), " bytes",
               text.empty() ? ", empty" : "", ")");
  }
  return trace_from_json(doc, path);
}

TraceSummary summarize_trace(const AllocTrace& trace) {
  TraceSummary s;
  std::unordered_map<int64_t, int64_t> live;  // id -> requested bytes
  std::unordered_set<int64_t> sizes;
  int64_t bytes = 0, rounded = 0;
  for (const AllocEvent& e : trace.events) {
    if (e.op == AllocEvent::Op::Alloc) {
      ++s.allocs;
      live[e.id] = e.size;
      bytes += e.size;
      rounded += round_up(e.size);
      if (e.size > 0) {
        s.min_size = s.min_size == 0 ? e.size : std::min(s.min_size, e.size);
        s.max_size = std::max(s.max_size, e.size);
        sizes.insert(e.size);
      }
    } else {
      ++s.frees;
      auto it = live.find(e.id);
      LOOM_INTERNAL_ASSERT(it != live.end(), "summarize_trace: free of unknown id ", e.id);
      bytes -= it->second;
      rounded -= round_up(it->second);
      live.erase(it);
    }
    s.peak_live_bytes = std::max(s.peak_live_bytes, bytes);
    s.peak_live_rounded_bytes = std::max(s.peak_live_rounded_bytes, rounded);
    s.peak_live_blocks = std::max(s.peak_live_blocks, static_cast<int64_t>(live.size()));
  }
  s.live_bytes_at_end = bytes;
  s.distinct_sizes = static_cast<int64_t>(sizes.size());
  return s;
}

// ---- RecordingAllocator ----

// Owns the inner allocation: deleting the context frees it through the inner deleter.
struct RecordingAllocator::Context {
  RecordingAllocator* self;
  int64_t id;
  DataPtr inner;
};

RecordingAllocator::RecordingAllocator(Allocator& inner, std::string source)
    : inner_(inner), source_(std::move(source)) {}

DataPtr RecordingAllocator::allocate(size_t nbytes) {
  DataPtr inner = inner_.allocate(nbytes);  // OutOfMemoryError propagates: nothing logged
  void* data = inner.get();
  const Device device = inner.device();
  auto ctx = std::make_unique<Context>(Context{this, 0, std::move(inner)});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ids_.empty()) {
      ctx->id = next_id_++;
    } else {
      ctx->id = free_ids_.back();
      free_ids_.pop_back();
    }
    events_.push_back(AllocEvent{AllocEvent::Op::Alloc, ctx->id, static_cast<int64_t>(nbytes), 0});
  }
  return DataPtr(data, ctx.release(), &RecordingAllocator::deleter, device);
}

void RecordingAllocator::deleter(void* raw) {
  auto* ctx = static_cast<Context*>(raw);
  ctx->self->log_free(ctx->id);
  delete ctx;
}

void RecordingAllocator::log_free(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(AllocEvent{AllocEvent::Op::Free, id, 0, 0});
  free_ids_.push_back(id);
}

AllocTrace RecordingAllocator::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return AllocTrace{source_, events_};
}

}  // namespace loom::memory
