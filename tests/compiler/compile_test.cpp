// loom::compile (the eager backend where a test reads the captured operators): capture at the
// dispatcher, replay without running the function, guards and recompiles (a stale graph for a
// changed input must be impossible), graph breaks with their reasons and locations, the recompile
// limit's policies, and the reports. Every result is checked against the same function run eagerly.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/memory.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom {
namespace {

using Tensors = std::vector<Tensor>;

void expect_same(const Tensors& got, const Tensors& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << what << " output " << i;
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << what << " output " << i;
    EXPECT_TRUE(allclose(got[i], want[i], 1e-6, 1e-6)) << what << " output " << i;
  }
}

// A small function and a counter of how often its body ran.
struct Chain {
  int runs = 0;
  TensorFunction fn() {
    return [this](const Tensors& in) -> Tensors {
      ++runs;
      const Tensor y = relu(add(mul(in[0], 2.0), in[1]));
      return {sum(y, IntArrayRef{1}), exp(y)};
    };
  }
};

TEST(Compile, ReplaysTheGraphWithoutRunningTheFunction) {
  Chain c;
  CompiledFunction f = compile(c.fn(), {.backend = CompileBackend::Eager, .name = "chain"});
  for (int call = 0; call < 4; ++call) {
    const Tensor a = randn({8, 16}), b = randn({8, 16});
    const Tensors got = f({a, b});
    Chain eager;
    expect_same(got, eager.fn()({a, b}), "call " + std::to_string(call));
  }
  EXPECT_EQ(c.runs, 1) << "the function body ran again instead of the graph";
  const CompileReport r = f.report();
  EXPECT_EQ(r.calls, 4);
  EXPECT_EQ(r.captures, 1);
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].replays, 3);
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::relu"), 1);
  EXPECT_NE(r.graphs[0].code.find("loom::mul"), std::string::npos) << r.graphs[0].code;
  EXPECT_NE(r.str().find("input 1: float32 cpu sizes [8, 16]"), std::string::npos) << r.str();
}

// Each guard: a changed input recompiles (naming the guard) and gives the eager result; the first
// graph is still used for the first kind of input.
TEST(Compile, EveryInputGuardRecompilesAndNamesItself) {
  Chain c;
  // Sizes static: this test is about each guard (tests/compiler/dynamic_test.cpp has symbols).
  CompiledFunction f = compile(c.fn(), {.dynamic = DynamicShapes::Off, .name = "guarded"});
  const Tensor a = randn({4, 6}), b = randn({4, 6});
  f({a, b});
  struct Case {
    std::string what, reason;
    Tensors in;
  };
  std::vector<Case> cases = {
      {"sizes", "input 0: sizes [4, 6] -> [5, 6]", {randn({5, 6}), randn({5, 6})}},
      {"dtype", "input 0: dtype float32 -> float64", {randn({4, 6}).to(kFloat64), b}},
      {"strides", "input 1: strides [6, 1] -> [1, 4]", {a, randn({6, 4}).t()}},
      {"requires_grad",
       "input 0: requires_grad false -> true",
       {randn({4, 6}).requires_grad_(), b}},
  };
  for (const Case& k : cases) {
    const int before = c.runs;
    const Tensors got = f(k.in);
    EXPECT_EQ(c.runs, before + 1) << k.what << ": no recompile";
    Chain eager;
    expect_same(got, eager.fn()(k.in), k.what);
    // The reason names each cached graph's first failing guard; the first graph's is this one.
    const CompileReport r = f.report();
    EXPECT_EQ(r.recompile_reasons.back().rfind("graph 1: " + k.reason, 0), 0u)
        << k.what << ": " << r.recompile_reasons.back();
  }
  // Every earlier kind of input hits its own graph again.
  const int runs = c.runs;
  expect_same(f({a, b}), Chain().fn()({a, b}), "first kind again");
  for (const Case& k : cases) expect_same(f(k.in), Chain().fn()(k.in), k.what + " again");
  EXPECT_EQ(c.runs, runs);
  EXPECT_EQ(f.report().graphs.size(), 5u);
}

