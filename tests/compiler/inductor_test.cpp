// The inductor backend: passes (dead code, common subexpressions), pointwise fusion into generated
// C++ kernels, and the kernel cache. Every compiled result is checked against the same function
// run eagerly: float32 fused kernels use the eager kernels' own math, so they must agree bit for
// bit.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "compiler/test_util.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom {
namespace {

using Tensors = std::vector<Tensor>;

// Sets a setting for the scope of a test.
class ScopedSetting {
 public:
  ScopedSetting(const char* name, const std::string& value) : name_(name) {
    config::set(name, value);
  }
  ~ScopedSetting() { config::set(name_, ""); }

 private:
  const char* name_;
};

TEST(Inductor, FusedChainMatchesEagerBitForBit) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor& x = in[0];
    const Tensor a = sigmoid(add(mul(x, 1.5), 0.5));
    return {add(exp(neg(mul(a, x))), in[1]), tanh(x)};
  };
  CompiledFunction f = compile(fn, {.name = "chain"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = edgy({37, 129}), y = randn({37, 129});
    const Tensors got = f({x, y}), want = fn({x, y});
    for (size_t i = 0; i < got.size(); ++i)
      expect_bitwise(got[i], want[i],
                     "call " + std::to_string(call) + " output " + std::to_string(i));
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u);
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, add, sigmoid, mul, neg, exp, add, tanh");
  EXPECT_EQ(r.graphs[0].op_counts, (std::map<std::string, int64_t>{{"fused", 1}})) << r.str();
  EXPECT_TRUE(std::filesystem::exists(r.graphs[0].kernels[0].library_path));
  std::string cpp = r.graphs[0].kernels[0].library_path;
  cpp.replace(cpp.size() - 3, 3, ".cpp");
  EXPECT_TRUE(std::filesystem::exists(cpp)) << "the source is kept beside the object";
  EXPECT_NE(r.str().find("kernel fused_0: mul, add"), std::string::npos) << r.str();
}

// Each operator the fusion pass writes, after an add so that it has something to fuse with.
TEST(Inductor, EveryFusibleOperatorMatchesEager) {
  FreshCache cache;
  using Op = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b, 0.25); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"neg", [](const Tensor& a, const Tensor&) { return neg(a); }},
      {"abs", [](const Tensor& a, const Tensor&) { return abs(a); }},
      {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"reciprocal", [](const Tensor& a, const Tensor&) { return reciprocal(a); }},
      {"sqrt", [](const Tensor& a, const Tensor&) { return sqrt(a); }},
      {"rsqrt", [](const Tensor& a, const Tensor&) { return rsqrt(a); }},
      {"sin", [](const Tensor& a, const Tensor&) { return sin(a); }},
      {"cos", [](const Tensor& a, const Tensor&) { return cos(a); }},
      {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"log", [](const Tensor& a, const Tensor&) { return log(a); }},
      {"log1p", [](const Tensor& a, const Tensor&) { return log1p(a); }},
      {"tanh", [](const Tensor& a, const Tensor&) { return tanh(a); }},
      {"erf", [](const Tensor& a, const Tensor&) { return erf(a); }},
      {"sigmoid", [](const Tensor& a, const Tensor&) { return sigmoid(a); }},
      {"silu", [](const Tensor& a, const Tensor&) { return silu(a); }},
      {"gelu", [](const Tensor& a, const Tensor&) { return gelu(a); }},
      {"gelu tanh", [](const Tensor& a, const Tensor&) { return gelu(a, "tanh"); }},
      {"pow 2", [](const Tensor& a, const Tensor&) { return pow(a, 2); }},
      {"clamp", [](const Tensor& a, const Tensor&) { return clamp(a, -0.5, 2.0); }},
      {"clamp min", [](const Tensor& a, const Tensor&) { return clamp(a, 0.1, std::nullopt); }},
  };
  for (DType dt : {kFloat32, kFloat64}) {
    for (const auto& [name, op] : ops) {
      const std::string what = name + " " + dtype_name(dt);
      TensorFunction fn = [&op](const Tensors& in) -> Tensors {
        return {op(add(in[0], in[1]), in[1])};
      };
      CompiledFunction f = compile(fn, {.name = what});
      const Tensor x = edgy({5, 33}, dt), y = randn({5, 33}, dt);
      const Tensor got = f({x, y})[0], want = fn({x, y})[0];
      EXPECT_EQ(f.report().graphs[0].kernels.size(), 1u) << what << "\n" << f.report().str();
      if (dt == kFloat32) {
        expect_bitwise(got, want, what);
      } else {
        EXPECT_TRUE(allclose(got, want, 1e-12, 1e-12, /*equal_nan=*/true))
            << what << ": compiled " << got << " eager " << want;
      }
    }
  }
}

