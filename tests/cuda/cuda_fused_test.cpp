// The fused training kernels on a real GPU (src/ops/cuda/fused_*): the fused cross-entropy at
// GPT-2's vocabulary (50304) in float32 and bfloat16 against the CPU kernels and the composition,
// its ignore_index / all-ignored / smoothing / bad-target cases; bias + GELU and linear + GELU in
// both approximations; and the multi-tensor Adam step against the CPU's fused step over several
// steps, with more tensors and chunks than one launch's table holds. Label `cuda`: every test
// skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "loom/autograd.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "test_errors.h"

namespace loom::testing {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

Tensor dev(const Tensor& t) {
  return t.to(kCuda);
}

// got (on the GPU) is close to want (on the CPU): same shape and dtype, within rtol / atol.
void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_TRUE(got.is_cuda()) << what << ": expected a CUDA result";
  const Tensor g = got.to(kCPU);
  ASSERT_EQ(g.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(g.dtype(), want.dtype()) << what;
  EXPECT_TRUE(allclose(g.to(kFloat64), want.to(kFloat64), rtol, atol, /*equal_nan=*/true))
      << what << ": max abs diff "
      << amax(abs(sub(g.to(kFloat64), want.to(kFloat64))), IntArrayRef{}).item<double>();
}

Tensor targets(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}

// Loss and gradient of a leaf copy of x through f.
template <class F>
std::pair<Tensor, Tensor> loss_and_grad(const Tensor& x0, const F& f) {
  Tensor x = x0.detach().clone();
  x.requires_grad_();
  Tensor loss = f(x);
  loss.backward();
  return {loss.detach(), x.grad()};
}

// N rows of V = 50304 logits, a few rows ignored.
std::pair<Tensor, Tensor> gpt_batch(int64_t n, uint64_t seed) {
  const Tensor x = mul(randn({n, 50304}, kFloat32, Generator(seed)), 2.0);
  Tensor t = randint(0, 50304, {n}, kInt64, Generator(seed + 1));
  t.select(0, 3).fill_(-100);
  t.select(0, n - 1).fill_(-100);
  return {x, t};
}

TEST(CudaFusedCrossEntropy, Float32MatchesCpuAndComposition) {
  REQUIRE_GPU();
  const auto [x, t] = gpt_batch(64, 1);
  for (double s : {0.0, 0.1}) {
    const std::string what = "smoothing " + std::to_string(s);
    auto ce = [&](const Tensor& v, const Tensor& tt) {
      return cross_entropy(v, tt, std::nullopt, Reduction::Mean, -100, s);
    };
    auto [l_cpu, g_cpu] = loss_and_grad(x, [&](const Tensor& v) { return ce(v, t); });
    auto [l_gpu, g_gpu] = loss_and_grad(dev(x), [&](const Tensor& v) { return ce(v, dev(t)); });
    expect_close(l_gpu, l_cpu, 1e-5, 1e-6, "loss, " + what);
    expect_close(g_gpu, g_cpu, 1e-4, 1e-9, "grad, " + what);
    // The float64 composition (cross_entropy keeps it for float64) as an independent reference.
    auto [l_ref, g_ref] = loss_and_grad(x.to(kFloat64), [&](const Tensor& v) { return ce(v, t); });
    expect_close(l_gpu, l_ref.to(kFloat32), 1e-5, 1e-6, "loss vs float64 composition, " + what);
    expect_close(g_gpu, g_ref.to(kFloat32), 1e-4, 1e-9, "grad vs float64 composition, " + what);
  }
  auto [loss, lse] = _fused_cross_entropy(dev(x), dev(t));
  expect_close(lse, logsumexp(x, IntArrayRef{1}), 1e-6, 1e-5, "lse");
}

TEST(CudaFusedCrossEntropy, BFloat16MatchesCpu) {
  REQUIRE_GPU();
  const auto [x32, t] = gpt_batch(32, 3);
  const Tensor x = x32.to(kBFloat16);
  auto [l_cpu, g_cpu] = loss_and_grad(x, [&](const Tensor& v) { return cross_entropy(v, t); });
  auto [l_gpu, g_gpu] =
      loss_and_grad(dev(x), [&](const Tensor& v) { return cross_entropy(v, dev(t)); });
  EXPECT_EQ(g_gpu.dtype(), kBFloat16);
  expect_close(l_gpu, l_cpu, 1e-2, 1e-2, "bf16 loss");
  // Both compute in float and round to bf16 (8 bits): at most one bf16 step apart.
  expect_close(g_gpu, g_cpu, 1e-2, 1e-9, "bf16 grad");
  // And against the float32 composition of the same values.
  auto [l_ref, g_ref] =
      loss_and_grad(x.to(kFloat64), [&](const Tensor& v) { return cross_entropy(v, t); });
  expect_close(l_gpu, l_ref.to(kBFloat16), 1e-2, 1e-2, "bf16 loss vs float64 composition");
  expect_close(g_gpu, g_ref.to(kBFloat16), 1e-2, 1e-8, "bf16 grad vs float64 composition");
}

// Note [Vectorised cross-entropy rows]: rows of an odd width start at every alignment (scalar
// heads and tails of every length); -inf logits add nothing and a NaN makes its row's loss NaN.
TEST(CudaFusedCrossEntropy, OddWidthsInfinitiesAndNaN) {
  REQUIRE_GPU();
  for (DType dt : {kBFloat16, kFloat32}) {
    for (int64_t v : {1, 7, 9, 50257}) {
      const std::string what = std::string(dtype_name(dt)) + " V " + std::to_string(v);
      const int64_t n = 12;
      Tensor x = mul(randn({n, v}, kFloat32, Generator(11 + v)), 3.0);
      if (v > 5) {
        x.select(0, 1).narrow(0, 0, v / 2).fill_(-INFINITY);  // half a row masked out
        x.select(0, 2).narrow(0, 1, v - 1).fill_(-INFINITY);  // all but the first logit
      }
      x = x.to(dt);
      Tensor t = randint(0, v, {n}, kInt64, Generator(12));
      if (v > 5) {
        t.select(0, 1).fill_(v - 1);
        t.select(0, 2).fill_(0);
      }
      auto [l_cpu, g_cpu] = loss_and_grad(x, [&](const Tensor& z) { return cross_entropy(z, t); });
      auto [l_gpu, g_gpu] =
          loss_and_grad(dev(x), [&](const Tensor& z) { return cross_entropy(z, dev(t)); });
      const double tol = dt == kBFloat16 ? 1e-2 : 1e-5;
      expect_close(l_gpu, l_cpu, tol, tol, "loss, " + what);
      expect_close(g_gpu, g_cpu, tol, 1e-7, "grad, " + what);
      auto [loss, lse] = _fused_cross_entropy(dev(x), dev(t));
      expect_close(lse, logsumexp(x.to(kFloat32), IntArrayRef{1}), 1e-5, 1e-4, "lse, " + what);
      if (v > 5) {
        Tensor y = x.clone();
        y.select(0, 4).select(0, v - 2).fill_(NAN);
        auto [ly, lsey] = _fused_cross_entropy(dev(y), dev(t));
        const Tensor l = lsey.to(kCPU);
        EXPECT_TRUE(std::isnan(l.select(0, 4).item<float>())) << what;
        EXPECT_FALSE(std::isnan(l.select(0, 5).item<float>())) << what;
      }
    }
  }
}

TEST(CudaFusedCrossEntropy, AllIgnoredAndBadTargets) {
  REQUIRE_GPU();
  const Tensor x = dev(randn({4, 7}, kFloat32, Generator(5)));
  auto [loss, grad] = loss_and_grad(x, [&](const Tensor& v) {
    return cross_entropy(v, dev(targets({-100, -100, -100, -100})));
  });
  EXPECT_TRUE(std::isnan(loss.to(kCPU).item<float>()));
  EXPECT_EQ(sum(abs(grad)).to(kCPU).item<float>(), 0.0f);
  const std::string e = error_of<IndexError>([&] {
    cross_entropy(x, dev(targets({0, 1, 7, -1})));
  });
  EXPECT_CONTAINS(e, "[_fused_cross_entropy]");
  EXPECT_CONTAINS(e, "target 7 of row 2");
  // Still usable after the error.
  EXPECT_FALSE(std::isnan(cross_entropy(x, dev(targets({0, 1, 6, 2}))).to(kCPU).item<float>()));
}

TEST(CudaFusedBiasGelu, MatchesCpuBothApproximations) {
  REQUIRE_GPU();
  for (const char* approx : {"tanh", "none"}) {
    for (DType dt : {kFloat32, kBFloat16}) {
      const std::string what = std::string(approx) + " " + dtype_name(dt);
      const Tensor x = mul(randn({8, 3072}, kFloat32, Generator(7)), 2.0).to(dt);
      const Tensor b = randn({3072}, kFloat32, Generator(8)).to(dt);
      const Tensor g = randn({8, 3072}, kFloat32, Generator(9)).to(dt);
      const double tol = dt == kFloat32 ? 1e-5 : 1e-2;
      expect_close(_bias_gelu(dev(x), dev(b), approx), _bias_gelu(x, b, approx), tol, tol,
                   "forward " + what);
      expect_close(_bias_gelu_backward(dev(g), dev(x), dev(b), approx),
                   _bias_gelu_backward(g, x, b, approx), tol, tol, "backward " + what);
    }
  }
}

TEST(CudaFusedBiasGelu, LinearGeluGradientsMatchCpuComposition) {
  REQUIRE_GPU();
  for (const char* approx : {"tanh", "none"}) {
    const Tensor x0 = randn({16, 64}, kFloat32, Generator(10));
    const Tensor w0 = mul(randn({256, 64}, kFloat32, Generator(11)), 0.1);
    const Tensor b0 = randn({256}, kFloat32, Generator(12));
    const Tensor up = randn({16, 256}, kFloat32, Generator(13));
    auto run = [&](Device d, bool fused) {
      // Fresh leaves on each device (x0.to(kCPU) would be x0 itself).
      Tensor x = x0.clone().to(d), w = w0.clone().to(d), b = b0.clone().to(d);
      x.requires_grad_();
      w.requires_grad_();
      b.requires_grad_();
      Tensor y = fused ? _linear_gelu(x, w, b, approx) : gelu(linear(x, w, b), approx);
      sum(mul(y, up.to(d))).backward();
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const auto ref = run(kCPU, false), got = run(kCuda, true);
    const char* names[] = {"output", "grad input", "grad weight", "grad bias"};
    for (size_t i = 0; i < 4; ++i) {
      // float32 products without TF32; sums over 16 to 256 terms.
      expect_close(got[i], ref[i], 1e-4, 1e-4, std::string(names[i]) + " " + approx);
    }
  }
}

// Adam on the GPU (the multi-tensor kernel, auto) against the same Adam on the CPU (the fused
// per-parameter loop): the same float formulas; the two compilers contract and round a few
// operations differently, so they agree within a few ulp after several steps.
TEST(CudaFusedAdam, MatchesCpuFusedStep) {
  REQUIRE_GPU();
  // 40 tensors (more than one table's 36), one of 22M elements (more than one table's 320
  // chunks of 65536), an empty one and odd sizes.
  std::vector<std::vector<int64_t>> sizes = {{22000003}, {0}, {1}, {65536}, {65537}, {3, 5}};
  for (int64_t i = 0; i < 34; ++i) sizes.push_back({17 * i + 3});
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      std::vector<Tensor> pc, pg;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const Tensor p = randn(sizes[i], kFloat32, Generator(200 + i));
        pc.push_back(p.clone().requires_grad_());
        pg.push_back(dev(p).requires_grad_());
      }
      optim::AdamOptions o = decoupled ? optim::adamw_defaults() : optim::AdamOptions{};
      o.lr = 3e-3;
      o.amsgrad = amsgrad;
      if (!decoupled) o.weight_decay = 0.01;  // coupled decay too
      std::unique_ptr<optim::Adam> cpu, gpu;
      if (decoupled) {
        cpu = std::make_unique<optim::AdamW>(pc, o);
        gpu = std::make_unique<optim::AdamW>(pg, o);
      } else {
        cpu = std::make_unique<optim::Adam>(pc, o);
        gpu = std::make_unique<optim::Adam>(pg, o);
      }
      for (int step = 0; step < 4; ++step) {
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (i == 4 && step == 2) {  // a parameter without a gradient lags one step
            autograd::zero_grads({pc[i], pg[i]});
            continue;
          }
          const Tensor g = randn(sizes[i], kFloat32, Generator(1000 * step + i));
          autograd::set_grad(pc[i], g);
          autograd::set_grad(pg[i], dev(g));
        }
        cpu->step();
        gpu->step();
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        // ~2 ulp of float32 relative, plus a floor for values near zero.
        expect_close(pg[i].detach(), pc[i].detach(), 2e-6, 1e-7,
                     "param " + std::to_string(i) + " decoupled=" + std::to_string(decoupled) +
                         " amsgrad=" + std::to_string(amsgrad));
      }
    }
  }
}

