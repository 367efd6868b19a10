// Dynamic shapes (lesson 11): automatic dynamic after a size change, duck sizing, 0/1
// specialisation, dynamic=on/off, dynamic_dims/static_dims, and the loud cases where sizes stay
// static. Every compiled result is checked against the same function run eagerly, so a stale
// graph (or a host int that did not follow the sizes) fails the test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom {
namespace {

using Tensors = std::vector<Tensor>;

void expect_equal(const Tensors& got, const Tensors& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << what << " output " << i;
    EXPECT_TRUE(equal(got[i], want[i])) << what << " output " << i;
  }
}

// Reads sizes on the host (a reshape to [B * L, 64]) and fuses a pointwise chain over [B, L, 64].
Tensors attention_like(const Tensors& in) {
  const Tensor& x = in[0];
  const Tensor flat = x.reshape({x.size(0) * x.size(1), x.size(2)});
  return {softmax(mul(flat, 0.125), -1), sigmoid(add(mul(x, 2.0), 1.0))};
}

TEST(Dynamic, ASizeChangeRecompilesOnceWithASymbol) {
  CompiledFunction f = compile(attention_like, {.name = "lengths"});
  for (int64_t len = 16; len < 28; ++len) {
    const Tensors in = {randn({4, len, 64})};
    expect_equal(f(in), attention_like(in), "length " + std::to_string(len));
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 2u) << r.str();
  EXPECT_EQ(r.graphs[1].replays, 10);
  ASSERT_EQ(r.recompile_reasons.size(), 1u);
  EXPECT_NE(r.recompile_reasons[0].find("automatic dynamic: input 0 dim 1 (16 -> 17)"),
            std::string::npos)
      << r.recompile_reasons[0];
  EXPECT_NE(r.str().find("input 0: float32 cpu sizes [4, s0, 64] contiguous"), std::string::npos)
      << r.str();
  EXPECT_NE(r.graphs[1].code.find("loom::view(%in0, [4*s0, 64])"), std::string::npos)
      << r.graphs[1].code;
  EXPECT_EQ(r.graphs[1].kernels.size(), 1u) << "the fused kernel serves every length";
  // A changed batch (a dimension still static) recompiles again, and that dimension joins.
  const Tensors in = {randn({6, 20, 64})};
  expect_equal(f(in), attention_like(in), "batch 6");
  EXPECT_EQ(f.report().graphs.size(), 3u);
  const Tensors in2 = {randn({3, 30, 64})};
  expect_equal(f(in2), attention_like(in2), "batch 3");
  EXPECT_EQ(f.report().graphs.size(), 3u) << f.report().str();
}

// After automatic dynamic the first sizes still replay their own graph (fixed-size graphs are
// tried first: their kernels have fixed sizes), and other sizes the dynamic one, whose joint graph
// is dynamic too (Note [Joint graph]). A training loop whose last batch is smaller keeps its full
// batches on their graph in later epochs.
TEST(Dynamic, TheFirstSizesKeepTheirFixedSizeGraph) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {sum(tanh(mul(in[0], 2.0)))}; };
  CompiledFunction f = compile(fn, {.name = "epochs"});
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int64_t batch : {128, 128, 128, 48}) {
      const Tensor x0 = randn({batch, 8});
      Tensor x = x0.clone().requires_grad_(true), xe = x0.clone().requires_grad_(true);
      const Tensor got = f({x})[0], want = fn({xe})[0];
      autograd::backward({got});
      autograd::backward({want});
      EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5)) << "batch " << batch;
      EXPECT_TRUE(allclose(x.grad(), xe.grad(), 1e-5, 1e-6)) << "batch " << batch;
    }
  }
  // A third size replays the dynamic graph, whose backward is a dynamic joint graph too.
  const Tensor x0 = randn({96, 8});
  Tensor x = x0.clone().requires_grad_(true), xe = x0.clone().requires_grad_(true);
  autograd::backward({f({x})[0]});
  autograd::backward({fn({xe})[0]});
  EXPECT_TRUE(allclose(x.grad(), xe.grad(), 1e-5, 1e-6)) << "batch 96";
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 2u) << r.str();
  EXPECT_EQ(r.graphs[0].replays, 8) << r.str();  // 9 calls at 128, the first captured
  EXPECT_EQ(r.graphs[1].replays, 3) << r.str();  // 3 at 48, the first captured, and 96
  for (const GraphInfo& g : r.graphs) {
    bool joint = false;
    for (const std::string& p : g.passes) joint = joint || p.rfind("joint graph: ", 0) == 0;
    EXPECT_TRUE(joint) << r.str();
  }
}