TEST(Compile, GlobalStateIsGuarded) {
  Chain c;
  CompiledFunction f = compile(c.fn(), {.name = "global"});
  const Tensor a = randn({3, 3}).requires_grad_(), b = randn({3, 3});
  const Tensors with_grad = f({a, b});
  EXPECT_TRUE(with_grad[0].requires_grad());
  {
    autograd::NoGradGuard no_grad;
    const Tensors got = f({a, b});
    EXPECT_FALSE(got[0].requires_grad()) << "a graph captured with grad mode on was replayed";
  }
  EXPECT_EQ(f.report().recompile_reasons.back(), "graph 1: grad mode on -> off");
}

// A graph captured without autocast holds no casts: under autocast the call recaptures (and the
// other way round), so a matrix product gives bfloat16 only where autocast is on.
TEST(Compile, AutocastStateIsGuarded) {
  const Tensor w = randn({4, 4});
  CompiledFunction f =
      compile([w](const Tensors& in) -> Tensors { return {mm(in[0], w)}; }, {.name = "autocast"});
  const Tensor x = randn({3, 4});
  EXPECT_EQ(f({x})[0].dtype(), kFloat32);
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    const Tensors got = f({x});
    EXPECT_EQ(got[0].dtype(), kBFloat16) << "a graph captured without autocast was replayed";
    EXPECT_TRUE(equal(got[0], mm(x.to(kBFloat16), w.to(kBFloat16))));
  }
  EXPECT_EQ(f.report().recompile_reasons.back(), "graph 1: autocast off -> cpu bfloat16");
  EXPECT_EQ(f({x})[0].dtype(), kFloat32);
}

// Inputs that share storage: an in-place operator on one changes the other, so a graph captured
// with distinct inputs must not run for aliased ones, and the other way round.
TEST(Compile, StorageSharingBetweenInputsIsGuarded) {
  int runs = 0;
  TensorFunction fn = [&runs](const Tensors& in) -> Tensors {
    ++runs;
    in[0].add_(in[1]);
    return {mul(in[1], 1.0)};
  };
  auto eager = [](Tensor x, Tensor y) {
    x.add_(y);
    return mul(y, 1.0);
  };
  CompiledFunction f = compile(fn, {.name = "alias"});
  Tensor x = ones({4}), y = ones({4});
  f({x, y});
  Tensor z = ones({4});
  const Tensors got = f({z, z});  // the same tensor twice
  EXPECT_EQ(runs, 2);
  Tensor w = ones({4});
  const Tensor want = eager(w, w);
  EXPECT_TRUE(equal(got[0], want)) << got[0] << " vs " << want;
  EXPECT_EQ(f.report().recompile_reasons.back(), "graph 1: inputs 0 and 1 now share storage");
  // The replay of the first graph mutates its input, as the eager call does.
  Tensor p = full({4}, 2.0), q = full({4}, 3.0);
  f({p, q});
  EXPECT_TRUE(equal(p, full({4}, 5.0))) << p;
  EXPECT_EQ(runs, 2);
}

TEST(Compile, ConstantsAreHeldAndTheirInPlaceUpdatesSeen) {
  Tensor w = full({4}, 2.0);
  int runs = 0;
  CompiledFunction f = compile(
      [&](const Tensors& in) -> Tensors {
        ++runs;
        return {mul(in[0], w)};
      },
      {.name = "constants"});
  const Tensor x = arange(4).to(kFloat32);
  EXPECT_TRUE(equal(f({x})[0], mul(x, 2.0)));
  w.mul_(3.0);  // an optimizer's step
  EXPECT_TRUE(equal(f({x})[0], mul(x, 6.0)));
  EXPECT_EQ(runs, 1);
  EXPECT_NE(f.report().str().find("constant 0: the same tensor"), std::string::npos);
}

