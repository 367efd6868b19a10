// The per-step breakdown (compute, communication, data wait, idle) and the text summary.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "loom/profiler.h"

namespace loom::profiler {
namespace {

using Interval = std::pair<int64_t, int64_t>;
using Intervals = std::vector<Interval>;  // sorted, disjoint

Intervals merged(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const Interval& x : v) {
    if (x.second <= x.first) continue;
    if (!out.empty() && x.first <= out.back().second) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

int64_t length(const Intervals& v) {
  int64_t n = 0;
  for (const Interval& x : v) n += x.second - x.first;
  return n;
}

Intervals intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

Intervals subtract(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (Interval x : a) {
    while (j < b.size() && b[j].second <= x.first) ++j;
    size_t k = j;
    while (k < b.size() && b[k].first < x.second) {
      if (b[k].first > x.first) out.emplace_back(x.first, b[k].first);
      x.first = std::max(x.first, b[k].second);
      ++k;
    }
    if (x.first < x.second) out.push_back(x);
  }
  return out;
}

Intervals united(const Intervals& a, const Intervals& b) {
  Intervals v = a;
  v.insert(v.end(), b.begin(), b.end());
  return merged(std::move(v));
}

double pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::string ms(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ns) / 1e6);
  return buf;
}

// One table per thread: the thread(s) that ran the steps first, then by self time. Each thread's
// shares are of its own self time, so loader workers decoding in parallel never inflate (or hide)
// what the training thread spent.
std::string per_thread_tables(const Trace& trace, size_t top) {
  const std::vector<OpStats> all = key_averages(trace);
  std::set<std::string> step_threads;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Step) step_threads.insert(thread_label(trace, e.tid));
  }
  std::map<std::string, int64_t> self_of;
  int64_t all_self = 0;
  for (const OpStats& s : all) {
    self_of[s.thread] += s.self_ns;
    all_self += s.self_ns;
  }
  std::vector<std::string> order;
  for (const auto& [thread, self] : self_of) order.push_back(thread);
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    const bool sa = step_threads.count(a) != 0, sb = step_threads.count(b) != 0;
    if (sa != sb) return sa;
    return self_of[a] > self_of[b];
  });
  std::string out;
  char line[256];
  for (const std::string& thread : order) {
    std::vector<OpStats> rows;
    for (const OpStats& s : all) {
      if (s.thread == thread) rows.push_back(s);
    }
    std::snprintf(line, sizeof(line),
                  "\nThread \"%s\"%s: %s ms self time (%.1f%% of all threads')\n", thread.c_str(),
                  step_threads.count(thread) ? " (runs the steps)" : "",
                  ms(self_of[thread]).c_str(), pct(self_of[thread], all_self));
    out += line;
    out += format_table(rows, top);
  }
  return out;
}

// The device activities grouped by kind and name, by device time (synchronisations are listed but
// are waits, so they do not count in the share).
std::string device_table(const Trace& trace, size_t top) {
  struct Row {
    EventKind kind;
    std::string name;
    int64_t calls = 0, ns = 0;
  };
  std::map<std::pair<EventKind, std::string>, Row> by_name;
  int64_t busy = 0;
  for (const Event& e : trace.events) {
    if (e.device < 0) continue;
    Row& r = by_name[{e.kind, e.name}];
    r.kind = e.kind;
    r.name = e.name;
    ++r.calls;
    r.ns += e.duration_ns();
    if (e.kind != EventKind::GpuSync) busy += e.duration_ns();
  }
  std::vector<Row> rows;
  for (auto& [key, r] : by_name) rows.push_back(std::move(r));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.ns > b.ns; });
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-60s %-12s %7s %14s %8s\n", "Name", "Kind", "Calls",
                "Device ms", "Share");
  out += line;
  out += std::string(std::string(line).size() - 1, '-') + "\n";
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const Row& r = rows[i];
    std::string name = r.name.size() > 60 ? r.name.substr(0, 57) + "..." : r.name;
    char share[16] = "wait";
    if (r.kind != EventKind::GpuSync)
      std::snprintf(share, sizeof(share), "%.1f%%", pct(r.ns, busy));
    std::snprintf(line, sizeof(line), "%-60s %-12s %7lld %14s %8s\n", name.c_str(),
                  event_kind_category(r.kind), static_cast<long long>(r.calls), ms(r.ns).c_str(),
                  share);
    out += line;
  }
  if (rows.size() > top) out += "... " + std::to_string(rows.size() - top) + " more\n";
  return out;
}

}  // namespace