TEST(Dynamic, EqualSizesShareASymbolAndAreGuardedEqual) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {add(mul(in[0], in[1]), 1.0)}; };
  CompiledFunction f = compile(fn, {.dynamic = DynamicShapes::On, .name = "duck"});
  const Tensors a = {randn({5, 3}), randn({5, 3})};
  expect_equal(f(a), fn(a), "5");
  const Tensors b = {randn({9, 3}), randn({9, 3})};
  expect_equal(f(b), fn(b), "9");
  CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u) << r.str();
  EXPECT_NE(r.str().find("s0 = input 0 dim 0 = input 1 dim 0, >= 2"), std::string::npos) << r.str();
  EXPECT_NE(r.str().find("s1 = input 0 dim 1 = input 1 dim 1"), std::string::npos) << r.str();
  // Broadcasting [9, 3] with [1, 3]: the symbol's guard fails (sizes 0 and 1 are specialised).
  const Tensors c = {randn({9, 3}), randn({1, 3})};
  expect_equal(f(c), fn(c), "broadcast");
  r = f.report();
  ASSERT_EQ(r.graphs.size(), 2u) << r.str();
  EXPECT_NE(r.recompile_reasons[0].find("input 1 dim 0 = 1"), std::string::npos)
      << r.recompile_reasons[0];
}

TEST(Dynamic, OffRecompilesEverySizeAndStaticDimsStayPinned) {
  CompiledFunction off = compile(attention_like, {.dynamic = DynamicShapes::Off, .name = "off"});
  for (int64_t len = 8; len < 12; ++len) off({randn({2, len, 64})});
  EXPECT_EQ(off.report().graphs.size(), 4u);

  CompiledFunction pinned = compile(attention_like, {.name = "pinned", .static_dims = {{0, 1}}});
  for (int64_t len = 8; len < 12; ++len) pinned({randn({2, len, 64})});
  EXPECT_EQ(pinned.report().graphs.size(), 4u) << pinned.report().str();

  CompiledFunction marked = compile(attention_like, {.name = "marked", .dynamic_dims = {{0, 1}}});
  for (int64_t len = 8; len < 12; ++len) {
    const Tensors in = {randn({2, len, 64})};
    expect_equal(marked(in), attention_like(in), "marked " + std::to_string(len));
  }
  EXPECT_EQ(marked.report().graphs.size(), 1u) << marked.report().str();
}

// A host value computed from a size (here a float scale) cannot follow a symbol: the function's
// sizes stay static, said once, and every size still gets its own correct graph.
TEST(Dynamic, HostValuesThatFollowNoSymbolKeepSizesStaticAndSaySo) {
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {mul(in[0], 1.0 / static_cast<double>(in[0].size(0)))};
  };
  CompiledFunction f = compile(fn, {.name = "scaled by its length"});
  std::string warnings;
  {
    WarningsToStderr quiet(false);
    for (int64_t n = 4; n < 8; ++n) {
      const Tensors in = {randn({n})};
      expect_equal(f(in), fn(in), "n " + std::to_string(n));
    }
    for (const Warning& w : loom::warnings()) warnings += w.message + "\n";
  }
  EXPECT_EQ(f.report().graphs.size(), 4u) << f.report().str();
  EXPECT_NE(warnings.find("scaled by its length: dynamic shapes: sizes stay static: the host "
                          "value"),
            std::string::npos)
      << warnings;
}

TEST(Dynamic, FunctionsThatWriteInPlaceAreNotProbed) {
  int runs = 0;
  TensorFunction fn = [&runs](const Tensors& in) -> Tensors {
    ++runs;
    Tensor y = mul(in[0], 2.0);
    add_(y, 1.0);
    return {y};
  };
  CompiledFunction f = compile(fn, {.dynamic = DynamicShapes::On, .name = "writes"});
  WarningsToStderr quiet(false);
  for (int64_t n = 4; n < 7; ++n) {
    const Tensors in = {randn({n})};
    expect_equal(f(in), fn(in), "n " + std::to_string(n));
  }
  EXPECT_EQ(runs, 3 + 3) << "captures (one per size) and the eager reference calls, no probes";
  EXPECT_EQ(f.report().graphs.size(), 3u);
}