// Random operators are recorded, so that a replay draws new numbers from the generator as an
// eager call would: the compiled calls give the eager sequence.
TEST(Compile, RandomOperatorsDrawAgainOnReplay) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {add(in[0], randn_like(in[0]))}; };
  CompiledFunction f = compile(fn, {.name = "random"});
  const Tensor x = zeros({1000});
  manual_seed(7);
  const Tensor c1 = f({x})[0], c2 = f({x})[0], c3 = f({x})[0];
  manual_seed(7);
  const Tensor e1 = fn({x})[0], e2 = fn({x})[0], e3 = fn({x})[0];
  EXPECT_TRUE(equal(c1, e1));
  EXPECT_TRUE(equal(c2, e2));
  EXPECT_TRUE(equal(c3, e3));
  EXPECT_FALSE(equal(c2, c3));
  EXPECT_EQ(f.report().graphs[0].replays, 2);
}

TEST(Compile, GradientsFlowThroughAReplay) {
  Chain c;
  CompiledFunction f = compile(c.fn(), {.name = "grad"});
  for (int call = 0; call < 2; ++call) {
    const Tensor a = randn({5, 7}).requires_grad_(), b = randn({5, 7});
    const Tensors out = f({a, b});
    sum(out[0]).backward();
    const Tensor a2 = a.detach().clone().requires_grad_();
    const Tensors want = Chain().fn()({a2, b});
    sum(want[0]).backward();
    EXPECT_TRUE(allclose(a.grad(), a2.grad())) << "call " << call;
  }
  EXPECT_EQ(c.runs, 1);
}

// A host read in the function is a graph break: reported with the operator, the reason and the
// user's call. The graph resumes after it: a replay runs the graph up to the read, and goes on
// while the value is the one captured (a guard); a new value is a recompile, and each branch has
// a graph of its own. With fullgraph the break is an error.
TEST(Compile, ItemIsAGraphBreakThatResumesGuardedOnTheValue) {
  int runs = 0;
  TensorFunction fn = [&runs](const Tensors& in) -> Tensors {
    ++runs;
    const Tensor s = sum(in[0]);
    if (s.item<double>() > 0) return {mul(in[0], 2.0)};
    return {neg(in[0])};
  };
  CompiledFunction f = compile(fn, {.name = "breaks"});
  const Tensor pos = ones({3}), negative = full({3}, -1.0), twice = full({3}, 2.0);
  {
    WarningsToStderr quiet(false);
    EXPECT_TRUE(equal(f({pos})[0], full({3}, 2.0)));
    EXPECT_TRUE(equal(f({negative})[0], ones({3})));
    EXPECT_EQ(runs, 2) << "a new host value is a recompile";
    // Both graphs replay, each for its own value, without running the function.
    EXPECT_TRUE(equal(f({pos})[0], full({3}, 2.0)));
    EXPECT_TRUE(equal(f({negative})[0], ones({3})));
    EXPECT_TRUE(equal(f({pos})[0], full({3}, 2.0)));
    EXPECT_EQ(runs, 2);
    // Another value that takes the same branch is still a new value: a third graph.
    EXPECT_TRUE(equal(f({twice})[0], full({3}, 4.0)));
    EXPECT_EQ(runs, 3);
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.breaks.size(), 1u) << "one break site, seen by three captures";
  EXPECT_EQ(r.breaks[0].op, "loom::_local_scalar_dense");
  EXPECT_TRUE(r.breaks[0].resumed);
  EXPECT_NE(r.breaks[0].reason.find("host value"), std::string::npos) << r.breaks[0].reason;
  EXPECT_NE(r.breaks[0].location.find("ItemIsAGraphBreakThatResumes"), std::string::npos)
      << "location: " << r.breaks[0].location;
  EXPECT_EQ(r.eager_calls, 0);
  ASSERT_EQ(r.graphs.size(), 3u);
  EXPECT_EQ(r.graphs[0].replays, 2);
  EXPECT_EQ(r.graphs[1].replays, 1);
  // The host guard names the operator and the value, and counts its failures.
  bool guarded = false;
  for (const GuardInfo& g : r.graphs[0].guards) {
    if (g.text.find("host value 1: loom::_local_scalar_dense == 3") == std::string::npos) continue;
    guarded = true;
    EXPECT_GE(g.failures, 2) << g.text;
  }
  EXPECT_TRUE(guarded) << r.str();
  ASSERT_FALSE(r.recompile_reasons.empty());
  EXPECT_NE(r.recompile_reasons[0].find("host value 1: loom::_local_scalar_dense returned -3, "
                                        "captured 3"),
            std::string::npos)
      << r.recompile_reasons[0];
  EXPECT_NE(r.graphs[0].code.find("-- graph break"), std::string::npos) << r.graphs[0].code;
  bool warned = false;
  for (const Warning& w : warnings()) warned = warned || w.key == "compile.break:breaks";
  EXPECT_TRUE(warned) << "a graph break must be said";

  CompiledFunction strict = compile(fn, {.fullgraph = true, .name = "strict"});
  try {
    strict({pos});
    FAIL() << "fullgraph accepted a graph break";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("_local_scalar_dense"), std::string::npos) << e.what();
  }
}