std::vector<StepBreakdown> step_breakdown(const Trace& trace) {
  std::vector<const Event*> steps;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::Step) steps.push_back(&e);
  }
  std::sort(steps.begin(), steps.end(),
            [](const Event* a, const Event* b) { return a->start_ns < b->start_ns; });
  // Each event goes to the steps it overlaps (steps follow each other; found by binary search).
  // Communication on the step's own thread (a synchronous collective, or a CommWait such as DDP's
  // wait for gradient allreduce inside AccumulateGrad) is cut out of the compute around it.
  std::vector<Intervals> compute(steps.size()), comm(steps.size()), wait(steps.size()),
      own_comm(steps.size()), gpu(steps.size());
  bool has_gpu = false;
  for (const Event& e : trace.events) {
    // Device work: kernels, copies and memsets on any device and stream; a GpuSync is a wait.
    const bool is_gpu_work = e.device >= 0 && e.kind != EventKind::GpuSync;
    has_gpu = has_gpu || e.device >= 0;
    const bool is_comm = e.kind == EventKind::Collective || e.kind == EventKind::CommWait;
    const bool is_compute = e.kind == EventKind::Operator || e.kind == EventKind::Backward;
    const bool is_wait = e.kind == EventKind::DataStage && e.name == "data.wait";
    if (!is_comm && !is_compute && !is_wait && !is_gpu_work) continue;
    size_t k = static_cast<size_t>(
        std::lower_bound(steps.begin(), steps.end(), e.end_ns,
                         [](const Event* s, int64_t t) { return s->start_ns < t; }) -
        steps.begin());
    while (k > 0) {
      const Event& s = *steps[--k];
      if (s.end_ns <= e.start_ns) break;
      const Interval iv{std::max(e.start_ns, s.start_ns), std::min(e.end_ns, s.end_ns)};
      if (is_gpu_work) {
        gpu[k].push_back(iv);
      } else if (is_comm) {
        // A CommWait on another thread is that thread's business, not this step's communication.
        if (e.kind == EventKind::Collective || e.tid == s.tid) comm[k].push_back(iv);
        if (e.tid == s.tid) own_comm[k].push_back(iv);
      } else if (e.tid == s.tid) {
        (is_compute ? compute : wait)[k].push_back(iv);
      }
    }
  }
  std::vector<StepBreakdown> out;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Event* s = steps[k];
    const Intervals d = merged(std::move(wait[k]));
    const Intervals c =
        subtract(subtract(merged(std::move(compute[k])), d), merged(std::move(own_comm[k])));
    const Intervals m = merged(std::move(comm[k]));
    StepBreakdown b;
    const std::string& name = s->name;
    const size_t hash = name.find('#');
    b.step =
        hash == std::string::npos ? static_cast<int64_t>(k) : std::atoll(name.c_str() + hash + 1);
    b.start_ns = s->start_ns;
    b.duration_ns = s->duration_ns();
    b.compute_ns = length(c);
    b.data_wait_ns = length(d);
    b.communication_ns = length(subtract(m, united(c, d)));
    b.overlapped_communication_ns = length(intersect(m, c));
    b.idle_ns =
        std::max<int64_t>(0, b.duration_ns - b.compute_ns - b.data_wait_ns - b.communication_ns);
    b.has_gpu = has_gpu;
    if (has_gpu) {
      b.gpu_busy_ns = length(merged(std::move(gpu[k])));
      b.gpu_idle_ns = std::max<int64_t>(0, b.duration_ns - b.gpu_busy_ns);
    }
    out.push_back(b);
  }
  return out;
}

