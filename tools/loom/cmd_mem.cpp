// `loom mem`: memory tools over the caching allocator.
//   loom mem record OUT.json     records an allocation trace of a loom training workload (its own
//                                loop, or `loom train` itself with --train)
//   loom mem replay TRACE        replays a trace (or a profiler trace's allocator events) under
//                                allocator policies and compares them
//   loom mem snapshot OUT.json   replays a trace and writes the allocator's snapshots (at the end
//                                and at the peak), and which operators hold the memory
//   loom mem viz SNAPSHOT        draws a snapshot as a self-contained HTML page
#include <algorithm>
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
#include "loom/memory/snapshot_json.h"
#include "loom/parse.h"
#include "loom/profiler.h"
#include "mem_train_child.h"
#include "mem_viz.h"
#include "training_trace.h"

namespace loom::cli {
namespace {

using memory::AllocTrace;
using memory::ReplayOptions;
using memory::ReplayResult;

// "1073741824", "512M", "80G", "80GiB", "1.5T": binary units.
size_t parse_bytes(const std::string& cmd, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string what =
      "[loom " + cmd + "] --capacity (a size in bytes such as 1073741824, 512M or 80G)";
  const double v = parse_double(text.substr(0, digits), what, 1e-300);
  std::string unit = text.substr(digits);
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
  LOOM_CHECK(scale > 0 && v * scale >= 1 && v * scale < 1e18, "[loom ", cmd,
             "] --capacity expects a positive size in bytes (e.g. 1073741824, 512M, "
             "80G) but got '",
             text, "'");
  return static_cast<size_t>(v * scale);
}

memory::TrainingTraceOptions training_options(const std::string& cmd, const Args& args) {
  memory::TrainingTraceOptions o;
  o.steps = static_cast<int>(args.get_int("steps", o.steps, 1, 100000));
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  o.min_batch = args.get_int("min-batch", o.min_batch, 1, 1 << 20);
  o.max_batch = args.get_int("max-batch", o.max_batch, o.min_batch, 1 << 20);
  o.hidden = args.get_int("hidden", o.hidden, 1, 1 << 16);
  return o;
}

void print_summary(const std::string& name, const AllocTrace& t) {
  const auto s = memory::summarize_trace(t);
  const int64_t named = std::count_if(t.events.begin(), t.events.end(), [](const auto& e) {
    return e.op == memory::AllocEvent::Op::Alloc && e.context >= 0;
  });
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
  if (s.steps > 0) {
    std::printf("  %lld step markers; live bytes peaked after %lld step%s (trace event %lld)\n",
                static_cast<long long>(s.steps), static_cast<long long>(s.peak_live_step),
                s.peak_live_step == 1 ? "" : "s", static_cast<long long>(s.peak_live_event));
  }
  if (!t.contexts.empty()) {
    std::printf("  %lld of %lld allocations name their operator (%zu operators)\n",
                static_cast<long long>(named), static_cast<long long>(s.allocs), t.contexts.size());
  }
  if (!t.source.empty()) std::printf("  source: %s\n", t.source.c_str());
}

// Note [trace files]
//   The memory tools read two kinds of trace: loom's allocation trace (Note [alloc trace format])
//   and a profiler's Chrome trace, plain or gzip (`loom train --profile t.json.gz`), whose
//   allocator events become an allocation trace (Note [profile as alloc trace]). The kind is told
//   from the first bytes: gzip's magic, or a JSON text whose start holds "traceEvents" or that is
//   an array, is a Chrome trace; anything else is read as an allocation trace (whose reader names
//   the byte offset of what is wrong).
AllocTrace load_trace(const std::string& path) {
  std::string head;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    head.assign(buf, std::fread(buf, 1, sizeof(buf), f));
    std::fclose(f);
  }
  const bool gzip = head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
                    static_cast<unsigned char>(head[1]) == 0x8b;
  const size_t first = head.find_first_not_of(" \t\r\n");
  const bool chrome = gzip || (first != std::string::npos && head[first] == '[') ||
                      head.find("\"traceEvents\"") != std::string::npos;
  if (!chrome) return memory::read_trace(path);
  return profiler::alloc_trace_of(profiler::read_chrome_trace(path), path);
}

int run_record(const std::vector<std::string>& argv_in) {
  // Everything after "--" goes to `loom train` (with --train).
  std::vector<std::string> argv = argv_in, train_args;
  if (auto dash = std::find(argv.begin(), argv.end(), "--"); dash != argv.end()) {
    train_args.assign(dash + 1, argv.end());
    argv.erase(dash, argv.end());
  }
  Args args(argv, {"help", "train"}, {"steps", "seed", "min-batch", "max-batch", "hidden"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem record OUT.json [--steps N] [--seed S] [--min-batch B] [--max-batch B]\n"
        "                                [--hidden H]\n"
        "       loom mem record OUT.json --train [--steps N] [-- TRAIN ARGS...]\n"
        "  Records every CPU allocation and free of N training steps (default 20) of an MLP\n"
        "  (784-H LayerNorm GELU-H GELU-10, H = 1024 by default, Adam) whose batch size is drawn\n"
        "  from min..max (default 32..512) each step, as a loom-alloc-trace JSON file, with the\n"
        "  operator of each allocation and a marker per optimizer step.\n"
        "  --train records a real `loom train --max-steps N TRAIN ARGS` instead: it runs as a "
        "child\n"
        "  process with LOOM_MEM_RECORD=OUT.json, which any loom program honours.\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string out = args.positionals()[0];
  const auto t0 = std::chrono::steady_clock::now();
  AllocTrace trace;
  if (args.flag("train")) {
    for (const char* o : {"seed", "min-batch", "max-batch", "hidden"}) {
      LOOM_CHECK(!args.get(o), "[loom mem record] --", o,
                 " is for the built-in workload; with --train pass `loom train` options after --");
    }
    const int64_t steps = args.get_int("steps", 20, 1, 100000);
    trace = record_train_child(out, steps, train_args);
  } else {
    LOOM_CHECK(train_args.empty(),
               "[loom mem record] arguments after -- go to `loom train`: add --train");
    trace = memory::record_training_trace(training_options("mem record", args));
    memory::write_trace(out, trace);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("recorded %s in %.2f s\n", out.c_str(), secs);
  print_summary(out, trace);
  return 0;
}

// The trace named on the command line, or a fresh recording when none is.
AllocTrace load_or_record(const std::string& cmd, const Args& args, std::string* name) {
  if (auto path = args.get("trace")) {
    *name = *path;
    return load_trace(*path);
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
        "  Replays an allocation trace (from `loom mem record`, LOOM_MEM_RECORD, or the allocator\n"
        "  events of a profiler trace such as `loom train --profile t.json.gz` writes) against "
        "the\n"
        "  caching allocator over a simulated device\n"
        "  (default capacity 80G) under each policy and prints peak allocated and reserved bytes,\n"
        "  their ratio, the fragmentation of free cached memory at the allocated peak, device\n"
        "  mallocs, OOMs and the allocator's time per event. Policies:");
    for (const auto& p : memory::replay_policies()) std::printf(" %s", p.c_str());
    std::printf("\n");
    return args.flag("help") ? 0 : 2;
  }
  const std::string path = args.positionals()[0];
  AllocTrace trace = load_trace(path);
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

// The operators holding the most live memory in `segments`.
void print_top_ops(const std::string& when, const std::vector<memory::SegmentInfo>& segments) {
  const std::vector<memory::OpUsage> ops = memory::usage_by_op(segments);
  std::printf("top operators by live bytes %s:\n", when.c_str());
  if (ops.empty()) std::printf("  (nothing live)\n");
  for (size_t i = 0; i < ops.size() && i < 8; ++i) {
    std::printf(
        "  %12s  %6lld blocks  %s\n", format_bytes(static_cast<double>(ops[i].bytes)).c_str(),
        static_cast<long long>(ops[i].blocks),
        ops[i].op.empty() ? "(unknown: allocated outside any operator)" : ops[i].op.c_str());
  }
}

int run_snapshot(const std::vector<std::string>& argv) {
  Args args(argv, {"help"},
            {"trace", "policy", "capacity", "steps", "seed", "min-batch", "max-batch", "hidden"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom mem snapshot OUT.json [--trace TRACE] [--policy P] [--capacity BYTES]\n"
        "                                  [--steps N] [--seed S]\n"
        "  Replays TRACE (an allocation trace or a profiler trace, as `loom mem replay` reads; or\n"
        "  a training trace recorded now, as `loom mem record` makes it) under policy P (default:\n"
        "  default) and writes the allocator's snapshot at the end and at the peak of allocated\n"
        "  bytes, with its event history and step markers, for `loom mem viz`. Each block names\n"
        "  the operator that allocated it and its trace event; the operators holding the most\n"
        "  memory are listed.\n");
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
  o.peak_snapshot = true;
  ReplayResult r = memory::replay_trace(trace, o);
  io::atomic_write_file(out, memory::to_json(r.snapshot).dump() + "\n");
  size_t blocks = 0;
  for (const auto& seg : r.snapshot.segments) blocks += seg.blocks.size();
  std::printf("wrote %s: %zu segments, %zu blocks, %zu history events (trace %s, policy %s)\n",
              out.c_str(), r.snapshot.segments.size(), blocks, r.snapshot.history.size(),
              name.c_str(), o.policy.c_str());
  print_top_ops("at the end", r.snapshot.segments);
  if (const auto& peak = r.snapshot.peak) {
    std::string when = "at the peak (";
    if (peak->step >= 0) {
      when += "after " + std::to_string(peak->step) + (peak->step == 1 ? " step, " : " steps, ");
    }
    when += "trace event " + std::to_string(peak->trace_event) + "; " +
            format_bytes(static_cast<double>(peak->allocated)) + " allocated, " +
            format_bytes(static_cast<double>(peak->reserved)) + " reserved)";
    print_top_ops(when, peak->segments);
  }
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
  return memory::snapshot_from_json(doc, path);
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
        "  Draws a snapshot (from `loom mem snapshot` or memory::to_json) as one self-contained\n"
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
