// `loom bench collectives`: an nccl-tests-like table of one collective over N local processes,
// loom's process group side by side with Gloo (loom-anchor-gloo) and OpenMPI (loom-anchor-mpi under
// mpirun). Every side runs the sweep of collective_sweep.h (see Note [collective sweep]) as its own
// jobs of N processes, one job per configuration (each Gloo configuration alone), under a deadline
// (Note [bench deadlines] in job.h): a configuration that hangs or crashes is stopped, named with
// its reason in the table, and the others go on. The driver runs the jobs one after the other,
// round after round with the order rotated, and takes per size the median over rounds (this 2-core
// machine is shared and noisy); verdicts, spreads and the legend come from report.h.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "bench.h"
#include "cli.h"
#include "collectives.h"
#include "job.h"
#include "loom/config.h"
#include "loom/error.h"
#include "report.h"

namespace loom::bench {
namespace {

const config::StringSetting kTestFault(
    "LOOM_BENCH_TEST_FAULT", "",
    "test hook of `loom bench collectives`: ranks that misbehave on "
    "purpose, CONFIG:RANK:BYTES:hang|stuck|exit|abort (Note [sweep "
    "test hook] in bench/collective_sweep.h)");

using coll::Op;

// ---- one side of the table ----

// A configuration that failed (hung, crashed, or its peer did): it is not run again.
struct Failure {
  std::string config;
  int round = 0;  // 1-based
  std::string reason;
};

struct Side {
  std::string key;    // loom, gloo, mpi: the --vs names
  std::string title;  // for the table
  std::string unavailable;
  std::vector<std::string> configs;  // run as one job each
  std::function<std::vector<JobProcess>(const std::string& config, int round)> job;
  std::vector<std::string> info;
  // bytes -> configuration -> per-round medians
  std::map<int64_t, std::map<std::string, std::vector<double>>> times;
  std::map<int64_t, int64_t> counts;
  int checks_ok = 0;
  std::vector<std::string> check_failures;
  std::set<std::pair<std::string, long long>> failed_in_round;  // (config, bytes), this round
  std::set<long long> sizes_done;                               // by the job running now
  long long begun = -1;  // the largest size a rank of the running job has started
  std::vector<Failure> failures;

  // How the table and the failures name a configuration: "gloo ring", or "mpi" for a side of one.
  std::string label(const std::string& config) const {
    return configs.size() > 1 ? key + " " + config : key;
  }
  bool dropped(const std::string& config) const {
    return std::any_of(failures.begin(), failures.end(),
                       [&](const Failure& f) { return f.config == config; });
  }

  void take(const std::string& line, bool verbose) {
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "info") {
      std::string text = line.substr(std::min(line.size(), size_t{5}));
      if (std::find(info.begin(), info.end(), text) == info.end()) info.push_back(text);
    } else if (kind == "begin") {
      std::string config;
      long long bytes = 0;
      if (is >> config >> bytes) begun = std::max(begun, bytes);
    } else if (kind == "result") {
      std::string config, algorithm;
      long long bytes = 0, count = 0;
      double us = NAN;
      if (is >> config >> algorithm >> bytes >> count >> us) {
        sizes_done.insert(bytes);
        // A configuration whose answer was wrong at this size in this round has no speed to report.
        if (!failed_in_round.count({config, bytes})) {
          times[bytes][algorithm].push_back(us);
          counts[bytes] = count;
        }
      }
    } else if (kind == "check") {
      std::string config, verdict;
      long long bytes = 0;
      int rank = 0;
      is >> config >> bytes >> rank >> verdict;
      if (verdict == "ok") {
        ++checks_ok;
      } else {
        failed_in_round.insert({config, bytes});
        check_failures.push_back(
            detail::str_cat(key, " ", config, " at ", bytes, " bytes, rank ", rank, ": ",
                            line.substr(std::min(line.size(), line.find(verdict)))));
      }
    } else if (!line.empty()) {
      // Anything else (mpirun's notices, a library's warnings) goes to stderr, marked with the
      // side.
      std::fprintf(stderr, "[%s] %s\n", key.c_str(), line.c_str());
    }
    if (verbose && (kind == "result" || kind == "check"))
      std::fprintf(stderr, "[%s] %s\n", key.c_str(), line.c_str());
  }

