// Allocation traces: the file format (Note [alloc trace format] in loom/memory/alloc_trace.h), its
// validation and the summary replays are checked against. RecordingAllocator is in
// recording_allocator.cpp.
#include "loom/memory/alloc_trace.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "loom/error.h"
#include "loom/file.h"
#include "loom/json.h"

namespace loom::memory {
namespace {

constexpr const char* kFormat = "loom-alloc-trace";
constexpr int64_t kVersion = 2;  // 1: no contexts, no step markers (still read)

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

AllocEvent parse_event(const Json& e, const std::string& what, size_t index, size_t contexts,
                       std::unordered_map<int64_t, size_t>& live,
                       std::unordered_map<int64_t, size_t>& freed_at) {
  if (!e.is_array() || e.size() == 0 || !e.at(size_t{0}).is_string()) {
    bad_event(what, index,
              "expected [\"a\", id, bytes, stream(, context)], [\"f\", id] or [\"s\", steps] but "
              "got ",
              e.dump());
  }
  const std::string& op = e.at(size_t{0}).as_string();
  AllocEvent ev;
  if (op == "a") {
    if (e.size() != 4 && e.size() != 5) {
      bad_event(what, index,
                "an alloc has 4 or 5 fields [\"a\", id, bytes, stream(, context)] but got ",
                e.dump());
    }
    ev.op = AllocEvent::Op::Alloc;
    ev.id = event_int(e, 1, "id", what, index);
    ev.size = event_int(e, 2, "size", what, index);
    ev.stream = event_int(e, 3, "stream", what, index);
    if (e.size() == 5) {
      const int64_t c = event_int(e, 4, "context", what, index);
      if (static_cast<size_t>(c) >= contexts) {
        bad_event(what, index, "context ", c, " is not an index into \"contexts\" (", contexts,
                  " names)");
      }
      ev.context = static_cast<int32_t>(c);
    }
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
  } else if (op == "s") {
    if (e.size() != 2) {
      bad_event(what, index, "a step marker has 2 fields [\"s\", steps] but got ", e.dump());
    }
    ev.op = AllocEvent::Op::Step;
    ev.id = event_int(e, 1, "steps", what, index);
  } else {
    bad_event(what, index, "unknown op \"", op, "\" (expected \"a\", \"f\" or \"s\")");
  }
  return ev;
}

// One event as written: ["a", id, bytes, stream(, context)], ["f", id] or ["s", steps].
std::string event_text(const AllocEvent& e) {
  switch (e.op) {
    case AllocEvent::Op::Alloc:
      return "[\"a\", " + std::to_string(e.id) + ", " + std::to_string(e.size) + ", " +
             std::to_string(e.stream) +
             (e.context >= 0 ? ", " + std::to_string(e.context) : std::string()) + "]";
    case AllocEvent::Op::Free:
      return "[\"f\", " + std::to_string(e.id) + "]";
    case AllocEvent::Op::Step:
      return "[\"s\", " + std::to_string(e.id) + "]";
  }
  return "";
}

}  // namespace

Json trace_to_json(const AllocTrace& trace) {
  Json::Array events;
  events.reserve(trace.events.size());
  for (const AllocEvent& e : trace.events) {
    if (e.op == AllocEvent::Op::Alloc) {
      events.push_back(e.context >= 0 ? Json::array({"a", e.id, e.size, e.stream, e.context})
                                      : Json::array({"a", e.id, e.size, e.stream}));
    } else if (e.op == AllocEvent::Op::Free) {
      events.push_back(Json::array({"f", e.id}));
    } else {
      events.push_back(Json::array({"s", e.id}));
    }
  }
  Json::Array contexts(trace.contexts.begin(), trace.contexts.end());
  return Json::object({{"format", kFormat},
                       {"version", kVersion},
                       {"source", trace.source},
                       {"contexts", Json(std::move(contexts))},
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
  if (!version || !version->is_int() || version->as_int() < 1 || version->as_int() > kVersion) {
    LOOM_THROW(DataError, "[alloc trace] ", what, ": unsupported version ",
               version ? version->dump() : std::string("(missing)"),
               " (this loom reads versions 1 to ", kVersion, ")");
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
  if (const Json* contexts = doc.find("contexts")) {
    if (!contexts->is_array()) {
      LOOM_THROW(DataError, "[alloc trace] ", what, ": \"contexts\" must be an array but got ",
                 contexts->type_name());
    }
    for (size_t i = 0; i < contexts->size(); ++i) {
      const Json& c = contexts->at(i);
      if (!c.is_string()) {
        LOOM_THROW(DataError, "[alloc trace] ", what, ": contexts[", i,
                   "] must be a string but got ", c.type_name());
      }
      trace.contexts.push_back(c.as_string());
    }
  }
  std::unordered_map<int64_t, size_t> live, freed_at;  // id -> event index
  trace.events.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    trace.events.push_back(
        parse_event(events->at(i), what, i, trace.contexts.size(), live, freed_at));
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
    out += event_text(e);
  }
  // The names last: a file cut short then fails in its events, at the offset where it stops.
  out += "\n],\n\"contexts\": [";
  for (size_t i = 0; i < trace.contexts.size(); ++i) {
    out += (i ? ",\n" : "\n") + Json(trace.contexts[i]).dump();
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
  int64_t bytes = 0, rounded = 0, steps = -1, first_marker = -1, steps_at_peak = -1;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const AllocEvent& e = trace.events[i];
    if (e.op == AllocEvent::Op::Step) {
      ++s.steps;
      steps = e.id;
      if (first_marker < 0) first_marker = e.id;
      continue;
    }
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
    if (bytes > s.peak_live_bytes) {
      s.peak_live_bytes = bytes;
      s.peak_live_event = static_cast<int64_t>(i);
      steps_at_peak = steps;
    }
    s.peak_live_rounded_bytes = std::max(s.peak_live_rounded_bytes, rounded);
    s.peak_live_blocks = std::max(s.peak_live_blocks, static_cast<int64_t>(live.size()));
  }
  // Before the first marker, the steps ended are those the first one counts, less the one it ends.
  if (s.steps > 0)
    s.peak_live_step = steps_at_peak >= 0 ? steps_at_peak : std::max<int64_t>(first_marker - 1, 0);
  s.live_bytes_at_end = bytes;
  s.distinct_sizes = static_cast<int64_t>(sizes.size());
  return s;
}

}  // namespace loom::memory