// The host value feeds the operators after the break as a constant; with the inductor backend
// both sides of the break are fused, and every replay equals the eager function bit for bit.
TEST(Compile, OperatorsAfterABreakUseTheHostValue) {
  int runs = 0;
  TensorFunction fn = [&runs](const Tensors& in) -> Tensors {
    ++runs;
    const Tensor y = sigmoid(mul(in[0], 2.0));
    const double scale = sum(y).item<double>();
    return {add(mul(div(y, scale), 3.0), in[1])};
  };
  CompiledFunction f = compile(fn, {.name = "normalise"});
  default_generator().manual_seed(3);
  const Tensor x = randn({4, 5}), b = randn({4, 5}), x2 = randn({4, 5});
  WarningsToStderr quiet(false);
  for (const Tensor& in : {x, x, x2, x, x2}) {
    const Tensors got = f({in, b});
    int eager_runs = runs;
    const Tensors want = fn({in, b});
    runs = eager_runs;
    EXPECT_TRUE(equal(got[0], want[0]));
  }
  EXPECT_EQ(runs, 2) << "two values of the sum, two captures";
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 2u);
  EXPECT_EQ(r.graphs[0].replays, 2);
  EXPECT_EQ(r.graphs[1].replays, 1);
  // One kernel before the break (mul, sigmoid) and one after it (div, mul, add).
  EXPECT_EQ(r.graphs[0].op_counts.at("fused"), 2) << r.str();
}

// A replay that stops at a changed host value has run the graph before it; the call then starts
// again, so that part must be safe to run twice. After an in-place write or a random draw it is
// not: the function runs eagerly, and says why.
TEST(Compile, ABreakAfterAnInPlaceWriteRunsEagerly) {
  int runs = 0;
  TensorFunction fn = [&runs](const Tensors& in) -> Tensors {
    ++runs;
    add_(in[0], 1.0);
    if (sum(in[0]).item<double>() > 0) return {mul(in[0], 2.0)};
    return {neg(in[0])};
  };
  CompiledFunction f = compile(fn, {.name = "writes then reads"});
  const Tensor a = zeros({3});
  {
    WarningsToStderr quiet(false);
    f({a});
    f({a});
    f({a});
  }
  EXPECT_EQ(runs, 3);
  EXPECT_TRUE(equal(a, full({3}, 3.0))) << "each call wrote once";
  const CompileReport r = f.report();
  EXPECT_EQ(r.eager_calls, 2);
  ASSERT_EQ(r.breaks.size(), 1u);
  EXPECT_FALSE(r.breaks[0].resumed);
  bool warned = false;
  for (const Warning& w : warnings()) {
    if (w.key == "compile.break:writes then reads") {
      warned = w.message.find("cannot resume") != std::string::npos &&
               w.message.find("add_") != std::string::npos;
    }
  }
  EXPECT_TRUE(warned) << "the eager fallback must say why";
}