  // The best configuration at a size (lowest median over rounds): {config, us}; {"", NaN} if none.
  std::pair<std::string, double> best(int64_t bytes) const {
    std::pair<std::string, double> b{"", NAN};
    auto it = times.find(bytes);
    if (it == times.end()) return b;
    for (const auto& [config, v] : it->second) {
      double m = median(v);
      if (std::isnan(b.second) || m < b.second) b = {config, m};
    }
    return b;
  }
  std::vector<double> rounds_of(int64_t bytes, const std::string& config) const {
    auto it = times.find(bytes);
    if (it == times.end() || !it->second.count(config)) return {};
    return it->second.at(config);
  }

  // Why an anchor has no figure at a size, short enough for a table cell.
  std::string missing_reason() const {
    if (failures.empty()) return "no result at this size";
    std::string names;
    for (const Failure& f : failures) names += (names.empty() ? "" : ", ") + f.config;
    return names + " failed";
  }
};

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A body that replaces the child with argv.
std::function<int()> exec_body(std::vector<std::string> argv) {
  return [argv] {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::fprintf(stderr, "loom bench collectives: cannot run %s: %s\n", a[0], std::strerror(errno));
    return 127;
  };
}

// The first size of the sweep the running job has no result for ("" when it has them all).
std::string size_in_progress(const coll::SweepOptions& o, const std::set<long long>& done) {
  for (int64_t nominal : coll::sweep_sizes(o)) {
    const int64_t count = coll::count_for(o, nominal);
    if (count > 0 && !done.count(count * 4)) return coll::format_bytes(nominal);
  }
  return "";
}

// A configuration's deadline, scaled to the sweep: connecting, and per size a second of slack, the
// timed blocks twice over and every call moving its bytes at 50 MB/s (a hundred times slower than
// any library here on one host); more when the ranks outnumber the cores.
double default_deadline(const coll::SweepOptions& o, unsigned cores) {
  double s = 30;
  for (int64_t b : coll::sweep_sizes(o)) {
    s += 1.0 + 2.0 * o.repeats * o.block_ms / 1e3 +
         (o.warmup + o.repeats + (o.check ? 1 : 0) + 2) * static_cast<double>(b) / 50e6;
  }
  return std::ceil(s * std::max(1.0, static_cast<double>(o.np) / std::max(1u, cores)));
}

// The Gloo configurations for the op and rank count (loom-anchor-gloo --list-configs knows them),
// or only those of --gloo-configs. Sets *unavailable when the anchor cannot say.
std::vector<std::string> gloo_configs(const std::vector<std::string>& argv,
                                      std::vector<std::string>* info, std::string* unavailable) {
  std::vector<std::string> configs;
  JobOptions jo;
  jo.deadline_s = 60;
  JobResult r = run_job(
      {{"loom-anchor-gloo --list-configs", exec_body(argv)}}, jo,
      [&](size_t, const std::string& line) {
        std::istringstream is(line);
        std::string kind, c;
        is >> kind;
        if (kind == "configs") {
          while (is >> c) configs.push_back(c);
        } else if (kind == "info") {
          info->push_back(line.substr(5));
        }
      },
      [](size_t, const std::string& line) { std::fprintf(stderr, "[gloo] %s\n", line.c_str()); });
  LOOM_CHECK(r.ok() || r.timed_out || r.exit.code != CLD_EXITED || r.exit.status != 2,
             "[bench collectives] ", r.last_stderr);
  if (!r.ok()) *unavailable = "loom-anchor-gloo --list-configs: " + r.reason();
  if (r.ok() && configs.empty()) *unavailable = "loom-anchor-gloo listed no configuration";
  return configs;
}

// ---- targets from the issue ----

struct Target {
  const char* anchor;
  int64_t min_bytes, max_bytes;
  bool latency;  // loom time / anchor time <= ratio; otherwise loom busbw / anchor busbw >= ratio
  double ratio;
};
constexpr Target kTargets[] = {
    {"gloo", 1 << 20, INT64_MAX, false, 1.2},
    {"mpi", 1 << 20, INT64_MAX, false, 1.0},
    {"mpi", 4 << 10, 4 << 10, true, 1.0},
};
constexpr const char* kTargetsText =
    "busbw >= 1.2x Gloo and >= 1.0x OpenMPI from 1 MiB; time <= OpenMPI's at 4 KiB";

const Target* target_for(const std::string& anchor, int64_t bytes) {
  for (const Target& t : kTargets) {
    if (anchor == t.anchor && bytes >= t.min_bytes && bytes <= t.max_bytes) return &t;
  }
  return nullptr;
}

// Rows below this size also get a latency ratio, and their JSON figure is the time.
constexpr int64_t kLatencyBytes = 1 << 20;

void usage() {
  std::printf(
      "usage: loom bench collectives [--np N] [--op OP] [--sizes MIN:MAX] [--algo A] [--transport "
      "T]\n"
      "                              [--vs gloo,mpi] [--check] [--iters K] [--warmup W] [--repeats "
      "R]\n"
      "                              [--block-ms B] [--rounds R] [--gloo-configs LIST] [--deadline "
      "S]\n"
      "                              [--json FILE] [--verbose]\n"
      "  One collective over N local processes, nccl-tests style: per size (powers of two, bytes "
      "of\n"
      "  f32) the time per call, algbw = bytes/time and busbw = algbw * factor (allreduce "
      "2(n-1)/n,\n"
      "  allgather and reduce_scatter (n-1)/n, broadcast 1), loom's algorithm, and for each anchor "
      "its\n"
      "  best configuration with loom/anchor ratios (bw x: busbw ratio, higher is better; lat x "
      "below\n"
      "  1 MiB: time ratio, lower is better), the spread across rounds, target and verdict.\n"
      "  --np N            ranks (default 2)\n"
      "  --op OP           allreduce (default), allgather, reduce_scatter or broadcast\n"
      "  --sizes MIN:MAX   e.g. 4K:64M (default)\n"
      "  --algo A          loom's allreduce algorithm: ring, tree, dbt, rhd, oneshot, ... (auto)\n"
      "  --transport T     loom's transport: shm or tcp (default: auto)\n"
      "  --vs LIST         anchors: gloo (loom-anchor-gloo), mpi (loom-anchor-mpi under mpirun)\n"
      "  --check           verify every result against closed-form sums; non-zero exit on a "
      "mismatch\n"
      "  --block-ms B      a timed block lasts about B ms (20) at the warm-up's pace: small "
      "messages\n"
      "                    get many calls, big ones few; --iters K caps the calls per block "
      "(1000)\n"
      "  --repeats R       timed blocks per size, each after a barrier (5; the median is kept);\n"
      "                    --warmup W untimed calls before them (5)\n"
      "  --rounds R        each side runs R times, order rotated; medians over rounds (default 3)\n"
      "  --gloo-configs L  Gloo configurations to try (default: all that fit, see loom-anchor-gloo "
      "--help)\n"
      "  --deadline S      seconds one configuration's sweep may take (default: scaled to the "
      "sizes);\n"
      "                    past it, or when one of its ranks fails, its processes are stopped, "
      "the\n"
      "                    table names it with the reason, and it is not run again\n"
      "  Exit status: 0; 1 when loom failed or a check did; 3 when only anchor configurations "
      "failed.\n");
}

// ---- the table ----

// A figure with `precision` decimals, or "-" when there is none.
std::string fixed(double v, int precision) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

// Pads or cuts s to n characters.
std::string fit(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  s.resize(n, ' ');
  return s;
}

int print_collectives(const coll::SweepOptions& o, const LoomRankOptions& lo, int rounds,
                      double deadline_s, const std::vector<Side>& sides,
                      const std::optional<std::string>& json_path) {
  const double factor = coll::busbw_factor(o.op, o.np);
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("\n");
  for (const Side& s : sides) {
    std::string note;
    if (s.key == "loom") {
      note = detail::str_cat("algo ", lo.algo.empty() ? "auto" : lo.algo, ", transport ",
                             lo.transport.empty() ? "auto" : lo.transport, "; ");
    }
    for (const auto& i : s.info) note += (note.empty() || note.back() == ' ' ? "" : "; ") + i;
    if (s.configs.size() > 1) {
      note += "; configs";
      for (const auto& c : s.configs) note += " " + c;
    }
    std::printf("%-5s %s\n", (s.key + ":").c_str(),
                !s.unavailable.empty() ? ("not run: " + s.unavailable).c_str() : note.c_str());
  }
  std::string head1 = detail::str_cat(std::string(23, ' '), "loom");
  char line[512];
  std::snprintf(line, sizeof(line), "%10s %10s %-9s %9s %7s %7s", "size(B)", "count", "algo",
                "time(us)", "algbw", "busbw");
  std::string head2 = line;
  head1.resize(head2.size(), ' ');
  std::vector<const Side*> anchors;
  for (const Side& s : sides) {
    if (s.key != "loom" && s.unavailable.empty()) anchors.push_back(&s);
  }
  // An anchor's cell: " | " config time busbw bw-x lat-x, then spread, target and verdict; a
  // missing figure spans the first five as "no anchor (reason)".
  constexpr size_t kFigures = 19 + 1 + 9 + 1 + 7 + 1 + 6 + 1 + 6;
  for (const Side* a : anchors) {
    std::snprintf(line, sizeof(line), " | %-19s %9s %7s %6s %6s %7s %-7s %-10s", "config",
                  "time(us)", "busbw", "bw x", "lat x", "spread", "target", "verdict");
    std::string h = " | " + a->title;
    h.resize(std::strlen(line), ' ');
    head1 += h;
    head2 += line;
  }
  std::printf("%s\n%s\n", head1.c_str(), head2.c_str());

  const Side& loom = sides[0];
  std::ostringstream js;
  js << "{\"suite\": \"collectives\", \"machine\": {\"cpu\": " << report::json_string(cpu_model())
     << ", \"cores\": " << cores << "}, \"config\": {\"op\": \"" << coll::op_name(o.op)
     << "\", \"np\": " << o.np << ", \"algo\": \"" << (lo.algo.empty() ? "auto" : lo.algo)
     << "\", \"transport\": \"" << (lo.transport.empty() ? "auto" : lo.transport)
     << "\", \"rounds\": " << rounds << ", \"deadline_s\": " << report::json_number(deadline_s)
     << "}, \"results\": [";
  bool first_json = true;
  std::vector<std::string> misses, ties;
  report::Tally tally;
  for (int64_t nominal : coll::sweep_sizes(o)) {
    const int64_t count = coll::count_for(o, nominal);
    const int64_t bytes = count * 4;
    if (count <= 0) continue;
    const bool lat_row = bytes < kLatencyBytes;
    // Per-round figures in the row's unit: time, or busbw from 1 MiB.
    auto in_unit = [&](std::vector<double> us) {
      if (!lat_row) {
        for (double& t : us) t = bytes / t / 1e3 * factor;
      }
      return us;
    };
    auto [algo, us] = loom.best(bytes);
    const std::vector<double> loom_rounds = in_unit(loom.rounds_of(bytes, algo));
    const double busbw = lat_row ? bytes / us / 1e3 * factor : median(loom_rounds);
    std::snprintf(line, sizeof(line), "%10lld %10lld %-9s %9s %7s %7s",
                  static_cast<long long>(bytes), static_cast<long long>(count),
                  algo.empty() ? "-" : algo.c_str(), fixed(us, 1).c_str(),
                  fixed(busbw / factor, 3).c_str(), fixed(busbw, 3).c_str());
    std::string row_text = line;
    const std::string name =
        detail::str_cat(coll::op_name(o.op), "_np", o.np, "_", coll::format_bytes(bytes));
    auto json_entry = [&](const report::Row& row, const std::string& anchor_label,
                          const std::string& config) {
      js << (first_json ? "" : ", ")
         << report::json_row(
                row, anchor_label,
                detail::str_cat("\"bytes\": ", bytes, ", \"loom_algo\": ",
                                report::json_string(algo), ", \"anchor_config\": ",
                                config.empty() ? "null" : report::json_string(config)));
      first_json = false;
    };
    for (const Side* a : anchors) {
      auto [config, aus] = a->best(bytes);
      report::Row row;
      row.name = name;
      row.unit = lat_row ? "us" : "GB/s busbw";
      row.lower_is_better = lat_row;
      const Target* t = target_for(a->key, bytes);
      if (t && t->latency == lat_row) row.target = report::Target::ratio(t->ratio);
      row.loom_rounds = loom_rounds;
      row.anchor_rounds = in_unit(a->rounds_of(bytes, config));
      if (config.empty()) row.anchor_missing = a->missing_reason();
      const report::Summary sm = report::summarize(row);
      tally.add(sm.verdict);
      const double abus = lat_row ? bytes / aus / 1e3 * factor : sm.anchor;
      const double bw_x = lat_row ? busbw / abus : sm.ratio;
      const double lat_x = lat_row ? sm.ratio : NAN;
      const std::string where = detail::str_cat(coll::format_bytes(bytes), " vs ", a->title,
                                                config.empty() ? "" : " (" + config + ")");
      if (sm.verdict == report::Verdict::kMiss) {
        char m[200];
        if (lat_row) {
          std::snprintf(m, sizeof(m), "%s: loom %.1f us vs %.1f us, lat x %.2f, target <= %.1f",
                        where.c_str(), us, aus, lat_x, t->ratio);
        } else {
          std::snprintf(m, sizeof(m), "%s: loom %.2f vs %.2f GB/s busbw, bw x %.2f, target >= %.1f",
                        where.c_str(), busbw, abus, bw_x, t->ratio);
        }
        misses.push_back(m);
      }
      if (sm.tie) ties.push_back(where + ": " + report::tie_warning(sm));
      std::string figures;
      if (config.empty()) {
        figures = fit("no anchor (" + row.anchor_missing + ")", kFigures);
      } else {
        std::snprintf(line, sizeof(line), "%-19s %9s %7s %6s %6s", config.c_str(),
                      fixed(aus, 1).c_str(), fixed(abus, 3).c_str(), fixed(bw_x, 2).c_str(),
                      lat_row ? fixed(lat_x, 2).c_str() : "");
        figures = line;
      }
      std::snprintf(line, sizeof(line), " | %s %7s %-7s %-10s", figures.c_str(),
                    report::percent_text(sm.spread).c_str(),
                    report::target_text(row.target, row.lower_is_better).c_str(),
                    report::verdict_text(sm.verdict));
      row_text += line;
      json_entry(row, a->title + (config.empty() ? "" : " (" + config + ")"), config);
    }
    if (anchors.empty()) {
      report::Row row;
      row.name = name;
      row.unit = lat_row ? "us" : "GB/s busbw";
      row.lower_is_better = lat_row;
      row.loom_rounds = loom_rounds;
      row.anchor_missing = "no anchor asked for (--vs)";
      json_entry(row, "", "");
    }
    while (!row_text.empty() && row_text.back() == ' ') row_text.pop_back();
    std::printf("%s\n", row_text.c_str());
  }
  js << "], \"failures\": [";
  int status = 0;
  bool first_failure = true, anchor_failed = false;
  for (const Side& s : sides) {
    for (const Failure& f : s.failures) {
      if (first_failure) {
        std::printf(
            "\nfailed configurations (stopped, not run again; their sizes before the "
            "failure are kept):\n");
      }
      std::printf("  %s: FAILED (%s) in round %d\n", s.label(f.config).c_str(), f.reason.c_str(),
                  f.round);
      js << (first_failure ? "" : ", ") << "{\"side\": " << report::json_string(s.key)
         << ", \"config\": " << report::json_string(f.config) << ", \"round\": " << f.round
         << ", \"reason\": " << report::json_string(f.reason) << "}";
      first_failure = false;
      if (s.key != "loom") anchor_failed = true;
    }
  }
  js << "]}\n";
  for (const auto& t : ties) std::printf("warning: %s\n", t.c_str());
  std::printf(
      "\ntime: per call, median over rounds of each round's median over blocks (a block: calls "
      "after a barrier, timed by its slowest rank); anchors: their fastest configuration per "
      "size.\nbw x = loom busbw / anchor busbw (higher is better); lat x = loom time / anchor time "
      "(lower is better).\n%s%s",
      report::legend({{"us", true}, {"GB/s algbw", false}, {"GB/s busbw", false}}).c_str(),
      report::ratio_note().c_str());
  if (anchors.empty()) {
    std::printf("targets (%s): none judged, no anchor ran (--vs gloo,mpi)\n", kTargetsText);
  } else {
    std::printf("%s\n", report::targets_line(tally, kTargetsText).c_str());
    for (const auto& m : misses) std::printf("  MISS %s\n", m.c_str());
  }

  if (!loom.failures.empty() || loom.times.empty()) status = 1;
  if (o.check) {
    std::vector<std::string> failures;
    int ok = 0;
    std::string counts;
    for (const Side& s : sides) {
      if (!s.unavailable.empty()) continue;
      failures.insert(failures.end(), s.check_failures.begin(), s.check_failures.end());
      ok += s.checks_ok;
      counts += detail::str_cat(counts.empty() ? "" : ", ", s.key, " ", s.checks_ok);
    }
    if (failures.empty() && loom.checks_ok > 0 && loom.failures.empty()) {
      std::printf(
          "check OK: %d results match the closed-form values (%s; every size, configuration, rank "
          "and round)\n",
          ok, counts.c_str());
    } else {
      std::printf(
          "check FAILED: %zu mismatches (loom %zu)%s; a wrong anchor result is left out of the "
          "table\n",
          failures.size(), loom.check_failures.size(),
          loom.checks_ok == 0 ? ", and loom produced no verified result" : "");
      for (const auto& f : failures) std::printf("  %s\n", f.c_str());
      status = 1;
    }
  }
  if (status == 0 && anchor_failed) status = 3;  // loom's figures are whole; an anchor's are not
  if (json_path) {
    std::ofstream out(*json_path);
    LOOM_CHECK(out.good(), "[bench collectives] cannot write ", *json_path);
    out << js.str();
    std::printf("wrote %s\n", json_path->c_str());
  }
  return status;
}

int run_collectives(const std::vector<std::string>& argv) {
  cli::Args args(argv, {"help", "check", "verbose"},
                 {"np", "op", "sizes", "algo", "transport", "vs", "iters", "warmup", "repeats",
                  "block-ms", "rounds", "json", "gloo-configs", "deadline"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  LOOM_CHECK(args.positionals().empty(), "[bench collectives] unexpected argument '",
             args.positionals()[0], "' (see --help)");
  coll::SweepOptions o;
  o.test_fault = kTestFault.get();
  o.np = static_cast<int>(args.get_int("np", 2, 2, 64));
  std::string op = args.get_or("op", "allreduce");
  LOOM_CHECK(coll::parse_op(op, &o.op), "[bench collectives] --op must be allreduce, allgather, ",
             "reduce_scatter or broadcast but got '", op, "'");
  std::string err = coll::parse_sizes(args.get_or("sizes", "4K:64M"), &o);
  LOOM_CHECK(err.empty(), "[bench collectives] ", err);
  auto positive = [&](const char* name, int64_t fallback) {
    return static_cast<int>(args.get_int(name, fallback, 1, 1 << 30));
  };
  o.iters = positive("iters", 1000);
  o.warmup = positive("warmup", 5);
  o.repeats = positive("repeats", 5);
  o.block_ms = positive("block-ms", 20);
  o.check = args.flag("check");
  const int rounds = positive("rounds", 3);
  const unsigned cores = std::thread::hardware_concurrency();
  const bool deadline_given = args.get("deadline").has_value();
  const double deadline_s =
      deadline_given ? static_cast<double>(positive("deadline", 1)) : default_deadline(o, cores);
  const bool verbose = args.flag("verbose");
  LoomRankOptions lo;
  lo.algo = args.get_or("algo", "");
  lo.transport = args.get_or("transport", "");
  // The libraries' own waits end no sooner than the deadline: the driver names the hang first. Two
  // seconds after it, since the driver looks at the clock every 50 ms and may run late on a loaded
  // machine, while a rank's wait may have begun only milliseconds after the job did.
  lo.timeout_s = deadline_s + 2;
  if (lo.algo == "auto") lo.algo.clear();
  if (lo.transport == "auto") lo.transport.clear();
  // Algorithm names are loom's to check (a rank reports an unknown one); transports are few.
  LOOM_CHECK(lo.transport.empty() || lo.transport == "shm" || lo.transport == "tcp",
             "[bench collectives] --transport must be shm, tcp or auto but got '", lo.transport,
             "'");
  std::vector<std::string> vs;
  {
    std::stringstream ss(args.get_or("vs", ""));
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty() || item == "none") continue;
      LOOM_CHECK(item == "gloo" || item == "mpi",
                 "[bench collectives] --vs takes gloo and/or mpi but got '", item, "'");
      if (std::find(vs.begin(), vs.end(), item) == vs.end()) vs.push_back(item);
    }
  }

  char tmpl[] = "/tmp/loom-bench-collectives-XXXXXX";
  LOOM_CHECK_AS(DistError, ::mkdtemp(tmpl) != nullptr,
                "[bench collectives] mkdtemp: ", std::strerror(errno));
  const std::string tmp = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmp};