// Note [Bucketing]: lengths padded up to 16, 32 or 64 run three graphs, and a function that is
// blind to zero padding (a sum) returns what it returns unpadded; a length over the largest
// bucket is not padded.
TEST(Dynamic, BucketsCapTheGraphsOfManyLengths) {
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(mul(in[0], 2.0), IntArrayRef{1})};
  };
  CompiledFunction f = compile(fn, {.dynamic = DynamicShapes::Off,
                                    .recompile_limit = 8,
                                    .name = "bucketed",
                                    .buckets = {{.input = 0, .dim = 1, .sizes = {16, 32, 64}}}});
  for (int64_t len = 5; len < 45; ++len) {
    const Tensors in = {randn({3, len})};
    const Tensors got = f(in);
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{3})) << len;
    EXPECT_TRUE(allclose(got[0], fn(in)[0], 1e-5, 1e-5)) << "length " << len;
  }
  CompileReport r = f.report();
  EXPECT_EQ(r.graphs.size(), 3u) << r.str();
  ASSERT_EQ(r.buckets.size(), 3u) << r.str();
  EXPECT_EQ(r.buckets[0], "input 0 dim 1 -> 16: 12 call(s)");
  EXPECT_EQ(r.buckets[2], "input 0 dim 1 -> 64: 12 call(s)");
  // Over the largest bucket: the input as it is, in a graph of its own.
  const Tensors big = {randn({3, 70})};
  EXPECT_TRUE(allclose(f(big)[0], fn(big)[0], 1e-5, 1e-5));
  EXPECT_EQ(f.report().graphs.size(), 4u);
  // A padded input that requires grad gets the gradient of its own elements (a capture, then a
  // replay).
  const Tensor x = randn({2, 10}).requires_grad_();
  sum(f({x})[0]).backward();
  sum(f({x})[0]).backward();
  EXPECT_TRUE(allclose(x.grad(), full({2, 10}, 4.0)));
  EXPECT_EQ(f.report().graphs.back().replays, 1);
}

TEST(Dynamic, BadBucketsAreRefused) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {in[0]}; };
  try {
    compile(fn, {.buckets = {{.input = 0, .dim = 1, .sizes = {32, 16}}}});
    FAIL() << "descending bucket sizes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ascending; size 1 is 16"), std::string::npos) << e.what();
  }
}

// Note [Guard growth]: a size that changes every call with dynamic shapes off is a recompile
// storm, reported and said once; the guards' count and the time to find a graph are reported,
// and a budget overrun is said.
TEST(Dynamic, RecompileStormsAndGuardGrowthAreReported) {
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {relu(in[0])}; };
  CompiledFunction f = compile(
      fn,
      {.dynamic = DynamicShapes::Off, .recompile_limit = 64, .name = "stormy", .guard_budget = 20});
  {
    WarningsToStderr quiet(false);
    for (int64_t n = 2; n < 10; ++n) f({randn({n})});
    for (int k = 0; k < 16; ++k) f({randn({9})});
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.storms.size(), 1u) << r.str();
  EXPECT_NE(r.storms[0].find("4 recompiles in 16 calls ending at call 5; the last: graph 4: "
                             "input 0: sizes [5] -> [6]"),
            std::string::npos)
      << r.storms[0];
  EXPECT_EQ(r.guards, 8 * 4) << "grad mode, dtype, input 0, sharing: 4 a graph";
  EXPECT_GT(r.guard_check_us, 0) << r.str();
  EXPECT_NE(r.str().find("recompile storm: 4 recompiles"), std::string::npos) << r.str();
  bool storm = false, budget = false;
  for (const Warning& w : warnings()) {
    storm = storm || w.key == "compile.storm:stormy";
    budget = budget || (w.key == "compile.guards:stormy" &&
                        w.message.find("24 guards over 6 graph(s), over the budget of 20") !=
                            std::string::npos);
  }
  EXPECT_TRUE(storm);
  EXPECT_TRUE(budget);
}

}  // namespace
}  // namespace loom
