// Autocast and GradScaler on CUDA tensors, in bfloat16 and float16: listed operators against the
// same computation with the casts written out (bit for bit: the same kernels run), float32
// gradients of float32 parameters, CPU tensors left alone by a CUDA guard, and a scaled training
// step that skips on an overflow. Label `cuda`: every test skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "loom/amp.h"
#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/cuda.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

Tensor rnd_cuda(IntArrayRef sizes, uint64_t seed, DType dt = kFloat32) {
  return randn(sizes, TensorOptions(kFloat32), Generator(seed)).to(kCuda).to(dt);
}

class CudaAutocast : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAutocast, ListedOperatorsMatchTheExplicitCast) {
  REQUIRE_GPU();
  const DType low = GetParam();
  const Tensor x = rnd_cuda({8, 32}, 1), w = rnd_cuda({16, 32}, 2), b = rnd_cuda({16}, 3);
  const Tensor xl = rnd_cuda({8, 16}, 4, low);
  const Tensor xc = randn({8, 32}), wc = randn({32, 4});
  AutocastGuard g(DeviceType::CUDA, low);
  EXPECT_TRUE(autocast_enabled(DeviceType::CUDA));
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.dtype(), low);
  EXPECT_TRUE(y.is_cuda());
  EXPECT_TRUE(equal(y, linear(x.to(low), w.to(low), b.to(low))));
  y = matmul(x, w.t());
  EXPECT_EQ(y.dtype(), low);
  EXPECT_TRUE(equal(y, mm(x.to(low), w.t().to(low))));
  // Float32 operators on low-precision inputs.
  Tensor s = softmax(xl, 1);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_TRUE(allclose(s, softmax(xl.to(kFloat32), 1), 1e-6, 1e-7));
  s = log_softmax(xl, 1);
  EXPECT_EQ(s.dtype(), kFloat32);
  s = layer_norm(xl, {16});
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_TRUE(equal(s, layer_norm(xl.to(kFloat32), {16})));
  // Promote.
  const Tensor c = cat({x.narrow(1, 0, 16), xl});
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_TRUE(equal(c, cat({x.narrow(1, 0, 16), xl.to(kFloat32)})));
  // CPU tensors under a CUDA guard: untouched.
  EXPECT_EQ(mm(xc, wc).dtype(), kFloat32);
}

TEST_P(CudaAutocast, Float32ParametersGetFloat32GradientsEqualToTheExplicitCast) {
  REQUIRE_GPU();
  const DType low = GetParam();
  const Tensor w = rnd_cuda({16, 32}, 5).requires_grad_();
  const Tensor b = rnd_cuda({16}, 6).requires_grad_();
  const Tensor x = rnd_cuda({8, 32}, 7), mix = rnd_cuda({8, 16}, 8);
  Tensor loss;
  {
    AutocastGuard g(DeviceType::CUDA, low);
    loss = sum(softmax(linear(x, w, b), 1) * mix);
    EXPECT_EQ(autocast_cached_casts(), 2u);  // w and b
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  loss.backward();
  const Tensor w2 = w.detach().clone().requires_grad_();
  const Tensor b2 = b.detach().clone().requires_grad_();
  sum(softmax(linear(x.to(low), w2.to(low), b2.to(low)), 1, kFloat32) * mix).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_TRUE(w.grad().is_cuda());
  EXPECT_TRUE(equal(w.grad(), w2.grad()));
  EXPECT_TRUE(equal(b.grad(), b2.grad()));
}

// A scaled step on CUDA: the unscaled gradients are the plain ones, an inf gradient skips the step
// and halves the scale, and the parameters step only on clean iterations.
TEST_P(CudaAutocast, GradScalerSkipsOverflowsAndUnscales) {
  REQUIRE_GPU();
  const DType low = GetParam();
  const Tensor w = rnd_cuda({4, 8}, 9).requires_grad_();
  const Tensor x = rnd_cuda({3, 8}, 10);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
  amp::GradScalerOptions so;
  so.init_scale = 1024.0;
  amp::GradScaler scaler(so);

  // Reference gradient without scaling.
  Tensor ref_grad;
  {
    const Tensor w2 = w.detach().clone().requires_grad_();
    AutocastGuard g(DeviceType::CUDA, low);
    Tensor l = sum(mm(x, w2.t()));
    l.backward();
    ref_grad = w2.grad().clone();
  }
  {
    AutocastGuard g(DeviceType::CUDA, low);
    const Tensor l = sum(mm(x, w.t()));
    scaler.scale(l).backward();
  }
  scaler.unscale_(opt);
  EXPECT_TRUE(allclose(w.grad(), ref_grad, 1e-6, 1e-6));
  const Tensor before = w.detach().clone();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(allclose(w.detach(), before - ref_grad * 0.1, 1e-6, 1e-6));
  EXPECT_EQ(scaler.get_scale(), 1024.0);

  // An inf in the gradient: no step, the scale halves.
  opt.zero_grad();
  {
    AutocastGuard g(DeviceType::CUDA, low);
    const Tensor l = sum(mm(x, w.t())) * std::numeric_limits<float>::infinity();
    scaler.scale(l).backward();
  }
  const Tensor kept = w.detach().clone();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(equal(w.detach(), kept));
  EXPECT_EQ(scaler.get_scale(), 512.0);
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, CudaAutocast, ::testing::Values(kBFloat16, kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return info.param == kBFloat16 ? "bf16" : "f16";
                         });

}  // namespace
}  // namespace loom
