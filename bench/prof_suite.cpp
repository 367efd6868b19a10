// `loom bench prof`: what the profiler costs. The training step of `loom bench train` (MLP
// 784-512-256-10, batch 128, SGD with momentum, 1 thread) with a Profile recording operators, input
// shapes and allocator events, against the same step with no profile — the "anchor" is loom itself.
// Off and on alternate step by step (a schedule of wait 1, active 1) and every figure is a median
// over rounds of per-round medians, so drift on this shared machine hits both sides alike. The cost
// of one event is measured apart, on loom::add of 8 floats.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "bench.h"
#include "cli.h"
#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/parallel.h"
#include "loom/profiler.h"
#include "report.h"

namespace loom::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Mlp {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
  Mlp() {
    Generator gen(0);
    model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(784, 512, true, &gen));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(512, 256, true, &gen));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(256, 10, true, &gen));
    optim::SGDOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    opt = std::make_unique<optim::SGD>(model->parameters(), o);
    x = rand({128, 784}, {}, gen);
    y = randint(0, 10, {128}, DType::Int64, gen);
  }
  void step() {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
  }
};

// One round: `steps` training steps under a Profile whose schedule alternates a step not recorded
// and a step recorded (wait 1, active 1, forever), so that on and off steps interleave one by one.
// A step is timed on its own; the Profile's step() after it (which ends a recorded step's cycle and
// collects its trace) is not — that cost belongs to the end of a recorded window, not to each step.
struct Round {
  double off_ms = 0, on_ms = 0;  // medians of the round's steps
  double events = 0;             // events recorded per recorded step
};

Round run_round(Mlp& m, int steps) {
  profiler::ProfileOptions po;
  po.record_shapes = true;
  po.profile_memory = true;
  profiler::Schedule s;
  s.wait = 1;
  s.warmup = 0;
  s.active = 1;
  s.repeat = 0;
  po.schedule = s;
  int64_t events = 0, cycles = 0;
  po.on_trace_ready = [&](const profiler::Trace& t) {
    ++cycles;
    for (const profiler::Event& e : t.events) events += e.kind != profiler::EventKind::Step;
  };
  profiler::Profile prof(po);
  prof.start();
  std::vector<double> on, off;
  for (int i = 0; i < 2 * steps + 2; ++i) {
    const bool recording = prof.is_recording();
    const auto a = Clock::now();
    m.step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
    prof.step();
    if (i >= 2) (recording ? on : off).push_back(ms);  // the first two warm up
  }
  prof.stop();
  Round r;
  r.off_ms = median(off);
  r.on_ms = median(on);
  r.events = cycles > 0 ? static_cast<double>(events) / static_cast<double>(cycles) : 0;
  return r;
}

// ns per loom::add of 8 floats with the profiler off and recording (the cost of one event).
std::pair<double, double> add_cost(int adds) {
  Tensor a8 = ones({8}), b8 = ones({8});
  auto time_adds = [&] {
    const auto a = Clock::now();
    for (int i = 0; i < adds; ++i) Tensor c = add(a8, b8);
    return std::chrono::duration<double, std::nano>(Clock::now() - a).count() / adds;
  };
  time_adds();
  const double off = time_adds();
  profiler::Profile prof;
  prof.start();
  time_adds();  // grows the buffers
  const double on = time_adds();
  prof.stop();
  return {off, on};
}

