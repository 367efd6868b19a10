// Reading a Chrome trace back (plain or gzip) into a Trace, for `loom trace` and the tests.
#include <zlib.h>

#include <sys/stat.h>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "loom/error.h"
#include "loom/json.h"
#include "loom/profiler.h"

namespace loom::profiler {
namespace {

// The whole file, inflated when it is gzip (gzread passes other files through as they are).
std::string read_all(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    LOOM_THROW(DataError, "[trace] cannot open ", path, ": ", std::strerror(errno));
  }
  LOOM_CHECK_AS(DataError, S_ISREG(st.st_mode), "[trace] ", path, " is not a regular file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) LOOM_THROW(DataError, "[trace] cannot open ", path, ": ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      LOOM_THROW(DataError, "[trace] ", path, ": corrupt gzip data after ", out.size(), " bytes (",
                 why, ")");
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  // A gzip stream cut short reads as a clean end of file; gzclose / gzerror tell.
  int code = 0;
  const char* msg = gzerror(f, &code);
  std::string why = msg ? msg : "";
  const int closed = gzclose(f);
  if (code != Z_OK || closed != Z_OK) {
    LOOM_THROW(DataError, "[trace] ", path, ": truncated or corrupt gzip data after ", out.size(),
               " bytes", why.empty() ? "" : " (" + why + ")");
  }
  return out;
}

int64_t us_to_ns(double us) {
  return std::llround(us * 1000.0);
}

EventKind kind_from(const std::string& cat, const std::string& name) {
  if (name.rfind("ProfilerStep#", 0) == 0) return EventKind::Step;
  if (cat == "cpu_op" || cat == "operator") return EventKind::Operator;
  if (cat == "autograd") return EventKind::Backward;
  if (cat == "collective") return EventKind::Collective;
  if (cat == "comm_wait") return EventKind::CommWait;
  if (cat == "data") return EventKind::DataStage;
  if (cat == "kernel") return EventKind::Kernel;
  if (cat == "gpu_memcpy") return EventKind::Memcpy;
  if (cat == "gpu_memset") return EventKind::Memset;
  if (cat == "cuda_sync") return EventKind::GpuSync;
  return EventKind::UserScope;
}

struct EventReader {
  const std::string& what;
  size_t index;
  const Json& ev;

