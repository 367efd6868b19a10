// `loom trace summarize FILE` and `loom trace diff A B`: read Chrome traces written by loom's
// profiler
// (`loom train --profile out.json[.gz]`, or Profile + write_chrome_trace) and say where time went.
// `loom trace record FILE [--gpu]`: profiles a small copy-and-fill workload (on the GPU with --gpu,
// with its kernels and copies on device lanes) and writes its trace.
#include <cstdio>

#include "cli.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/profiler.h"
#include "loom/tensor.h"

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

// One step of the recorded workload: host -> device, a fill, a device copy, device -> host (all
// on the CPU without --gpu).
void workload_step(const Tensor& host, Device device) {
  Tensor dev = host.to(device);
  Tensor filled = empty({host.numel()}, TensorOptions(kFloat32).with_device(device));
  filled.fill_(1.0);
  Tensor copy = empty_like(dev);
  copy.copy_(dev);
  copy.to(kCPU);
}

int run_record(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "gpu"}, {"steps", "numel"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom trace record FILE[.gz] [--gpu] [--steps N] [--numel N]\n"
        "  Profiles N steps (default 5) of a small workload (a host-to-device copy, a fill, a\n"
        "  device copy and a copy back, of N float32 values, default 1M) and writes the Chrome\n"
        "  trace. --gpu runs it on cuda:0 and traces the GPU through CUPTI: kernels and copies\n"
        "  on device lanes linked to their operators, device time per operator, GPU busy and idle\n"
        "  per step. Without a GPU or CUPTI, --gpu fails and says why.\n");
    return args.flag("help") ? 0 : 2;
  }
  const int64_t steps = args.get_int("steps", 5, 1, 100000);
  const int64_t numel = args.get_int("numel", int64_t{1} << 20, 1, int64_t{1} << 32);
  const bool gpu = args.flag("gpu");
  const Device device = gpu ? Device(DeviceType::CUDA, 0) : Device(kCPU);
  profiler::ProfileOptions o;
  o.gpu = gpu;
  profiler::Profile p(o);
  const Tensor host = full({numel}, 2.0, TensorOptions(kFloat32));
  if (gpu && cuda::is_available()) workload_step(host, device);  // warm-up, not recorded
  p.start();  // with --gpu and no way to trace it: NotImplementedError saying why
  for (int64_t i = 0; i < steps; ++i) {
    workload_step(host, device);
    p.step();
  }
  p.stop();
  const std::string& path = args.positionals()[0];
  profiler::write_chrome_trace(p.trace(), path);
  std::printf("GPU activity tracing: %s\ntrace written to %s\n",
              gpu ? "on (CUPTI)" : "off (--gpu turns it on)", path.c_str());
  std::printf("%s", profiler::summarize(p.trace()).c_str());
  return 0;
}

const RegisterCommand kRecord("trace record",
                              "profile a small workload (--gpu: with CUPTI's GPU timeline)",
                              run_record);
const RegisterCommand kSummarize("trace summarize",
                                 "top operators and step breakdown of a loom trace", run_summarize);
const RegisterCommand kDiff("trace diff", "per-operator self-time changes between two loom traces",
                            run_diff);

}  // namespace
}  // namespace loom::cli