  std::vector<Side> sides;
  {
    Side s;
    s.key = "loom";
    s.title = "loom";
    s.configs = {lo.algo.empty() ? "auto" : lo.algo};
    s.job = [o, lo, tmp](const std::string&, int round) {
      LoomRankOptions l = lo;
      l.store_path = tmp + "/loom-store-" + std::to_string(round);
      std::vector<JobProcess> ranks;
      for (int r = 0; r < o.np; ++r) {
        ranks.push_back(
            {"rank " + std::to_string(r), [o, l, r] { return run_loom_rank(o, r, l); }});
      }
      return ranks;
    };
    sides.push_back(std::move(s));
  }
  const std::vector<std::string> sweep = coll::sweep_args(o);
  char timeout_arg[32];
  std::snprintf(timeout_arg, sizeof(timeout_arg), "%g", deadline_s);
  for (const std::string& a : vs) {
    Side s;
    s.key = a;
    if (a == "gloo") {
      s.title = "Gloo";
      const std::string bin = cli::self_dir() + "/loom-anchor-gloo";
      if (::access(bin.c_str(), X_OK) != 0) {
        s.unavailable =
            "loom-anchor-gloo is not built (needs libgloo-dev: run scripts/setup.sh, reconfigure)";
      } else {
        std::vector<std::string> list = {bin, "--list-configs"};
        list.insert(list.end(), sweep.begin(), sweep.end());
        if (auto c = args.get("gloo-configs")) list.insert(list.end(), {"--configs", *c});
        s.configs = gloo_configs(list, &s.info, &s.unavailable);
      }
      // Each configuration alone, each rank a process of the job: a configuration that hangs
      // takes only itself down, and the driver sees which rank failed.
      s.job = [bin, sweep, tmp, np = o.np, t = std::string(timeout_arg)](const std::string& config,
                                                                         int round) {
        const std::string store = tmp + "/gloo-" + config + "-" + std::to_string(round);
        std::vector<JobProcess> ranks;
        for (int r = 0; r < np; ++r) {
          std::vector<std::string> argv = {bin,       "--rank",    std::to_string(r),
                                           "--store", store,       "--timeout",
                                           t,         "--configs", config};
          argv.insert(argv.end(), sweep.begin(), sweep.end());
          ranks.push_back({"rank " + std::to_string(r), exec_body(argv)});
        }
        return ranks;
      };
    } else {
      s.title = "OpenMPI";
      s.configs = {"default"};
      std::string bin = cli::self_dir() + "/loom-anchor-mpi";
      std::string mpirun = find_in_path("mpirun");
      if (::access(bin.c_str(), X_OK) != 0) {
        s.unavailable =
            "loom-anchor-mpi is not built (needs libopenmpi-dev: run scripts/setup.sh, "
            "reconfigure)";
      } else if (mpirun.empty()) {
        s.unavailable = "mpirun is not on PATH (needs openmpi-bin: run scripts/setup.sh)";
      }
      // OpenMPI's best configuration on one host, made explicit: the shared-memory BTL (vader, with
      // single-copy CMA by default); --oversubscribe lets N exceed the cores.
      std::vector<std::string> argv = {mpirun, "--allow-run-as-root", "--oversubscribe",
                                       "-np",  std::to_string(o.np),  "--mca",
                                       "btl",  "self,vader",          bin};
      argv.insert(argv.end(), sweep.begin(), sweep.end());
      s.job = [argv](const std::string&, int) {
        return std::vector<JobProcess>{{"mpirun", exec_body(argv)}};
      };
    }
    sides.push_back(std::move(s));
  }

