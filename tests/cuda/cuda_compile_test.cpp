// The inductor backend on CUDA: pointwise groups of CUDA tensors become one NVRTC kernel (the
// vectorised variant for aligned flat groups, the general one for broadcasts, views and float64),
// checked against the same function run eagerly on the GPU. Label `cuda`: every test skips,
// saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/cuda.h"
#include "loom/ops.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

using Tensors = std::vector<Tensor>;
const Device kCuda(DeviceType::CUDA, 0);

TensorOptions on_cuda(DType t = kFloat32) {
  return TensorOptions(t).with_device(kCuda);
}

void expect_close(const Tensors& got, const Tensors& want, const std::string& what,
                  double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].is_cuda()) << what;
    ASSERT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << what;
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << what;
    EXPECT_TRUE(allclose(got[i].to(kCPU), want[i].to(kCPU), rtol, atol, /*equal_nan=*/true))
        << what << " output " << i;
  }
}

Tensors chain(const Tensors& in) {
  const Tensor& x = in[0];
  const Tensor a = sigmoid(add(mul(x, 1.5), 0.5));
  return {add(exp(neg(mul(a, x))), x), gelu(tanh(x))};
}

TEST(CudaCompile, AChainIsOneGeneratedKernel) {
  REQUIRE_GPU();
  CompiledFunction f = compile(chain, {.name = "cuda chain"});
  // Multiples of 4 (the vectorised kernel), a tail, and a misaligned view (the general kernel).
  for (int64_t n : {int64_t{1} << 20, (int64_t{1} << 20) + 3}) {
    const Tensor x = randn({n}, on_cuda());
    expect_close(f({x}), chain({x}), "n " + std::to_string(n));
    expect_close(f({x}), chain({x}), "n " + std::to_string(n) + " again");
  }
  const Tensor base = randn({4097}, on_cuda());
  const Tensor view = base.narrow(0, 1, 4096);
  expect_close(f({view}), chain({view}), "a view at an odd offset");
  const CompileReport r = f.report();
  ASSERT_FALSE(r.graphs.empty());
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, add, sigmoid, mul, neg, exp, add, tanh, gelu");
  EXPECT_NE(r.graphs[0].kernels[0].library_path.find(".cubin"), std::string::npos);
}

TEST(CudaCompile, BroadcastsScalarsAndFloat64) {
  REQUIRE_GPU();
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    // x [64, 33], bias [33], row scale [64, 1], a 0-dim CUDA tensor, a host number.
    return {relu(sub(mul(add(in[0], in[1]), in[2]), in[3])), maximum(in[0], add(in[1], 2.0))};
  };
  for (DType dt : {kFloat32, kFloat64}) {
    CompiledFunction f = compile(fn, {.name = std::string("cuda broadcast ") + dtype_name(dt)});
    for (int call = 0; call < 2; ++call) {
      const Tensors in = {randn({64, 33}, on_cuda(dt)), randn({33}, on_cuda(dt)),
                          randn({64, 1}, on_cuda(dt)), randn({}, on_cuda(dt))};
      expect_close(f(in), fn(in), std::string(dtype_name(dt)) + " call " + std::to_string(call),
                   dt == kFloat64 ? 1e-12 : 1e-5);
    }
    EXPECT_EQ(f.report().graphs[0].kernels.size(), 1u) << f.report().str();
  }
}

TEST(CudaCompile, OneKernelServesEverySizeOfADynamicGraph) {
  REQUIRE_GPU();
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {mul(sigmoid(in[0]), add(in[0], 1.0))};
  };
  CompiledFunction f = compile(fn, {.name = "cuda lengths"});
  for (int64_t len = 30; len < 36; ++len) {
    const Tensors in = {randn({8, len, 16}, on_cuda())};
    expect_close(f(in), fn(in), "length " + std::to_string(len));
  }
  EXPECT_EQ(f.report().graphs.size(), 2u) << f.report().str();
}