TEST(Inductor, BroadcastOperandsAndScalars) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    // x [6, 5, 7], bias [7], row scale [6, 5, 1], a 0-dim tensor, a [6, 1, 7] that broadcasts in
    // the middle (its rows do not collapse: not a fusion operand).
    const Tensor a = mul(add(in[0], in[1]), in[2]);
    const Tensor b = sigmoid(sub(a, in[3]));
    return {add(mul(b, in[4]), 1.0)};
  };
  CompiledFunction f = compile(fn, {.name = "broadcast"});
  for (int call = 0; call < 2; ++call) {
    const Tensors in = {randn({6, 5, 7}), randn({7}), randn({6, 5, 1}), randn({}),
                        randn({6, 1, 7})};
    expect_bitwise(f(in)[0], fn(in)[0], "call " + std::to_string(call));
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "add, mul, sub, sigmoid");
  // The [6, 1, 7] operand ends the group; the add after it is alone.
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::mul"), 1) << r.str();
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::add"), 1) << r.str();
}

// A 0-dim tensor the function reaches from outside is read when the kernel runs, so an in-place
// update between calls is seen (as eager would see it).
TEST(Inductor, ScalarOperandsAreReadOnEveryCall) {
  FreshCache cache;
  Tensor scale = scalar_tensor(2.0);
  TensorFunction fn = [&scale](const Tensors& in) -> Tensors { return {exp(mul(in[0], scale))}; };
  CompiledFunction f = compile(fn, {.name = "scale"});
  const Tensor x = randn({64});
  expect_bitwise(f({x})[0], fn({x})[0], "before the update");
  scale.fill_(-3.0);
  expect_bitwise(f({x})[0], fn({x})[0], "after the update");
  EXPECT_EQ(f.report().graphs[0].replays, 1);
}

// Note [Fused backward]: a group whose results require grad is fused with a backward kernel
// that recomputes the group from its inputs; the gradients are the eager ones, a broadcast
// operand's summed down to its sizes.
TEST(Inductor, ValuesThatRequireGradFuseWithABackwardKernel) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(tanh(mul(sigmoid(add(in[0], in[2])), in[1])))};
  };
  // (joint = false: with the joint graph the backward is a graph of its own, Note [Joint graph].)
  CompiledFunction f = compile(fn, {.name = "grad", .joint = false});
  const Tensor x = randn({4, 8}).requires_grad_(true), y = randn({4, 8}),
               bias = randn({8}).requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = f({x, y, bias})[0];
    const Tensors g = autograd::grad({got}, {x, bias});
    const Tensor want = fn({x, y, bias})[0];
    const Tensors w = autograd::grad({want}, {x, bias});
    expect_bitwise(got, want, "value");
    EXPECT_TRUE(allclose(g[0], w[0], 1e-6, 1e-7)) << "gradient of x, call " << call;
    ASSERT_EQ(g[1].sizes().vec(), (std::vector<int64_t>{8}));
    EXPECT_TRUE(allclose(g[1], w[1], 1e-5, 1e-6)) << "gradient of the bias, call " << call;
  }
  CompileReport r = f.report();
  ASSERT_EQ(r.graphs[0].kernels.size(), 2u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[1].name, "fused_0_backward");
  EXPECT_EQ(r.graphs[0].kernels[1].ops, "backward of add, sigmoid, mul, tanh");
  EXPECT_EQ(r.graphs[0].replays, 1);

  // The saved inputs are checked for in-place writes, as eager saved tensors are.
  const Tensor x2 = randn({4, 8}).requires_grad_(true);
  const Tensor a = mul(x2, 1.0);  // a non-leaf input that can be written in place
  const Tensor out = f({a, y, bias})[0];
  {
    autograd::NoGradGuard no_grad;
    add_(a, 1.0);
  }
  try {
    autograd::grad({out}, {x2});
    FAIL() << "a saved input written in place was not noticed";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"), std::string::npos)
        << e.what();
  }
}