TEST(CudaFusedAdam, OperatorDirectlyAndRefusals) {
  REQUIRE_GPU();
  const Tensor p = randn({1000}, kFloat32, Generator(300)),
               g = randn({1000}, kFloat32, Generator(301));
  const Tensor m = mul(randn({1000}, kFloat32, Generator(302)), 0.1);
  const Tensor v = abs(mul(randn({1000}, kFloat32, Generator(303)), 0.1));
  std::vector<Tensor> cpu = {p.clone(), m.clone(), v.clone()};
  std::vector<Tensor> gpu = {dev(p), dev(m), dev(v)};
  _fused_adam_({cpu[0]}, {g}, {cpu[1]}, {cpu[2]}, {}, 1e-3, 0.9, 0.95, 0.1, 1e-8, false, true, true,
               {7});
  _fused_adam_({gpu[0]}, {dev(g)}, {gpu[1]}, {gpu[2]}, {}, 1e-3, 0.9, 0.95, 0.1, 1e-8, false, true,
               true, {7});
  for (size_t i = 0; i < 3; ++i)
    expect_close(gpu[i], cpu[i], 2e-6, 1e-7, "op tensor " + std::to_string(i));
  // float64 on the GPU, and a group spread over two devices with fused=true, are refused.
  const Tensor d = dev(p.to(kFloat64));
  EXPECT_CONTAINS(error_of<TypeError>([&] {
                    _fused_adam_({d}, {d}, {d}, {d}, {}, 1e-3, 0.9, 0.95, 0, 1e-8, false, false,
                                 true, {1});
                  }),
                  "float32");
  Tensor a = p.clone().requires_grad_(), b = dev(p).requires_grad_();
  autograd::set_grad(a, g);
  autograd::set_grad(b, dev(g));
  optim::AdamOptions o;
  o.fused = true;
  optim::Adam opt({a, b}, o);
  EXPECT_CONTAINS(error_of<ValueError>([&] { opt.step(); }), "more than one device");
}

}  // namespace
}  // namespace loom::testing
