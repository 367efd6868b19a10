// `loom trace summarize FILE` and `loom trace diff A B`: read Chrome traces written by loom's
// profiler
// (`loom train --profile out.json[.gz]`, or Profile + write_chrome_trace) and say where time went.
#include <cstdio>

#include "cli.h"
#include "loom/error.h"
#include "loom/profiler.h"

namespace loom::cli {
namespace {

int run_summarize(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "by-shapes"}, {"top"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom trace summarize FILE [--top N] [--by-shapes]\n"
        "  Reads a Chrome trace written by loom (plain or .gz) and prints the top operators by "
        "self\n"
        "  time (--by-shapes: grouped by operator and input shapes), the per-step breakdown into\n"
        "  compute, communication, data wait and idle, and what dominates.\n");
    return args.flag("help") ? 0 : 2;
  }
  const int64_t top = args.get_int("top", 15, 1, 1000000);
  LOOM_CHECK(top > 0, "[loom trace summarize] --top must be positive but is ", top);
  const std::string& path = args.positionals()[0];
  const profiler::Trace trace = profiler::read_chrome_trace(path);
  std::printf("trace %s\n", path.c_str());
  if (args.flag("by-shapes")) {
    std::printf(
        "\nTop %lld by self time, by operator and input shapes:\n%s", static_cast<long long>(top),
        profiler::format_table(profiler::key_averages(trace, profiler::GroupBy::NameAndShapes),
                               static_cast<size_t>(top))
            .c_str());
  }
  std::printf("%s", profiler::summarize(trace, static_cast<size_t>(top)).c_str());
  return 0;
}

int run_diff(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"top"});
  if (args.flag("help") || args.positionals().size() != 2) {
    std::printf(
        "usage: loom trace diff A B [--top N]\n"
        "  Compares two Chrome traces written by loom: the change of each operator's self time "
        "from A\n"
        "  to B (per step when both have ProfilerStep events), largest absolute change first.\n");
    return args.flag("help") ? 0 : 2;
  }
  const int64_t top = args.get_int("top", 20, 1, 1000000);
  LOOM_CHECK(top > 0, "[loom trace diff] --top must be positive but is ", top);
  const profiler::Trace a = profiler::read_chrome_trace(args.positionals()[0]);
  const profiler::Trace b = profiler::read_chrome_trace(args.positionals()[1]);
  std::printf("A: %s\nB: %s\n", args.positionals()[0].c_str(), args.positionals()[1].c_str());
  std::printf("%s",
              profiler::format_diff(profiler::diff_traces(a, b), static_cast<size_t>(top)).c_str());
  const auto sa = profiler::step_breakdown(a), sb = profiler::step_breakdown(b);
  if (!sa.empty() && !sb.empty()) {
    std::printf("A is dominated by %s; B by %s\n", profiler::dominant_part(sa).c_str(),
                profiler::dominant_part(sb).c_str());
  }
  return 0;
}

const RegisterCommand kSummarize("trace summarize",
                                 "top operators and step breakdown of a loom trace", run_summarize);
const RegisterCommand kDiff("trace diff", "per-operator self-time changes between two loom traces",
                            run_diff);

}  // namespace
}  // namespace loom::cli