// Note [Fused backward] on the GPU: the backward kernel is generated and compiled by NVRTC like
// the forward one (the flat float4 variant for x, the general one for the broadcast bias).
TEST(CudaCompile, GradientsFlowThroughAGeneratedBackwardKernel) {
  REQUIRE_GPU();
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(mul(tanh(add(in[0], in[1])), sigmoid(in[0])))};
  };
  CompiledFunction f = compile(fn, {.name = "cuda grad", .joint = false});
  for (DType t : {kFloat32, kFloat64}) {
    const Tensor x = randn({64, 256}, on_cuda(t)).requires_grad_(true);
    const Tensor bias = randn({256}, on_cuda(t)).requires_grad_(true);
    for (int call = 0; call < 2; ++call) {
      const Tensor got = f({x, bias})[0];
      const Tensors g = autograd::grad({got}, {x, bias});
      const Tensor want = fn({x, bias})[0];
      const Tensors w = autograd::grad({want}, {x, bias});
      expect_close({got, g[0], g[1]}, {want, w[0], w[1]}, "value and gradients", 1e-4, 1e-5);
    }
  }
  const CompileReport r = f.report();
  ASSERT_FALSE(r.graphs.empty());
  ASSERT_EQ(r.graphs[0].kernels.size(), 2u) << r.str();
  EXPECT_EQ(r.graphs[0].kernels[1].name, "fused_0_backward");
  EXPECT_NE(r.graphs[0].kernels[1].library_path.find(".cubin"), std::string::npos);
}

// Note [Joint graph] on the GPU: the forward and the backward halves are each fused and built by
// NVRTC; the gradients are the eager ones.
TEST(CudaCompile, TheJointGraphsHalvesRunAsGeneratedKernels) {
  REQUIRE_GPU();
  TensorFunction fn = [](const Tensors& in) -> Tensors {
    return {sum(mul(tanh(add(in[0], in[1])), sigmoid(in[0])))};
  };
  CompiledFunction f = compile(fn, {.name = "cuda joint"});
  const Tensor x = randn({64, 256}, on_cuda(kFloat32)).requires_grad_(true);
  const Tensor bias = randn({256}, on_cuda(kFloat32)).requires_grad_(true);
  for (int call = 0; call < 3; ++call) {
    const Tensor got = f({x, bias})[0];
    const Tensors g = autograd::grad({got}, {x, bias});
    const Tensor want = fn({x, bias})[0];
    const Tensors w = autograd::grad({want}, {x, bias});
    expect_close({got, g[0], g[1]}, {want, w[0], w[1]}, "value and gradients", 1e-4, 1e-5);
  }
  const CompileReport r = f.report();
  ASSERT_FALSE(r.graphs.empty());
  bool backward_kernel = false;
  for (const KernelInfo& k : r.graphs[0].kernels)
    backward_kernel = backward_kernel || k.name.find("(backward)") != std::string::npos;
  EXPECT_TRUE(backward_kernel) << r.str();
  EXPECT_EQ(r.graphs[0].replays, 2);
}

// Note [Autotuning] on CUDA: the launch configurations are timed on the first run.
TEST(CudaCompile, MaxAutotuneChoosesALaunchConfiguration) {
  REQUIRE_GPU();
  CompiledFunction f = compile(chain, {.mode = CompileMode::MaxAutotune, .name = "cuda tuned"});
  const Tensor x = randn({int64_t{1} << 22}, on_cuda());
  for (int call = 0; call < 2; ++call) expect_close(f({x}), chain({x}), "call");
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs[0].kernels.size(), 1u) << r.str();
  EXPECT_NE(r.graphs[0].kernels[0].tuning.find(" threads, "), std::string::npos)
      << r.graphs[0].kernels[0].tuning;
}

// Note [Reduction fusion] on CUDA: a row sum, mean or amax ends a pointwise group in one NVRTC
// kernel, a warp a row for short rows and a block a row for long ones, with its epilogue; NaN
// propagates through amax; the tuned kernel chooses its threads a row.
Tensors reductions(const Tensors& in) {
  const Tensor y = sigmoid(add(mul(in[0], 2.0), in[1]));
  const Tensor s = sum(mul(y, y), IntArrayRef{1});
  const Tensor m = mean(mul(in[0], in[0]), IntArrayRef{-1});
  const Tensor inv = rsqrt(add(m, 1e-5));
  const Tensor a = mul(amax(sub(in[0], in[1]), IntArrayRef{1}, /*keepdim=*/true), 0.5);
  return {s, inv, m, a, y};
}

