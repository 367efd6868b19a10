// `loom mem`: memory tools over the caching allocator.
//   loom mem record OUT.json     records an allocation trace of a loom training workload
//   loom mem replay TRACE        replays a trace under allocator policies and compares them
//   loom mem snapshot OUT.json   replays a trace and writes the allocator's final snapshot
//   loom mem viz SNAPSHOT        draws a snapshot as a self-contained HTML page
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cli.h"
#include "loom/error.h"
#include "loom/io.h"
#include "loom/json.h"
#include "loom/memory/alloc_trace.h"
#include "mem_viz.h"

namespace loom::cli {
namespace {

using memory::AllocTrace;
using memory::ReplayOptions;
using memory::ReplayResult;

// "1073741824", "512M", "80G", "80GiB", "1.5T": binary units.
size_t parse_bytes(const std::string& cmd, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  LOOM_CHECK(end != text.c_str() && scale > 0 && v > 0 && std::isfinite(v) && v * scale < 1e18,
             "[loom ", cmd,
             "] --capacity expects a positive size in bytes (e.g. 1073741824, 512M, "
             "80G) but got '",
             text, "'");
  return static_cast<size_t>(v * scale);
}

memory::TrainingTraceOptions training_options(const std::string& cmd, const Args& args) {
  memory::TrainingTraceOptions o;
  const int64_t steps = args.get_int("steps", o.steps);
  LOOM_CHECK(steps > 0 && steps <= 100000, "[loom ", cmd, "] --steps must be in 1..100000 but got ",
             steps);
  o.steps = static_cast<int>(steps);
  const int64_t seed = args.get_int("seed", 0);
  LOOM_CHECK(seed >= 0, "[loom ", cmd, "] --seed must be non-negative but got ", seed);
  o.seed = static_cast<uint64_t>(seed);
  o.min_batch = args.get_int("min-batch", o.min_batch);
  o.max_batch = args.get_int("max-batch", o.max_batch);
  o.hidden = args.get_int("hidden", o.hidden);
  return o;
}

void print_summary(const std::string& name, const AllocTrace& t) {
  const auto s = memory::summarize_trace(t);
  std::printf("trace %s: %zu events (%lld allocs, %lld frees), %lld distinct sizes from %s to %s\n",
              name.c_str(), t.events.size(), static_cast<long long>(s.allocs),
              static_cast<long long>(s.frees), static_cast<long long>(s.distinct_sizes),
              format_bytes(static_cast<double>(s.min_size)).c_str(),
              format_bytes(static_cast<double>(s.max_size)).c_str());
  std::printf("  peak live: %s requested (%s rounded to 512 B), %lld blocks; live at the end: %s\n",
              format_bytes(static_cast<double>(s.peak_live_bytes)).c_str(),
              format_bytes(static_cast<double>(s.peak_live_rounded_bytes)).c_str(),
              static_cast<long long>(s.peak_live_blocks),
              format_bytes(static_cast<double>(s.live_bytes_at_end)).c_str());
  if (!t.source.empty()) std::printf("  source: %s\n", t.source.c_str());
}

int run_record(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"steps", "seed", "min-batch", "max-batch", "hidden"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem record OUT.json [--steps N] [--seed S] [--min-batch B] [--max-batch B]\n"
        "                                [--hidden H]\n"
        "  Records every CPU allocation and free of N training steps (default 20) of an MLP\n"
        "  (784-H LayerNorm GELU-H GELU-10, H = 1024 by default, Adam) whose batch size is drawn\n"
        "  from min..max (default 32..512) each step, as a loom-alloc-trace JSON file.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string out = args.positionals()[0];
  const auto t0 = std::chrono::steady_clock::now();
  AllocTrace trace = memory::record_training_trace(training_options("mem record", args));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  memory::write_trace(out, trace);
  std::printf("recorded %s in %.2f s\n", out.c_str(), secs);
  print_summary(out, trace);
  return 0;
}

// The trace named on the command line, or a fresh recording when none is.
AllocTrace load_or_record(const std::string& cmd, const Args& args, std::string* name) {
  if (auto path = args.get("trace")) {
    *name = *path;
    return memory::read_trace(*path);
  }
  *name = "(recorded now)";
  return memory::record_training_trace(training_options(cmd, args));
}

// AllocatorConfig::policy's names (checked here, before any work), or all of them.
std::vector<std::string> chosen_policies(const std::string& cmd, const std::string& policy) {
  const std::vector<std::string> all = memory::replay_policies();
  if (policy == "all") return all;
  std::string names;
  for (const auto& p : all) {
    if (p == policy) return {policy};
    names += (names.empty() ? "" : ", ") + p;
  }
  LOOM_THROW(ValueError, "[loom ", cmd, "] unknown --policy '", policy,
             "': expected all or one of ", names);
}

int run_replay(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"policy", "capacity"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem replay TRACE [--policy P|all] [--capacity BYTES]\n"
        "  Replays an allocation trace against the caching allocator over a simulated device\n"
        "  (default capacity 80G) under each policy and prints peak allocated and reserved bytes,\n"
        "  their ratio, the fragmentation of free cached memory at the allocated peak, device\n"
        "  mallocs, OOMs and the allocator's time per event. Policies:");
    for (const auto& p : memory::replay_policies()) std::printf(" %s", p.c_str());
    std::printf("\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string path = args.positionals()[0];
  AllocTrace trace = memory::read_trace(path);
  ReplayOptions o;
  if (auto c = args.get("capacity")) o.capacity = parse_bytes("mem replay", *c);
  const std::vector<std::string> policies =
      chosen_policies("mem replay", args.get_or("policy", "default"));
  print_summary(path, trace);
  std::printf("  replayed on a simulated device of %s\n\n",
              format_bytes(static_cast<double>(o.capacity)).c_str());
  std::printf("%-16s %14s %14s %9s %9s %13s %13s %6s %9s\n", "policy", "peak allocated",
              "peak reserved", "rsv/alloc", "frag@peak", "malloc/free", "map/unmap", "OOMs",
              "ns/event");
  for (const auto& p : policies) {
    o.policy = p;
    o.track_peak = true;
    ReplayResult r = memory::replay_trace(trace, o);
    // ns/event: the fastest of a few timed replays (this machine is shared and noisy).
    o.track_peak = false;
    for (int rep = 0; rep < 4; ++rep)
      r.seconds = std::min(r.seconds, memory::replay_trace(trace, o).seconds);
    const memory::MemoryStats& st = r.stats;
    const std::string mallocs =
        std::to_string(st.num_device_mallocs) + "/" + std::to_string(st.num_device_frees);
    const std::string maps =
        std::to_string(st.num_device_maps) + "/" + std::to_string(st.num_device_unmaps);
    std::printf("%-16s %14s %14s %9.3f %9.4f %13s %13s %6lld %9.1f\n", p.c_str(),
                format_bytes(static_cast<double>(st.allocated_bytes.peak)).c_str(),
                format_bytes(static_cast<double>(st.reserved_bytes.peak)).c_str(), r.peak_ratio(),
                r.fragmentation_at_peak, mallocs.c_str(), maps.c_str(),
                static_cast<long long>(r.ooms), r.ns_per_event());
  }
  std::printf(
      "\nrsv/alloc = peak reserved / peak allocated; frag@peak = 1 - largest free block / free "
      "cached bytes when allocated bytes peaked;\nmalloc/free = segments made and returned "
      "(expandable: segments begun and ended); map/unmap = device calls mapping and unmapping\n"
      "runs of pages of expandable segments.\n");
  return 0;
}

int run_snapshot(const std::vector<std::string>& argv) {
  Args args(argv, {"help"},
            {"trace", "policy", "capacity", "steps", "seed", "min-batch", "max-batch", "hidden"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem snapshot OUT.json [--trace TRACE] [--policy P] [--capacity BYTES]\n"
        "                                  [--steps N] [--seed S]\n"
        "  Replays TRACE (or a training trace recorded now, as `loom mem record` makes it) under\n"
        "  policy P (default: default) and writes the allocator's final snapshot, with its event\n"
        "  history, for `loom mem viz`. Each block's context names its trace event.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string out = args.positionals()[0];
  ReplayOptions o;
  o.policy = args.get_or("policy", "default");
  LOOM_CHECK(o.policy != "all", "[loom mem snapshot] --policy takes one policy, not all");
  chosen_policies("mem snapshot", o.policy);
  if (auto c = args.get("capacity")) o.capacity = parse_bytes("mem snapshot", *c);
  std::string name;
  AllocTrace trace = load_or_record("mem snapshot", args, &name);
  o.track_peak = false;
  o.contexts = true;
  o.keep_snapshot = true;
  ReplayResult r = memory::replay_trace(trace, o);
  io::atomic_write_file(out, r.snapshot.to_json().dump() + "\n");
  size_t blocks = 0;
  for (const auto& seg : r.snapshot.segments) blocks += seg.blocks.size();
  std::printf("wrote %s: %zu segments, %zu blocks, %zu history events (trace %s, policy %s)\n",
              out.c_str(), r.snapshot.segments.size(), blocks, r.snapshot.history.size(),
              name.c_str(), o.policy.c_str());
  return 0;
}

memory::Snapshot read_snapshot(const std::string& path) {
  const std::string text = io::read_file(path);
  Json doc;
  try {
    doc = Json::parse(text, path);
  } catch (const DataError& e) {
    std::string_view msg = e.what();
    if (msg.rfind("[json] ", 0) == 0) msg.remove_prefix(7);
    LOOM_THROW(DataError, "[memory snapshot] ", msg, " (file of ", text.size(), " bytes)");
  }
  return memory::Snapshot::from_json(doc, path);
}

int run_viz(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  for (auto& a : argv) {
    if (a == "-o") a = "--output";
  }
  Args args(argv, {"help"}, {"output"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem viz SNAPSHOT [-o OUT.html]\n"
        "  Draws a snapshot (from `loom mem snapshot` or Snapshot::to_json) as one self-contained\n"
        "  HTML page: allocated and reserved bytes over the history, the segments and their "
        "blocks,\n"
        "  and the statistics. OUT defaults to SNAPSHOT with .html in place of .json.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string in = args.positionals()[0];
  std::string out = args.get_or("output", "");
  if (out.empty()) {
    out = in;
    if (out.size() > 5 && out.compare(out.size() - 5, 5, ".json") == 0) out.resize(out.size() - 5);
    out += ".html";
  }
  const memory::Snapshot snap = read_snapshot(in);
  const std::string slash_free =
      in.substr(in.rfind('/') == std::string::npos ? 0 : in.rfind('/') + 1);
  const std::string html = memory_html(snap, slash_free);
  io::atomic_write_file(out, html);
  std::printf("wrote %s (%zu bytes): %zu segments, %zu history events\n", out.c_str(), html.size(),
              snap.segments.size(), snap.history.size());
  return 0;
}

const RegisterCommand kRecord("mem record", "record an allocation trace of a training workload",
                              run_record);
const RegisterCommand kReplay("mem replay", "replay an allocation trace under allocator policies",
                              run_replay);
const RegisterCommand kSnapshot("mem snapshot", "replay a trace and write the allocator's snapshot",
                                run_snapshot);
const RegisterCommand kViz("mem viz", "draw a memory snapshot as a self-contained HTML page",
                           run_viz);

}  // namespace
}  // namespace loom::cli
