// Chrome trace export (the JSON Object Format that chrome://tracing and ui.perfetto.dev load).
#include <zlib.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "loom/error.h"
#include "loom/profiler.h"

namespace loom::profiler {
namespace {

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

// Nanoseconds as microseconds with three decimals, exactly ("12.345").
void append_us(std::string& out, int64_t ns) {
  char buf[32];
  const bool neg = ns < 0;
  const uint64_t a = neg ? static_cast<uint64_t>(-(ns + 1)) + 1 : static_cast<uint64_t>(ns);
  std::snprintf(buf, sizeof(buf), "%s%" PRIu64 ".%03" PRIu64, neg ? "-" : "", a / 1000, a % 1000);
  out += buf;
}

void append_int(std::string& out, int64_t v) {
  out += std::to_string(v);
}

struct Writer {
  std::string out;
  bool first = true;
  void begin_event() {
    out += first ? "\n" : ",\n";
    first = false;
  }
};

}  // namespace

std::string chrome_trace_json(const Trace& trace) {
  Writer w;
  w.out.reserve(256 + trace.events.size() * 160 + trace.memory.size() * 200);
  w.out += "{\"traceEvents\": [";
  const std::string pid = std::to_string(trace.pid);

  w.begin_event();
  w.out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + pid +
           ", \"tid\": 0, \"args\": {\"name\": ";
  append_escaped(w.out, trace.process_name);
  w.out += "}}";
  for (size_t i = 0; i < trace.threads.size(); ++i) {
    const ThreadInfo& t = trace.threads[i];
    w.begin_event();
    w.out += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid +
             ", \"tid\": " + std::to_string(t.tid) + ", \"args\": {\"name\": ";
    append_escaped(w.out, t.name);
    w.out += "}}";
    w.begin_event();
    w.out += "{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid +
             ", \"tid\": " + std::to_string(t.tid) +
             ", \"args\": {\"sort_index\": " + std::to_string(i) + "}}";
  }

  // Device lanes: a process per device after the CPU's, a thread per stream.
  std::set<std::pair<int32_t, uint64_t>> lanes;
  for (const Event& e : trace.events) {
    if (e.device >= 0) lanes.insert({e.device, e.tid});
  }
  int32_t named_device = -1;
  for (const auto& [device, stream] : lanes) {
    const std::string gpid = std::to_string(kGpuPidBase + device);
    if (device != named_device) {
      named_device = device;
      w.begin_event();
      w.out += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + gpid +
               ", \"tid\": 0, \"args\": {\"name\": \"GPU " + std::to_string(device) + "\"}}";
      w.begin_event();
      w.out += "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + gpid +
               ", \"tid\": 0, \"args\": {\"sort_index\": " + std::to_string(device + 1) + "}}";
    }
    w.begin_event();
    w.out += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + gpid +
             ", \"tid\": " + std::to_string(stream) + ", \"args\": {\"name\": \"stream " +
             std::to_string(stream) + "\"}}";
  }

  // Complete events; remember forward operators by their autograd link, and CPU events by their
  // GPU correlation id, for the flows.
  std::map<std::pair<uint64_t, uint64_t>, const Event*> forward;
  std::unordered_map<uint64_t, const Event*> launcher;
  for (const Event& e : trace.events) {
    const bool on_device = e.device >= 0;
    w.begin_event();
    w.out += "{\"ph\": \"X\", \"cat\": \"";
    w.out += event_kind_category(e.kind);
    w.out += "\", \"name\": ";
    append_escaped(w.out, e.name);
    w.out += ", \"pid\": " + (on_device ? std::to_string(kGpuPidBase + e.device) : pid) +
             ", \"tid\": " + std::to_string(e.tid) + ", \"ts\": ";
    append_us(w.out, e.start_ns);
    w.out += ", \"dur\": ";
    append_us(w.out, e.duration_ns());
    w.out += ", \"args\": {";
    bool first_arg = true;
    auto arg = [&](const char* key) {
      w.out += first_arg ? "\"" : ", \"";
      w.out += key;
      w.out += "\": ";
      first_arg = false;
    };
    if (!e.input_shapes.empty()) {
      arg("Input Dims");
      w.out += e.shapes_str();
      arg("Input type");
      w.out += '[';
      for (size_t i = 0; i < e.input_dtypes.size(); ++i) {
        if (i) w.out += ", ";
        append_escaped(w.out, e.input_dtypes[i]);
      }
      w.out += ']';
    }
    if (e.fwd_thread != 0) {
      arg("Fwd thread id");
      w.out += std::to_string(e.fwd_thread);
      arg("Sequence number");
      w.out += std::to_string(e.sequence_nr);
      if (e.kind == EventKind::Operator)
        forward.emplace(std::make_pair(e.fwd_thread, e.sequence_nr), &e);
    }
    if (e.bytes >= 0) {
      arg("bytes");
      append_int(w.out, e.bytes);
    }
    if (on_device) {
      arg("device");
      append_int(w.out, e.device);
      arg("stream");
      w.out += std::to_string(e.tid);
    }
    if (e.correlation_id != 0) {
      arg("correlation");
      w.out += std::to_string(e.correlation_id);
      if (!on_device) launcher.emplace(e.correlation_id, &e);
    }
    w.out += "}}";
  }

  // Flow arrows forward operator -> backward node: "s" inside the operator, "f" bound to the
  // enclosing slice of the backward node ("bp": "e").
  int64_t flow_id = 0;
  for (const Event& e : trace.events) {
    if (e.kind != EventKind::Backward || e.fwd_thread == 0) continue;
    auto it = forward.find({e.fwd_thread, e.sequence_nr});
    if (it == forward.end()) continue;
    const Event& f = *it->second;
    const std::string id = std::to_string(++flow_id);
    w.begin_event();
    w.out += "{\"ph\": \"s\", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\", \"id\": " + id +
             ", \"pid\": " + pid + ", \"tid\": " + std::to_string(f.tid) + ", \"ts\": ";
    append_us(w.out, f.start_ns);
    w.out += "}";
    w.begin_event();
    w.out +=
        "{\"ph\": \"f\", \"bp\": \"e\", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\", \"id\": " + id +
        ", \"pid\": " + pid + ", \"tid\": " + std::to_string(e.tid) + ", \"ts\": ";
    append_us(w.out, e.start_ns);
    w.out += "}";
  }

  // Flow arrows operator -> the device activities it launched ("ac2g", as PyTorch's traces):
  // "s" inside the operator, "f" bound to the activity's slice.
  for (const Event& e : trace.events) {
    if (e.device < 0 || e.correlation_id == 0) continue;
    auto it = launcher.find(e.correlation_id);
    if (it == launcher.end()) continue;
    const Event& op = *it->second;
    const std::string id = std::to_string(++flow_id);
    w.begin_event();
    w.out += "{\"ph\": \"s\", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"id\": " + id +
             ", \"pid\": " + pid + ", \"tid\": " + std::to_string(op.tid) + ", \"ts\": ";
    append_us(w.out, op.start_ns);
    w.out += "}";
    w.begin_event();
    w.out += "{\"ph\": \"f\", \"bp\": \"e\", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"id\": " + id +
             ", \"pid\": " + std::to_string(kGpuPidBase + e.device) +
             ", \"tid\": " + std::to_string(e.tid) + ", \"ts\": ";
    append_us(w.out, e.start_ns);
    w.out += "}";
  }

  // Allocator events: an instant per event with its details, and two counter tracks.
  for (const MemorySample& m : trace.memory) {
    w.begin_event();
    w.out +=
        "{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"memory\", \"name\": \"[memory]\", \"pid\": " +
        pid + ", \"tid\": " + std::to_string(m.tid) + ", \"ts\": ";
    append_us(w.out, m.ts_ns);
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  ", \"args\": {\"Addr\": %" PRIu64 ", \"Bytes\": %" PRId64
                  ", \"Total Allocated\": %" PRId64 ", \"Total Reserved\": %" PRId64
                  ", \"Stream\": %" PRId64 "}}",
                  m.ptr, m.delta_bytes, m.allocated, m.reserved, m.stream);
    w.out += buf;
    // A device other than the CPU: named in the instant and in its own counter tracks.
    const std::string dev = m.device.is_cpu() ? std::string() : m.device.str();
    if (!dev.empty()) {
      w.out.pop_back();
      w.out.pop_back();
      w.out += ", \"Device\": \"" + dev + "\"}}";
    }
    for (int k = 0; k < 2; ++k) {
      w.begin_event();
      w.out += std::string(k == 0 ? "{\"ph\": \"C\", \"name\": \"allocated bytes"
                                  : "{\"ph\": \"C\", \"name\": \"reserved bytes") +
               (dev.empty() ? "" : " (" + dev + ")") + "\", \"pid\": ";
      w.out += pid + ", \"ts\": ";
      append_us(w.out, m.ts_ns);
      w.out +=
          ", \"args\": {\"bytes\": " + std::to_string(k == 0 ? m.allocated : m.reserved) + "}}";
    }
  }
  w.out +=
      "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"producer\": \"loom profiler\", "
      "\"origin_ns\": " +
      std::to_string(trace.origin_ns) + "}}\n";
  return w.out;
}

void write_chrome_trace(const Trace& trace, const std::string& path) {
  const std::string json = chrome_trace_json(trace);
  const bool gz = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb6");
    LOOM_CHECK(f != nullptr, "[profiler] cannot write the trace to ", path, ": ",
               std::strerror(errno));
    size_t off = 0;
    bool ok = true;
    while (ok && off < json.size()) {
      const unsigned n = static_cast<unsigned>(std::min<size_t>(json.size() - off, 1u << 30));
      ok = gzwrite(f, json.data() + off, n) == static_cast<int>(n);
      off += n;
    }
    const int closed = gzclose(f);
    LOOM_CHECK(ok && closed == Z_OK, "[profiler] cannot write the trace to ", path,
               " (gzip write failed)");
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  LOOM_CHECK(f != nullptr, "[profiler] cannot write the trace to ", path, ": ",
             std::strerror(errno));
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const bool closed = std::fclose(f) == 0;
  LOOM_CHECK(ok && closed, "[profiler] cannot write the trace to ", path, ": ",
             std::strerror(errno));
}

}  // namespace loom::profiler
