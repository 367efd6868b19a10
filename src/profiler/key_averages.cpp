// key_averages (calls, self and total time per operator), its table, and the diff of two traces.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "loom/profiler.h"

namespace loom::profiler {
namespace {

// Self time of every event: its duration minus its direct children's (events are nested per lane,
// sorted by lane and start, see make_nested). With device activities, also the device time each CPU
// event launched itself (self_cuda) and with the events nested in it (cuda_total), found through
// the activities' correlation ids (Note [GPU correlation] in gpu_timeline.cpp).
struct SelfTimes {
  std::vector<int64_t> self, self_cuda, cuda_total;
};

SelfTimes self_times(const Trace& trace) {
  const auto& ev = trace.events;
  SelfTimes out;
  out.self.resize(ev.size());
  std::unordered_map<uint64_t, int64_t> device_time;  // correlation id -> device time it launched
  for (const Event& e : ev) {
    if (e.device >= 0 && e.correlation_id != 0 && e.kind != EventKind::GpuSync)
      device_time[e.correlation_id] += e.duration_ns();
  }
  if (!device_time.empty()) {
    out.self_cuda.assign(ev.size(), 0);
    out.cuda_total.assign(ev.size(), 0);
  }
  std::vector<size_t> open;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (i > 0 && (ev[i].tid != ev[i - 1].tid || ev[i].device != ev[i - 1].device)) open.clear();
    while (!open.empty() && ev[open.back()].end_ns <= ev[i].start_ns) open.pop_back();
    out.self[i] = ev[i].duration_ns();
    if (!open.empty()) out.self[open.back()] -= ev[i].duration_ns();
    if (!device_time.empty() && ev[i].device < 0 && ev[i].correlation_id != 0) {
      if (auto it = device_time.find(ev[i].correlation_id); it != device_time.end()) {
        out.self_cuda[i] = it->second;
        out.cuda_total[i] += it->second;
        for (size_t k : open) out.cuda_total[k] += it->second;
      }
    }
    open.push_back(i);
  }
  return out;
}

std::string fit(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return s.substr(0, width - 3) + "...";
}

// "12.345 ms" / "678.9 us" with a fixed width.
std::string fmt_time(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  if (a >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.3f s", ns / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3f ms", ns / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", ns / 1e3);
  }
  return buf;
}

std::string signed_time(double ns) {
  std::string s = fmt_time(ns);
  if (ns >= 0) s.insert(s.begin(), '+');
  return s;
}

int64_t count_steps(const Trace& t) {
  int64_t n = 0;
  for (const Event& e : t.events) n += e.kind == EventKind::Step;
  return n;
}

// Threads without a name of their own get a new tid in every run: compared as one group.
std::string diff_thread(const std::string& label) {
  return label.rfind("thread ", 0) == 0 ? "other threads" : label;
}

}  // namespace

std::string thread_label(const Trace& trace, uint64_t tid) {
  for (const ThreadInfo& t : trace.threads) {
    if (t.tid == tid && !t.name.empty()) return t.name;
  }
  return "thread " + std::to_string(tid);
}

std::vector<OpStats> key_averages(const Trace& trace, GroupBy by) {
  const SelfTimes times = self_times(trace);
  const std::vector<int64_t>& self = times.self;
  std::unordered_map<std::string, size_t> index;
  std::unordered_map<uint64_t, std::string> labels;
  std::vector<OpStats> out;
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    if (e.kind == EventKind::Step || is_device_kind(e.kind) || e.device >= 0) continue;
    auto lit = labels.find(e.tid);
    if (lit == labels.end()) lit = labels.emplace(e.tid, thread_label(trace, e.tid)).first;
    std::string shapes = by == GroupBy::NameAndShapes ? e.shapes_str() : std::string();
    std::string key = lit->second + '\x1f' + e.name;
    if (by == GroupBy::NameAndShapes) key += '\x1f' + shapes;
    auto [it, fresh] = index.try_emplace(std::move(key), out.size());
    if (fresh) {
      OpStats s;
      s.thread = lit->second;
      s.name = e.name;
      s.input_shapes = std::move(shapes);
      s.kind = e.kind;
      out.push_back(std::move(s));
    }
    OpStats& s = out[it->second];
    ++s.calls;
    s.self_ns += self[i];
    s.total_ns += e.duration_ns();
    if (!times.self_cuda.empty()) {
      s.self_cuda_ns += times.self_cuda[i];
      s.cuda_total_ns += times.cuda_total[i];
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    if (a.name != b.name) return a.name < b.name;
    return a.thread < b.thread;
  });
  return out;
}