std::string format_step_breakdown(const std::vector<StepBreakdown>& steps) {
  std::string out;
  char line[320];
  const bool gpu = !steps.empty() && steps.front().has_gpu;
  std::snprintf(line, sizeof(line), "%-10s %10s %18s %18s %18s %18s %12s%s\n", "Step", "Time ms",
                "Compute ms (%)", "Comm ms (%)", "Data wait ms (%)", "Idle ms (%)", "Overlap ms",
                gpu ? "    GPU busy ms (%)    GPU idle ms (%)" : "");
  out += line;
  out += std::string(std::string(line).size() - 1, '-') + "\n";
  auto row = [&](const std::string& label, const StepBreakdown& b) {
    auto cell = [&](int64_t ns) {
      char c[32];
      std::snprintf(c, sizeof(c), "%s (%4.1f%%)", ms(ns).c_str(), pct(ns, b.duration_ns));
      return std::string(c);
    };
    char gpu_cols[64] = "";
    if (gpu) {
      std::snprintf(gpu_cols, sizeof(gpu_cols), " %18s %18s", cell(b.gpu_busy_ns).c_str(),
                    cell(b.gpu_idle_ns).c_str());
    }
    std::snprintf(line, sizeof(line), "%-10s %10s %18s %18s %18s %18s %12s%s\n", label.c_str(),
                  ms(b.duration_ns).c_str(), cell(b.compute_ns).c_str(),
                  cell(b.communication_ns).c_str(), cell(b.data_wait_ns).c_str(),
                  cell(b.idle_ns).c_str(), ms(b.overlapped_communication_ns).c_str(), gpu_cols);
    out += line;
  };
  StepBreakdown mean;
  for (const StepBreakdown& b : steps) {
    std::string label = std::to_string(b.step);
    label.insert(label.begin(), '#');
    row(label, b);
    mean.duration_ns += b.duration_ns;
    mean.compute_ns += b.compute_ns;
    mean.communication_ns += b.communication_ns;
    mean.data_wait_ns += b.data_wait_ns;
    mean.idle_ns += b.idle_ns;
    mean.overlapped_communication_ns += b.overlapped_communication_ns;
    mean.gpu_busy_ns += b.gpu_busy_ns;
    mean.gpu_idle_ns += b.gpu_idle_ns;
  }
  if (steps.size() > 1) {
    const auto n = static_cast<int64_t>(steps.size());
    mean.duration_ns /= n;
    mean.compute_ns /= n;
    mean.communication_ns /= n;
    mean.data_wait_ns /= n;
    mean.idle_ns /= n;
    mean.overlapped_communication_ns /= n;
    mean.gpu_busy_ns /= n;
    mean.gpu_idle_ns /= n;
    row("mean", mean);
  }
  return out;
}

std::string dominant_part(const std::vector<StepBreakdown>& steps) {
  int64_t total = 0, parts[4] = {0, 0, 0, 0};
  for (const StepBreakdown& b : steps) {
    total += b.duration_ns;
    parts[0] += b.compute_ns;
    parts[1] += b.communication_ns;
    parts[2] += b.data_wait_ns;
    parts[3] += b.idle_ns;
  }
  if (steps.empty() || total <= 0) return "";
  static const char* const kNames[4] = {"compute", "communication", "data wait", "idle"};
  const int k = static_cast<int>(std::max_element(parts, parts + 4) - parts);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s (%.0f%% of step time)", kNames[k], pct(parts[k], total));
  return buf;
}

std::string summarize(const Trace& trace, size_t top) {
  std::string out;
  char line[256];
  std::set<uint64_t> tids;
  std::set<std::pair<int32_t, uint64_t>> streams;
  int64_t first = INT64_MAX, last = INT64_MIN, device_events = 0;
  for (const Event& e : trace.events) {
    if (e.device >= 0) {
      streams.insert({e.device, e.tid});
      ++device_events;
    } else {
      tids.insert(e.tid);
    }
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
  }
  const std::vector<StepBreakdown> steps = step_breakdown(trace);
  std::snprintf(line, sizeof(line),
                "%zu events on %zu thread(s) over %s ms, %zu allocator events, %zu step(s)\n",
                trace.events.size(), tids.size(),
                trace.events.empty() ? "0" : ms(last - first).c_str(), trace.memory.size(),
                steps.size());
  out += line;
  if (trace.events.empty()) return out + "nothing was recorded\n";
  if (device_events > 0) {
    std::snprintf(line, sizeof(line), "%lld of them device activities on %zu stream(s)\n",
                  static_cast<long long>(device_events), streams.size());
    out += line;
  }
  out += "\nTop " + std::to_string(top) + " by self time, per thread:\n";
  out += per_thread_tables(trace, top);
  if (device_events > 0) {
    out += "\nTop " + std::to_string(top) + " device activities by device time:\n";
    out += device_table(trace, top);
  }
  if (!trace.memory.empty()) {
    int64_t peak_alloc = 0, peak_res = 0;
    for (const MemorySample& m : trace.memory) {
      peak_alloc = std::max(peak_alloc, m.allocated);
      peak_res = std::max(peak_res, m.reserved);
    }
    std::snprintf(line, sizeof(line), "\nMemory: peak %.1f MB allocated, %.1f MB reserved\n",
                  static_cast<double>(peak_alloc) / 1e6, static_cast<double>(peak_res) / 1e6);
    out += line;
  }
  if (steps.empty())
    return out + "\nNo ProfilerStep events: no step breakdown (call Profile::step() per step).\n";
  out += "\nStep breakdown:\n" + format_step_breakdown(steps);
  out += "Dominated by: " + dominant_part(steps) + "\n";
  return out;
}

}  // namespace loom::profiler