TEST(Compile, BackwardInsideTheFunctionIsAGraphBreak) {
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor loss = sum(mul(in[0], in[0]));
    loss.backward();
    return {loss};
  };
  CompiledFunction f = compile(fn, {.name = "backward inside"});
  const Tensor w = randn({4}).requires_grad_();
  WarningsToStderr quiet(false);
  f({w});
  f({w});
  // Eager every time: the gradient accumulated twice, as two eager calls would.
  EXPECT_TRUE(allclose(w.grad(), mul(w.detach(), 4.0)));
  const CompileReport r = f.report();
  ASSERT_FALSE(r.breaks.empty());
  EXPECT_NE(r.breaks[0].reason.find("backward"), std::string::npos) << r.breaks[0].reason;
}

TEST(Compile, RecompileLimitPolicies) {
  Chain c;
  CompiledFunction warn =
      compile(c.fn(), {.dynamic = DynamicShapes::Off, .recompile_limit = 2, .name = "limited"});
  {
    WarningsToStderr quiet(false);
    for (int64_t n = 1; n <= 5; ++n) {
      const Tensor a = randn({n, 2}), b = randn({n, 2});
      expect_same(warn({a, b}), Chain().fn()({a, b}), "size " + std::to_string(n));
    }
  }
  const CompileReport r = warn.report();
  EXPECT_EQ(r.graphs.size(), 2u);
  EXPECT_EQ(r.eager_calls, 3);
  bool warned = false;
  for (const Warning& w : warnings()) warned = warned || w.key == "compile.limit:limited";
  EXPECT_TRUE(warned);

  Chain c2;
  CompiledFunction strict = compile(c2.fn(), {.dynamic = DynamicShapes::Off,
                                              .recompile_limit = 1,
                                              .on_limit = RecompilePolicy::Error,
                                              .name = "x"});
  strict({randn({1, 2}), randn({1, 2})});
  EXPECT_THROW(strict({randn({2, 2}), randn({2, 2})}), CompileError);
}

TEST(Compile, ACompiledFunctionInsideACaptureIsInlined) {
  Chain inner_c;
  CompiledFunction inner =
      compile(inner_c.fn(), {.backend = CompileBackend::Eager, .name = "inner"});
  int outer_runs = 0;
  CompiledFunction outer = compile(
      [&](const Tensors& in) -> Tensors {
        ++outer_runs;
        const Tensors r = inner({in[0], in[1]});
        return {add(r[0], 1.0)};
      },
      {.backend = CompileBackend::Eager, .name = "outer"});
  const Tensor a = randn({2, 3}), b = randn({2, 3});
  outer({a, b});
  const Tensor a2 = randn({2, 3}), b2 = randn({2, 3});
  const Tensors got = outer({a2, b2});
  EXPECT_TRUE(allclose(got[0], add(Chain().fn()({a2, b2})[0], 1.0)));
  EXPECT_EQ(outer_runs, 1);
  const CompileReport r = outer.report();
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::relu"), 1) << r.str();
}

// A CPU allocator that counts live bytes and their peak (wrapping the built-in one).
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(Allocator* base) : base_(base) {}
  DataPtr allocate(size_t n) override {
    auto* ctx = new Ctx{base_->allocate(n), n, this};
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_, live_);
    return DataPtr(ctx->inner.get(), ctx, &release, kCPU);
  }
  void reset_peak() { peak_ = live_; }
  int64_t peak() const { return peak_; }

 private:
  struct Ctx {
    DataPtr inner;
    size_t n;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    ctx->owner->live_ -= static_cast<int64_t>(ctx->n);
    delete ctx;
  }
  Allocator* base_;
  int64_t live_ = 0, peak_ = 0;
};