std::string format_table(const std::vector<OpStats>& stats, size_t rows) {
  bool shapes = false, threads = false, cuda = false;
  int64_t all_self = 0;
  for (const OpStats& s : stats) {
    shapes = shapes || !s.input_shapes.empty();
    cuda = cuda || s.cuda_total_ns > 0;
    threads = threads || s.thread != stats.front().thread;
    all_self += s.self_ns;
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%s%-36s %-16s%s %7s %12s %7s %12s %12s%s\n",
                threads ? "Thread               " : "", "Name", "Kind",
                shapes ? " Input shapes                  " : "", "Calls", "Self", "Self %", "Total",
                "Avg", cuda ? "    Self CUDA   CUDA total" : "");
  out += line;
  out += std::string(std::string(line).size() - 1, '-') + "\n";
  for (size_t i = 0; i < stats.size() && i < rows; ++i) {
    const OpStats& s = stats[i];
    std::string shape_col;
    if (shapes) {
      const std::string f = fit(s.input_shapes, 30);
      shape_col = " " + f + std::string(30 - f.size(), ' ');
    }
    std::string thread_col;
    if (threads) {
      const std::string f = fit(s.thread, 20);
      thread_col = f + std::string(21 - f.size(), ' ');
    }
    std::string cuda_col;
    if (cuda) {
      char c[64];
      std::snprintf(c, sizeof(c), " %12s %12s",
                    fmt_time(static_cast<double>(s.self_cuda_ns)).c_str(),
                    fmt_time(static_cast<double>(s.cuda_total_ns)).c_str());
      cuda_col = c;
    }
    std::snprintf(
        line, sizeof(line), "%s%-36s %-16s%s %7lld %12s %6.1f%% %12s %12s%s\n", thread_col.c_str(),
        fit(s.name, 36).c_str(), event_kind_category(s.kind), shape_col.c_str(),
        static_cast<long long>(s.calls), fmt_time(static_cast<double>(s.self_ns)).c_str(),
        all_self > 0 ? 100.0 * static_cast<double>(s.self_ns) / static_cast<double>(all_self) : 0.0,
        fmt_time(static_cast<double>(s.total_ns)).c_str(), fmt_time(s.avg_ns()).c_str(),
        cuda_col.c_str());
    out += line;
  }
  if (stats.size() > rows) out += "... " + std::to_string(stats.size() - rows) + " more\n";
  return out;
}

TraceDiff diff_traces(const Trace& a, const Trace& b) {
  TraceDiff d;
  d.steps_a = count_steps(a);
  d.steps_b = count_steps(b);
  d.per_step = d.steps_a > 0 && d.steps_b > 0;
  const double na = d.per_step ? static_cast<double>(d.steps_a) : 1.0;
  const double nb = d.per_step ? static_cast<double>(d.steps_b) : 1.0;
  std::map<std::pair<std::string, std::string>, OpDelta> by_name;
  for (const OpStats& s : key_averages(a)) {
    OpDelta& o = by_name[{diff_thread(s.thread), s.name}];
    o.thread = diff_thread(s.thread);
    o.name = s.name;
    o.calls_a += s.calls;
    o.self_a_ns += static_cast<double>(s.self_ns) / na;
  }
  for (const OpStats& s : key_averages(b)) {
    OpDelta& o = by_name[{diff_thread(s.thread), s.name}];
    o.thread = diff_thread(s.thread);
    o.name = s.name;
    o.calls_b += s.calls;
    o.self_b_ns += static_cast<double>(s.self_ns) / nb;
  }
  for (auto& [name, o] : by_name) d.ops.push_back(o);
  std::stable_sort(d.ops.begin(), d.ops.end(), [](const OpDelta& x, const OpDelta& y) {
    return std::fabs(x.delta_ns()) > std::fabs(y.delta_ns());
  });
  return d;
}

std::string format_diff(const TraceDiff& d, size_t rows) {
  std::string out;
  char line[512];
  if (d.per_step) {
    std::snprintf(line, sizeof(line), "self time per step (A: %lld steps, B: %lld steps)\n",
                  static_cast<long long>(d.steps_a), static_cast<long long>(d.steps_b));
  } else {
    std::snprintf(line, sizeof(line),
                  "total self time (a trace without ProfilerStep events: not per step)\n");
  }
  out += line;
  bool threads = false;
  for (const OpDelta& o : d.ops) threads = threads || o.thread != d.ops.front().thread;
  std::snprintf(line, sizeof(line), "%s%-36s %12s %12s %12s %8s %8s %8s\n",
                threads ? "Thread               " : "", "Name", "Self A", "Self B", "Change",
                "Change%", "Calls A", "Calls B");
  out += line;
  out += std::string(std::string(line).size() - 1, '-') + "\n";
  double total_a = 0, total_b = 0;
  for (const OpDelta& o : d.ops) {
    total_a += o.self_a_ns;
    total_b += o.self_b_ns;
  }
  for (size_t i = 0; i < d.ops.size() && i < rows; ++i) {
    const OpDelta& o = d.ops[i];
    char pct[16] = "new";
    if (o.self_a_ns > 0)
      std::snprintf(pct, sizeof(pct), "%+.1f%%", 100.0 * o.delta_ns() / o.self_a_ns);
    if (o.calls_b == 0) std::snprintf(pct, sizeof(pct), "gone");
    std::string thread_col;
    if (threads) {
      const std::string f = fit(o.thread, 20);
      thread_col = f + std::string(21 - f.size(), ' ');
    }
    std::snprintf(line, sizeof(line), "%s%-36s %12s %12s %12s %8s %8lld %8lld\n",
                  thread_col.c_str(), fit(o.name, 36).c_str(), fmt_time(o.self_a_ns).c_str(),
                  fmt_time(o.self_b_ns).c_str(), signed_time(o.delta_ns()).c_str(), pct,
                  static_cast<long long>(o.calls_a), static_cast<long long>(o.calls_b));
    out += line;
  }
  if (d.ops.size() > rows) out += "... " + std::to_string(d.ops.size() - rows) + " more\n";
  std::snprintf(
      line, sizeof(line), "all self time: %s -> %s (%s)\n", fmt_time(total_a).c_str(),
      fmt_time(total_b).c_str(),
      total_a > 0
          ? (std::to_string(static_cast<int>(std::lround(100.0 * (total_b - total_a) / total_a))) +
             "%")
                .c_str()
          : "n/a");
  out += line;
  return out;
}

}  // namespace loom::profiler