int run_prof(const std::vector<std::string>& argv) {
  cli::Args args(argv, {"help", "quick"}, {"rounds", "steps", "json"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom bench prof [--rounds N] [--steps K] [--quick] [--json FILE]\n"
        "  Profiler overhead on the training step of `loom bench train` (MLP 784-512-256-10, batch "
        "128,\n"
        "  SGD momentum, 1 thread): loom with a Profile recording operators, shapes and memory vs "
        "loom\n"
        "  without one, interleaved, medians over rounds. Target: <= 3%% overhead.\n");
    return 0;
  }
  const bool quick = args.flag("quick");
  const int rounds = static_cast<int>(args.get_int("rounds", quick ? 2 : 9, 1, 10000));
  const int steps = static_cast<int>(args.get_int("steps", quick ? 5 : 25, 1, 100000));
  const int adds = quick ? 5000 : 20000;
  const int saved_threads = get_num_threads();
  set_num_threads(1);
  std::printf(
      "loom bench prof: %d round(s) of %d steps off and %d on, alternating step by step\ncpu: %s, "
      "%u cores\n",
      rounds, steps, steps, cpu_model().c_str(), std::thread::hardware_concurrency());
  std::fflush(stdout);
  Mlp m;
  for (int i = 0; i < 3; ++i) m.step();
  std::vector<double> off_ms, on_ms, ratios, off_add, on_add, events;
  for (int r = 0; r < rounds; ++r) {
    const Round x = run_round(m, steps);
    off_ms.push_back(x.off_ms);
    on_ms.push_back(x.on_ms);
    ratios.push_back(x.on_ms / x.off_ms);
    events.push_back(x.events);
    const auto [off, on] = add_cost(adds);
    off_add.push_back(off);
    on_add.push_back(on);
    std::fprintf(stderr,
                 "bench: round %d/%d: step %.3f ms off, %.3f ms on (%+.2f%%); add_8 %.0f ns off, "
                 "%.0f ns on\n",
                 r + 1, rounds, x.off_ms, x.on_ms, 100.0 * (x.on_ms / x.off_ms - 1.0), off, on);
  }
  set_num_threads(saved_threads);
  // Both sides of a row are measured in the same round, so the per-round ratios are paired (same
  // conditions) and their median is the figure to trust.
  auto ratios_of = [](const std::vector<double>& on, const std::vector<double>& off) {
    std::vector<double> q;
    for (size_t i = 0; i < on.size(); ++i) q.push_back(on[i] / off[i]);
    return q;
  };
  std::vector<report::Row> rows(2);
  rows[0].name = "mlp_step_t1";
  rows[0].unit = "ms/step";
  rows[0].target = report::Target::ratio(1.03);
  rows[0].loom_rounds = on_ms;
  rows[0].anchor_rounds = off_ms;
  rows[0].paired_ratios = ratios;
  rows[1].name = "add_8";
  rows[1].unit = "ns/op";
  rows[1].loom_rounds = on_add;
  rows[1].anchor_rounds = off_add;
  rows[1].paired_ratios = ratios_of(on_add, off_add);
  const double ratio = median(ratios), ev = median(events), step_off = median(off_ms);
  std::printf("\n%s", report::render_table(rows, "profiler on", "off (anchor)").c_str());
  const double per_event_ns = median(on_add) - median(off_add);
  std::printf(
      "\nprofiler overhead on the training step: %+.2f%% (median of %d paired rounds); %.0f events "
      "per step,"
      " ~%.0f ns per event (add_8 on - off), i.e. ~%.2f%% of the step expected\n",
      100.0 * (ratio - 1.0), rounds, ev, per_event_ns, 100.0 * ev * per_event_ns * 1e-6 / step_off);
  if (auto path = args.get("json")) {
    std::ostringstream js;
    js << "{\"suite\": \"prof\", \"machine\": {\"cpu\": " << report::json_string(cpu_model())
       << ", \"cores\": " << std::thread::hardware_concurrency() << "}, \"rounds\": " << rounds
       << ", \"results\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      js << (i ? ", " : "") << report::json_row(rows[i], "loom without profiler");
    }
    js << "], \"events_per_step\": " << report::json_number(ev) << "}\n";
    std::ofstream out(*path);
    LOOM_CHECK(out.good(), "[bench prof] cannot write ", *path);
    out << js.str();
    std::printf("wrote %s\n", path->c_str());
  }
  return 0;
}

const RegisterSuite kProf(Suite{
    "prof", "profiler overhead on the MLP training step (loom on vs off)", "", "", {}, run_prof});

}  // namespace
}  // namespace loom::bench