TEST(CudaCompile, ARowReductionAndItsEpilogueAreOneGeneratedKernel) {
  REQUIRE_GPU();
  for (CompileMode mode : {CompileMode::Default, CompileMode::MaxAutotune}) {
    CompiledFunction f = compile(reductions, {.mode = mode, .name = "cuda reductions"});
    for (int64_t cols : {7, 100, 513, 5000}) {
      for (int call = 0; call < 2; ++call) {
        Tensor x = randn({333, cols}, on_cuda());
        if (call == 1) x.select(0, 17).select(0, cols / 2).fill_(std::nan(""));
        const Tensor b = randn({cols}, on_cuda());
        expect_close(f({x, b}), reductions({x, b}), "cols " + std::to_string(cols), 1e-5, 1e-5);
      }
    }
    const CompileReport r = f.report();
    ASSERT_FALSE(r.graphs.empty());
    ASSERT_EQ(r.graphs[0].kernels.size(), 3u) << r.str();
    EXPECT_EQ(r.graphs[0].kernels[0].ops, "mul, add, sigmoid, mul, sum") << r.str();
    EXPECT_EQ(r.graphs[0].kernels[1].ops, "mul, mean, add, rsqrt") << r.str();
    EXPECT_EQ(r.graphs[0].kernels[2].ops, "sub, amax, mul") << r.str();
    EXPECT_NE(r.graphs[0].kernels[0].library_path.find(".cubin"), std::string::npos);
    if (mode == CompileMode::MaxAutotune)
      EXPECT_NE(r.graphs[0].kernels[0].tuning.find(" threads a row"), std::string::npos)
          << r.graphs[0].kernels[0].tuning;
  }
}

// Mode reduce-overhead (Note [CUDA graphs] in compiler/cuda_graph.cpp): the second call records
// the replay (a product, fused pointwise work and a row sum) as one CUDA graph and later calls
// launch it; a result the caller still holds keeps its values when the next replay overwrites the
// graph's outputs.
TEST(CudaCompile, ReduceOverheadReplaysOneCudaGraph) {
  REQUIRE_GPU();
  autograd::NoGradGuard no_grad;
  const Tensor w = randn({64, 32}, on_cuda());
  TensorFunction fn = [w](const Tensors& in) -> Tensors {
    const Tensor h = tanh(add(mm(in[0], w), 0.5));
    return {mul(h, in[1]), sum(h, IntArrayRef{1})};
  };
  CompiledFunction f = compile(fn, {.mode = CompileMode::ReduceOverhead, .name = "graphed"});
  Tensors held_in, held_out;
  for (int call = 0; call < 6; ++call) {
    const Tensor x = randn({16, 64}, on_cuda()), s = randn({16, 32}, on_cuda());
    const Tensors got = f({x, s});
    expect_close(got, fn({x, s}), "call " + std::to_string(call), 1e-4, 1e-5);
    if (call == 2) {
      held_in = {x, s};
      held_out = got;
    }
  }
  // Three replays ran after call 2: its results were copied out before the first of them.
  expect_close(held_out, fn(held_in), "results held across later calls", 1e-4, 1e-5);
  // The parameter is recorded by address: an in-place update is seen.
  w.mul_(2.0);
  const Tensor x = randn({16, 64}, on_cuda()), s = randn({16, 32}, on_cuda());
  expect_close(f({x, s}), fn({x, s}), "after the parameter changed", 1e-4, 1e-5);
  // The same tensors again: nothing to copy in; one written in place since: copied, and seen.
  const Tensors again = f({x, s});
  expect_close(again, fn({x, s}), "the same inputs", 1e-4, 1e-5);
  add_(x, 1.0);
  expect_close(f({x, s}), fn({x, s}), "an input written in place", 1e-4, 1e-5);
  const CompileReport r = f.report();
  ASSERT_EQ(r.graphs.size(), 1u) << r.str();
  std::string line;
  for (const std::string& p : r.graphs[0].passes)
    if (p.rfind("cuda graph: ", 0) == 0) line = p;
  // 6 calls with new tensors copied 2 inputs each, the same tensors none, the written one 1;
  // both copies are nodes of the graph.
  EXPECT_NE(line.find("node(s) recorded (2 of 2 input copies among them); 8 replay(s), 13 "
                      "input(s) copied in; "),
            std::string::npos)
      << r.str();
  EXPECT_EQ(line.find("; 0 result(s)"), std::string::npos) << line;
}

// What a recording cannot hold replays without one, saying why.
TEST(CudaCompile, ReduceOverheadRefusesWhatItCannotRecord) {
  REQUIRE_GPU();
  TensorFunction fn = [](const Tensors& in) -> Tensors { return {mul(sin(in[0]), 2.0)}; };
  CompiledFunction f = compile(fn, {.mode = CompileMode::ReduceOverhead, .name = "needs grad"});
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({8, 8}, on_cuda()).requires_grad_(true);
    expect_close(f({x}), fn({x}), "call " + std::to_string(call));
  }
  const CompileReport r = f.report();
  bool said = false;
  for (const std::string& p : r.graphs[0].passes)
    said = said || p.find("cuda graph: not recorded: results require grad") == 0;
  EXPECT_TRUE(said) << r.str();
}

}  // namespace
}  // namespace loom