  std::printf(
      "loom bench collectives: %s, %d ranks, f32, %s..%s, %d round(s); sides take turns, order "
      "rotated per round\ncpu: %s, %u cores%s\ndeadline per configuration and round: %g s (%s)\n",
      coll::op_name(o.op), o.np, coll::format_bytes(o.min_bytes).c_str(),
      coll::format_bytes(o.max_bytes).c_str(), rounds, cpu_model().c_str(), cores,
      static_cast<unsigned>(o.np) > cores ? " (more ranks than cores: they time-share)" : "",
      deadline_s, deadline_given ? "--deadline" : "scaled to the sizes; --deadline S sets it");
  std::fflush(stdout);

  JobOptions jo;
  jo.deadline_s = deadline_s;
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < sides.size(); ++k) {
      Side& s = sides[(k + static_cast<size_t>(round)) % sides.size()];
      if (!s.unavailable.empty()) continue;
      for (const std::string& config : s.configs) {
        if (s.dropped(config)) continue;
        s.failed_in_round.clear();
        s.sizes_done.clear();
        s.begun = -1;
        const std::string label = s.label(config);
        std::vector<JobProcess> procs = s.job(config, round);
        JobResult r = run_job(
            procs, jo, [&](size_t, const std::string& line) { s.take(line, verbose); },
            [&](size_t p, const std::string& line) {
              std::fprintf(stderr, "[%s %s] %s\n", label.c_str(), procs[p].name.c_str(),
                           line.c_str());
            });
        // A sweep that ran to its end and exits 3 had check mismatches: the check section says so.
        const bool checks_only = !r.timed_out && size_in_progress(o, s.sizes_done).empty() &&
                                 r.exit.code == CLD_EXITED && r.exit.status == 3;
        if (!r.ok() && !checks_only) {
          const std::string at = s.begun < 0 ? "the start" : coll::format_bytes(s.begun);
          s.failures.push_back({config, round + 1, r.reason(at)});
          std::fprintf(stderr, "bench collectives: %s FAILED in round %d: %s\n", label.c_str(),
                       round + 1, s.failures.back().reason.c_str());
        }
        std::fprintf(stderr, "bench collectives: round %d/%d: %s took %.1f s\n", round + 1, rounds,
                     label.c_str(), r.seconds);
      }
    }
  }
  return print_collectives(o, lo, rounds, deadline_s, sides, args.get("json"));
}

const RegisterSuite kCollectives([] {
  Suite s;
  s.name = "collectives";
  s.description =
      "allreduce/allgather/reduce_scatter/broadcast over N processes vs Gloo and OpenMPI "
      "(own options: --help)";
  s.run = run_collectives;
  return s;
}());

}  // namespace
}  // namespace loom::bench