  [[noreturn]] void fail(const std::string& why) const {
    std::string name;
    if (const Json* n = ev.find("name"); n && n->is_string()) name = " '" + n->as_string() + "'";
    LOOM_THROW(DataError, "[trace] ", what, ": event #", index, name, " ", why);
  }
  const Json& need(const char* key) const {
    const Json* v = ev.find(key);
    if (!v) fail(std::string("has no '") + key + "'");
    return *v;
  }
  double number(const char* key) const {
    const Json& v = need(key);
    if (!v.is_number())
      fail(std::string("has a non-numeric '") + key + "' (" + v.type_name() + ")");
    const double d = v.as_double();
    if (!std::isfinite(d)) fail(std::string("has a non-finite '") + key + "'");
    return d;
  }
  uint64_t id(const char* key) const {
    const Json& v = need(key);
    if (v.is_int()) return static_cast<uint64_t>(v.as_int());
    if (v.is_number()) return static_cast<uint64_t>(v.as_double());
    if (v.is_string()) return std::hash<std::string>()(v.as_string());  // some tools name threads
    fail(std::string("has a bad '") + key + "' (" + v.type_name() + ")");
  }
  std::string string(const char* key) const {
    const Json& v = need(key);
    if (!v.is_string()) fail(std::string("has a non-string '") + key + "' (" + v.type_name() + ")");
    return v.as_string();
  }
};

void read_complete(const EventReader& r, Trace& t) {
  Event e;
  e.name = r.string("name");
  std::string cat;
  if (const Json* c = r.ev.find("cat"); c && c->is_string()) cat = c->as_string();
  e.kind = kind_from(cat, e.name);
  r.id("pid");
  e.tid = r.id("tid");
  const double ts = r.number("ts"), dur = r.number("dur");
  if (dur < 0) r.fail("has a negative duration");
  e.start_ns = us_to_ns(ts);
  e.end_ns = us_to_ns(ts + dur);
  if (const Json* args = r.ev.find("args"); args && args->is_object()) {
    if (const Json* dims = args->find("Input Dims"); dims && dims->is_array()) {
      for (const Json& d : dims->as_array()) {
        if (!d.is_array()) r.fail("has an 'Input Dims' entry that is not a list");
        std::vector<int64_t> shape;
        for (const Json& x : d.as_array()) {
          if (!x.is_int()) r.fail("has a non-integer size in 'Input Dims'");
          shape.push_back(x.as_int());
        }
        e.input_shapes.push_back(std::move(shape));
      }
    }
    if (const Json* types = args->find("Input type"); types && types->is_array()) {
      for (const Json& x : types->as_array())
        e.input_dtypes.push_back(x.is_string() ? x.as_string() : "?");
    }
    const Json* fwd = args->find("Fwd thread id");
    const Json* seq = args->find("Sequence number");
    if (fwd && seq && fwd->is_int() && seq->is_int()) {
      e.fwd_thread = static_cast<uint64_t>(fwd->as_int());
      e.sequence_nr = static_cast<uint64_t>(seq->as_int());
    }
    if (const Json* b = args->find("bytes"); b && b->is_int()) e.bytes = b->as_int();
    // Device activities: their lane is (device, stream).
    const Json* device = args->find("device");
    const Json* stream = args->find("stream");
    if (device && device->is_int() && stream && stream->is_int()) {
      if (device->as_int() < 0 || device->as_int() > INT32_MAX) r.fail("has a bad 'device'");
      e.device = static_cast<int32_t>(device->as_int());
      e.tid = static_cast<uint64_t>(stream->as_int());
    }
    if (const Json* c = args->find("correlation"); c && c->is_int())
      e.correlation_id = static_cast<uint64_t>(c->as_int());
  }
  t.events.push_back(std::move(e));
}

void read_metadata(const EventReader& r, Trace& t) {
  const std::string name = r.string("name");
  const Json* args = r.ev.find("args");
  const Json* value = args && args->is_object() ? args->find("name") : nullptr;
  if (!value || !value->is_string()) return;
  // Device processes and their streams are named from their events ("GPU N", "stream N").
  if (const Json* pid = r.ev.find("pid");
      pid && pid->is_number() && pid->as_double() >= kGpuPidBase)
    return;
  if (name == "process_name") {
    t.process_name = value->as_string();
    t.pid = static_cast<int64_t>(r.id("pid"));
  } else if (name == "thread_name") {
    t.threads.push_back(ThreadInfo{r.id("tid"), value->as_string()});
  }
}

void read_memory(const EventReader& r, Trace& t) {
  const Json* args = r.ev.find("args");
  if (!args || !args->is_object()) r.fail("has no 'args'");
  auto field = [&](const char* key) -> int64_t {
    const Json* v = args->find(key);
    if (!v || !v->is_number()) r.fail(std::string("has no numeric '") + key + "'");
    return v->is_int() ? v->as_int() : static_cast<int64_t>(v->as_double());
  };
  MemorySample m;
  m.ts_ns = us_to_ns(r.number("ts"));
  if (r.ev.find("tid")) m.tid = r.id("tid");
  m.ptr = static_cast<uint64_t>(field("Addr"));
  m.delta_bytes = field("Bytes");
  m.allocated = field("Total Allocated");
  m.reserved = field("Total Reserved");
  if (const Json* stream = args->find("Stream"); stream && stream->is_int())
    m.stream = stream->as_int();
  if (const Json* dev = args->find("Device"); dev && dev->is_string()) {
    try {
      m.device = Device(dev->as_string());
    } catch (const Error& e) {
      r.fail(std::string("has a bad 'Device': ") + e.what());
    }
  }
  t.memory.push_back(m);
}

}  // namespace

Trace parse_chrome_trace(std::string_view text, const std::string& what) {
  Json doc;
  try {
    doc = Json::parse(text, what);
  } catch (const DataError& e) {
    LOOM_THROW(DataError, "[trace] ", what,
               " is not a complete JSON document (truncated or corrupt?): ", e.what());
  }
  const Json* events = nullptr;
  if (doc.is_array()) {
    events = &doc;
  } else if (doc.is_object()) {
    events = doc.find("traceEvents");
  }
  if (!events || !events->is_array()) {
    LOOM_THROW(DataError, "[trace] ", what,
               " is not a Chrome trace: expected an object with a "
               "\"traceEvents\" array (or an array of events) but got ",
               doc.type_name());
  }
  Trace t;
  if (doc.is_object()) {
    if (const Json* other = doc.find("otherData"); other && other->is_object()) {
      if (const Json* o = other->find("origin_ns"); o && o->is_int()) t.origin_ns = o->as_int();
    }
  }
  const Json::Array& arr = events->as_array();
  for (size_t i = 0; i < arr.size(); ++i) {
    const Json& ev = arr[i];
    if (!ev.is_object()) {
      LOOM_THROW(DataError, "[trace] ", what, ": event #", i, " is a ", ev.type_name(),
                 ", not an object");
    }
    EventReader r{what, i, ev};
    const std::string ph = r.string("ph");
    if (ph == "X") {
      read_complete(r, t);
    } else if (ph == "M") {
      read_metadata(r, t);
    } else if ((ph == "i" || ph == "I") && ev.find("name") && ev.at("name").is_string() &&
               ev.at("name").as_string() == "[memory]") {
      read_memory(r, t);
    }
    // Flows, counters and the rest are derived from the events above; B/E pairs are not loom's.
  }
  std::stable_sort(t.memory.begin(), t.memory.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
  make_nested(t);
  return t;
}

Trace read_chrome_trace(const std::string& path) {
  return parse_chrome_trace(read_all(path), path);
}

}  // namespace loom::profiler