TEST(Inductor, GroupsThatRequireGradInAGraphThatWritesInPlaceStayUnfused) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor t = mul(in[0], 2.0);
    mul_(t, 3.0);
    return {sum(tanh(sigmoid(t)))};
  };
  CompiledFunction f = compile(fn, {.name = "writes"});
  const Tensor x = randn({4, 8}).requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = f({x})[0];
    const Tensor gx = autograd::grad({got}, {x})[0];
    const Tensor want = fn({x})[0];
    expect_bitwise(got, want, "value");
    expect_bitwise(gx, autograd::grad({want}, {x})[0], "gradient");
  }
  CompileReport r = f.report();
  EXPECT_TRUE(r.graphs[0].kernels.empty()) << r.str();
  EXPECT_NE(r.str().find("not fused: its result requires grad and the graph writes in place"),
            std::string::npos)
      << r.str();
  // Without grad mode the same function fuses (a new graph: grad mode is guarded).
  autograd::NoGradGuard no_grad;
  expect_bitwise(f({x})[0], fn({x})[0], "no grad");
  r = f.report();
  ASSERT_EQ(r.graphs.size(), 2u);
  EXPECT_EQ(r.graphs[1].kernels.size(), 1u) << r.str();
}

// Note [Reduction fusion]: a sum, mean or amax over the last dimension ends the group; the kernel
// reduces each row while computing it (sums in double, as eager), so the results match eager bit
// for bit, NaN included, with a row length that is not a multiple of the 16 partial sums.
TEST(Inductor, AReductionOverTheLastDimensionEndsTheGroup) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor y = sigmoid(add(mul(in[0], 2.0), in[1]));
    const Tensor z = mul(y, y);
    return {sum(z, IntArrayRef{1}), mean(exp(in[0]), IntArrayRef{-1}, /*keepdim=*/true),
            amax(add(in[0], in[1]), IntArrayRef{1}), y};
  };
  CompiledFunction f = compile(fn, {.name = "reduce"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = edgy({37, 53});
    if (call == 2) x.select(0, 5).select(0, 7).fill_(std::nan(""));
    const Tensor b = randn({53});
    const Tensors got = f({x, b}), want = fn({x, b});
    ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{37, 1}));
    for (size_t i = 0; i < got.size(); ++i)
      expect_bitwise(got[i], want[i],
                     "call " + std::to_string(call) + " output " + std::to_string(i));
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u);
  ASSERT_EQ(r.graphs[0].kernels.size(), 3u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, add, sigmoid, mul, sum") << r.str();
  EXPECT_EQ(r.graphs[0].kernels[1].ops, "exp, mean") << r.str();
  EXPECT_EQ(r.graphs[0].kernels[2].ops, "add, amax") << r.str();
  EXPECT_EQ(r.graphs[0].op_counts, (std::map<std::string, int64_t>{{"fused", 3}})) << r.str();
  EXPECT_NE(r.graphs[0].code.find("[37, 53] -> [37]: mul, add, sigmoid, mul, sum"),
            std::string::npos)
      << r.graphs[0].code;
}

// Note [Reduction fusion]: pointwise nodes over the reduced values and 0-dim operands (an
// epilogue) join the reduction's kernel and run once a row; every reduced value read later is an
// output. Bit for bit as eager, the epilogue's math being the eager kernels' own.
TEST(Inductor, PointwiseWorkOnTheReducedValuesIsTheReductionsEpilogue) {
  FreshCache cache;
  const Tensor eps = full({}, 1e-5);  // a 0-dim operand: read per call
  TensorFunction fn = [eps](const Tensors& in) -> Tensors {
    const Tensor m = mean(mul(in[0], in[0]), IntArrayRef{-1});
    const Tensor inv = rsqrt(add(m, eps));
    const Tensor half = mul(sum(exp(in[0]), IntArrayRef{1}, /*keepdim=*/true), 0.5);
    return {inv, m, sqrt(half)};
  };
  CompiledFunction f = compile(fn, {.name = "epilogue"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = edgy({29, 70});
    if (call == 2) x.select(0, 3).select(0, 9).fill_(std::nan(""));
    const Tensors got = f({x}), want = fn({x});
    ASSERT_EQ(got[2].sizes().vec(), (std::vector<int64_t>{29, 1}));
    for (size_t i = 0; i < got.size(); ++i)
      expect_bitwise(got[i], want[i],
                     "call " + std::to_string(call) + " output " + std::to_string(i));
  }
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u);
  ASSERT_EQ(r.graphs[0].kernels.size(), 2u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, mean, add, rsqrt") << r.str();
  EXPECT_EQ(r.graphs[0].kernels[1].ops, "exp, sum, mul, sqrt") << r.str();
  EXPECT_EQ(r.graphs[0].op_counts, (std::map<std::string, int64_t>{{"fused", 2}})) << r.str();
  // m and rsqrt(m + eps) both leave the first kernel; the 0-dim eps is one of its scalars.
  EXPECT_NE(r.graphs[0].code.find("%2, %5 = fused_0(%in0, %const0)  # float32 [29, 70] -> [29]: "),
            std::string::npos)
      << r.graphs[0].code;
}

// Over another dimension, or with a dtype, the reduction stays the eager operator.
TEST(Inductor, OtherReductionsStayEager) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(exp(in[0]), IntArrayRef{0}), sum(tanh(in[0]), std::nullopt, false, kFloat64)};
  };
  CompiledFunction f = compile(fn, {.name = "other reductions"});
  const Tensor x = randn({9, 21});
  for (int call = 0; call < 2; ++call) {
    const Tensors got = f({x}), want = fn({x});
    for (size_t i = 0; i < got.size(); ++i) expect_bitwise(got[i], want[i], "output");
  }
  const CompileReport r = f.report();
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::sum"), 2) << r.str();
  EXPECT_TRUE(r.graphs[0].kernels.empty()) << r.str();
}