// A replay releases each intermediate after its last use, as the eager call's temporaries die:
// its peak memory is the eager call's, not the sum of every intermediate.
TEST(Compile, ReplayFreesIntermediatesAfterTheirLastUse) {
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    Tensor x = in[0];
    for (int i = 0; i < 8; ++i) x = sigmoid(add(x, 1.0));
    return {x};
  };
  CompiledFunction f = compile(fn, {.name = "memory"});
  const Tensor a = randn({1 << 18});  // 1 MiB a value
  f({a});
  CountingAllocator counting(get_allocator(kCPU));
  set_allocator(kCPU, &counting);
  counting.reset_peak();
  const Tensor want = fn({a})[0];
  const int64_t eager_peak = counting.peak();
  counting.reset_peak();
  const Tensor got = f({a})[0];
  const int64_t replay_peak = counting.peak();
  set_allocator(kCPU, nullptr);
  EXPECT_TRUE(equal(got, want));
  EXPECT_EQ(f.report().graphs[0].replays, 1);
  const int64_t value = int64_t{1} << 20;
  EXPECT_LE(replay_peak, eager_peak + value)
      << "eager peak " << eager_peak << " bytes, replay peak " << replay_peak;
}

// Mode reduce-overhead on a CPU function: no CUDA graph, said once and in the report; the graph
// replays as in mode default (Note [CUDA graphs] in compiler/cuda_graph.cpp).
TEST(Compile, ReduceOverheadOnTheCpuSaysItRecordsNothing) {
  Chain c;
  CompiledFunction f = compile(c.fn(), {.mode = CompileMode::ReduceOverhead, .name = "cpu ro"});
  const Tensor a = randn({4, 3}), b = randn({4, 3});
  testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call) EXPECT_TRUE(equal(f({a, b})[0], c.fn()({a, b})[0]));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cpu ro: mode reduce-overhead: no CUDA graph: the graph runs on the CPU"),
            std::string::npos)
      << err;
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u);
  EXPECT_EQ(r.graphs[0].replays, 2);
  bool said = false;
  for (const std::string& p : r.graphs[0].passes)
    said = said || p.find("cuda graph: not recorded: the graph runs on the CPU") == 0;
  EXPECT_TRUE(said) << r.str();
  EXPECT_THROW(compile(c.fn(), {.recompile_limit = 0}), ValueError);
}

TEST(Compile, LogsPrintWhatHappens) {
  config::set("LOOM_LOGS", "recompiles,graph_breaks");
  Chain c;
  CompiledFunction f = compile(c.fn(), {.name = "logged"});
  testing::internal::CaptureStderr();
  f({randn({2, 2}), randn({2, 2})});
  f({randn({3, 2}), randn({3, 2})});
  const std::string err = testing::internal::GetCapturedStderr();
  config::set("LOOM_LOGS", "");
  EXPECT_NE(
      err.find("[compile] logged: recompiling (graph 2): graph 1: input 0: sizes [2, 2] -> [3, 2]"),
      std::string::npos)
      << err;
  config::set("LOOM_LOGS", "recompile");
  EXPECT_THROW(f({randn({4, 2}), randn({4, 2})}), ValueError);
  config::set("LOOM_LOGS", "");
}

TEST(Compile, ExplainReportsGraphsAndGuards) {
  Chain c;
  const CompileReport r = explain(c.fn(), {randn({2, 5}), randn({2, 5})}, {.name = "explained"});
  const std::string s = r.str();
  EXPECT_NE(s.find("explained: 1 call(s), 1 capture(s), 1 graph(s), 0 graph break(s)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("grad mode on"), std::string::npos) << s;
  EXPECT_NE(s.find("loom::exp(%"), std::string::npos) << s;
}

}  // namespace
}  // namespace loom