// Note [Constant folding]: a mask built from factories and numbers is computed once, at compile
// time; what depends on an input or a parameter is not.
TEST(Inductor, FactoriesAndWhatFollowsFromThemFoldIntoConstants) {
  FreshCache cache;
  const Tensor w = randn({6});  // a parameter: held by the graph, never folded
  TensorFunction fn = [w](const Tensors& in) -> Tensors {
    const Tensor mask = mul(add(ones({6}), 1.0), 0.5);  // folds: 1.0 everywhere
    return {add(mul(in[0], mask), w)};
  };
  CompiledFunction f = compile(fn, {.name = "fold"});
  const Tensor x = randn({4, 6});
  for (int call = 0; call < 2; ++call) expect_bitwise(f({x})[0], fn({x})[0], "call");
  const CompileReport r = f.report();
  bool logged = false;
  for (const std::string& p : r.graphs[0].passes)
    logged = logged || p == "constant folding: folded 3 node(s)";
  EXPECT_TRUE(logged) << r.str();
  EXPECT_EQ(r.graphs[0].op_counts, (std::map<std::string, int64_t>{{"fused", 1}})) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, add") << r.str();
  // The parameter's update is seen: it was not folded.
  w.fill_(2.0);
  expect_bitwise(f({x})[0], fn({x})[0], "after the parameter changed");
}

// Note [Autotuning]: mode max-autotune times the kernel's launch configurations on its first run
// and reports the choice; the results stay the eager ones.
TEST(Inductor, MaxAutotuneTimesTheKernelsConfigurations) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {tanh(mul(sigmoid(in[0]), 3.0)), sum(exp(mul(in[0], 0.5)), IntArrayRef{1})};
  };
  CompiledFunction f = compile(fn, {.mode = CompileMode::MaxAutotune, .name = "tuned"});
  const Tensor x = randn({512, 300});
  for (int call = 0; call < 3; ++call) {
    const Tensors got = f({x}), want = fn({x});
    for (size_t i = 0; i < got.size(); ++i) expect_bitwise(got[i], want[i], "output");
  }
  const CompileReport r = f.report();
  // One kernel: tanh(...) is written while exp(...) is summed row by row.
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "sigmoid, mul, tanh, mul, exp, sum");
  for (const KernelInfo& k : r.graphs[0].kernels) {
    EXPECT_EQ(k.tuning.rfind("grain ", 0), 0u) << k.name << ": " << k.tuning;
    EXPECT_NE(k.tuning.find(" ms ("), std::string::npos) << k.tuning;
  }
  EXPECT_NE(r.str().find("autotuned: grain "), std::string::npos) << r.str();
  // The default mode tunes nothing.
  CompiledFunction plain = compile(fn, {.name = "untuned"});
  plain({x});
  plain({x});
  EXPECT_TRUE(plain.report().graphs[0].kernels[0].tuning.empty());
}

TEST(Inductor, DeadCodeGoesButRandomOperatorsStay) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    const Tensor unused = matmul(in[0], in[0]);  // pure, read by nothing
    (void)unused;
    const Tensor noise = rand({4, 4});  // random, read by nothing: the generator still advances
    (void)noise;
    return {add(in[0], rand({4, 4}))};
  };
  CompiledFunction f = compile(fn, {.name = "dead"});
  const Tensor x = randn({4, 4});
  f({x});
  manual_seed(7);
  const Tensor got = f({x})[0];
  manual_seed(7);
  const Tensor want = fn({x})[0];
  expect_bitwise(got, want, "after the seed");
  const CompileReport r = f.report();
  EXPECT_EQ(r.graphs[0].passes[1], "dce: removed 1 node(s)") << r.str();
  EXPECT_EQ(r.graphs[0].op_counts.count("loom::mm"), 0u) << r.str();
}

TEST(Inductor, CommonSubexpressionsMergeUnlessTheGraphWritesInPlace) {
  FreshCache cache;
  TensorFunction pure = [](const Tensors& in) -> Tensors {
    return {add(matmul(in[0], in[1]), matmul(in[0], in[1]))};
  };
  CompiledFunction f = compile(pure, {.name = "cse"});
  const Tensor a = randn({3, 3}), b = randn({3, 3});
  f({a, b});
  expect_bitwise(f({a, b})[0], pure({a, b})[0], "cse");
  CompileReport r = f.report();
  EXPECT_EQ(r.graphs[0].passes[2], "cse: merged 1 node(s)") << r.str();
  EXPECT_EQ(r.graphs[0].op_counts.at("loom::mm"), 1) << r.str();

  // Two equal clones, one written in place: merging them would make the other see the write.
  TensorFunction writes = [](const Tensors& in) -> Tensors {
    Tensor c1 = mul(in[0], 2.0), c2 = mul(in[0], 2.0);
    add_(c1, 1.0);
    return {add(c1, c2)};
  };
  CompiledFunction g = compile(writes, {.name = "cse in place"});
  g({a});
  expect_bitwise(g({a})[0], writes({a})[0], "in place");
  EXPECT_EQ(g.report().graphs[0].passes[2], "cse: skipped (the graph writes in place)");
}

TEST(Inductor, KernelsAreFoundInTheCache) {
  FreshCache cache;
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {exp(add(in[0], 1.0))}; };
  CompiledFunction f1 = compile(fn, {.name = "first"});
  f1({randn({8})});
  const KernelInfo k1 = f1.report().graphs[0].kernels.at(0);
  EXPECT_FALSE(k1.cache_hit);
  EXPECT_GT(k1.build_ms, 0);
  // Another function with the same kernel, and the same function on a new size: no build.
  CompiledFunction f2 = compile(fn, {.name = "second"});
  f2({randn({8})});
  f2({randn({3, 5})});
  const CompileReport r2 = f2.report();
  ASSERT_EQ(r2.graphs.size(), 2u);
  for (const GraphInfo& g : r2.graphs) {
    EXPECT_TRUE(g.kernels.at(0).cache_hit);
    EXPECT_EQ(g.kernels.at(0).library_path, k1.library_path);
  }
}

TEST(Inductor, ABrokenCompilerIsACompileErrorNamingIt) {
  FreshCache cache;
  ScopedSetting cxx("LOOM_CXX", "/nonexistent/c++");
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {exp(add(in[0], 3.0))}; };
  CompiledFunction f = compile(fn, {.name = "no compiler"});
  try {
    f({randn({8})});
    FAIL() << "no CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("LOOM_CXX"), std::string::npos) << e.what();
  }
  // backend eager needs no compiler.
  CompiledFunction g = compile(fn, {.backend = CompileBackend::Eager, .name = "eager"});
  const Tensor x = randn({8});
  expect_bitwise(g({x})[0], fn({x})[0], "eager backend");
}

TEST(Inductor, TheCacheIsTrimmedToItsLimitOldestFirst) {
  FreshCache cache;
  ScopedSetting limit("LOOM_COMPILE_CACHE_MB", "1");
  const std::string dir = cache.dir.path() + "/compile";
  std::filesystem::create_directories(dir);
  const std::vector<char> junk(600 << 10, 'x');
  for (int i = 0; i < 3; ++i) {
    const std::string p = dir + "/old" + std::to_string(i) + ".so";
    std::ofstream(p, std::ios::binary)
        .write(junk.data(), static_cast<std::streamsize>(junk.size()));
    struct timeval times[2] = {{1000 + i, 0}, {1000 + i, 0}};
    ASSERT_EQ(::utimes(p.c_str(), times), 0);
  }
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {log1p(mul(in[0], 0.125))}; };
  CompiledFunction f = compile(fn, {.name = "trim"});
  f({rand({8})});
  const KernelInfo k = f.report().graphs[0].kernels.at(0);
  EXPECT_TRUE(std::filesystem::exists(k.library_path));
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) total += e.file_size();
  EXPECT_LE(total, uint64_t{1} << 20);
  EXPECT_FALSE(std::filesystem::exists(dir + "/old0.so")) << "the oldest goes first";
}

}  // namespace
}  // namespace loom
