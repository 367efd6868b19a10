// The fused flash-attention kernels on a real GPU (bfloat16 and float16 on tensor cores), against
// the composed path computed in float32 from the same rounded inputs: outputs, log-sum-exps and the
// gradients of query, key and value, for head sizes 32, 64 and 128, causal and full masks, lengths
// that are not multiples of the 64-row tiles, query and key lengths that differ, and strided
// (B, T, H, D) inputs; scaled_dot_product_attention's choice of path; float32 on CUDA taking the
// composed path with a warning. Label `cuda`: every test skips, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

const Device kCuda(DeviceType::CUDA, 0);

Tensor rnd(IntArrayRef shape, DType dt, uint64_t seed) {
  return randn(shape, TensorOptions(kFloat32), Generator(seed)).to(dt).to(kCuda);
}

// Largest |got - want| relative to the largest |want| (at least 1e-3: a gradient that is zero in
// exact arithmetic, as with one key, is compared in absolute terms), on the host in float64.
double rel_err(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(kCPU).to(kFloat64), w = want.to(kCPU).to(kFloat64);
  const double scale = std::max(1e-3, amax(w.abs()).item<double>());
  return amax(sub(g, w).abs()).item<double>() / scale;
}

struct Case {
  int64_t b, h, tq, tk, d;
  bool causal;
};

void check_case(const Case& c, DType dt, bool strided) {
  const std::string what = "b" + std::to_string(c.b) + " h" + std::to_string(c.h) + " tq" +
                           std::to_string(c.tq) + " tk" + std::to_string(c.tk) + " d" +
                           std::to_string(c.d) + (c.causal ? " causal " : " full ") +
                           dtype_name(dt) + (strided ? " strided" : "");
  Tensor q, k, v;
  if (strided) {  // (B, T, H, D) storage viewed as (B, H, T, D)
    q = transpose(rnd({c.b, c.tq, c.h, c.d}, dt, 1), 1, 2);
    k = transpose(rnd({c.b, c.tk, c.h, c.d}, dt, 2), 1, 2);
    v = transpose(rnd({c.b, c.tk, c.h, c.d}, dt, 3), 1, 2);
  } else {
    q = rnd({c.b, c.h, c.tq, c.d}, dt, 1);
    k = rnd({c.b, c.h, c.tk, c.d}, dt, 2);
    v = rnd({c.b, c.h, c.tk, c.d}, dt, 3);
  }
  const Tensor go = rnd({c.b, c.h, c.tq, c.d}, dt, 4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  auto [out, lse] = _flash_attention(q, k, v, c.causal, scale);
  ASSERT_TRUE(out.is_cuda()) << what;
  ASSERT_EQ(out.dtype(), dt) << what;
  ASSERT_EQ(lse.dtype(), kFloat32) << what;

  const Tensor q32 = q.to(kFloat32).requires_grad_(), k32 = k.to(kFloat32).requires_grad_(),
               v32 = v.to(kFloat32).requires_grad_();
  const Tensor want = attention_math(q32, k32, v32, 0.0, c.causal, scale);
  EXPECT_LT(rel_err(out, want.detach()), 2e-2) << what << " out";
  Tensor scores = mul(matmul(q32.detach(), transpose(k32.detach(), -2, -1)), scale);
  if (c.causal) {
    const TensorOptions o = TensorOptions(kInt64).with_device(kCuda);
    scores = masked_fill(scores, gt(unsqueeze(arange(c.tk, o), 0), unsqueeze(arange(c.tq, o), 1)),
                         -INFINITY);
  }
  EXPECT_LT(rel_err(lse, logsumexp(scores, {-1})), 1e-3) << what << " lse";

  auto [dq, dk, dv] = _flash_attention_backward(go, q, k, v, out, lse, c.causal, scale);
  const std::vector<Tensor> ref = autograd::grad({want}, {q32, k32, v32}, {go.to(kFloat32)});
  EXPECT_LT(rel_err(dq, ref[0]), 3e-2) << what << " dq";
  EXPECT_LT(rel_err(dk, ref[1]), 3e-2) << what << " dk";
  EXPECT_LT(rel_err(dv, ref[2]), 3e-2) << what << " dv";
}

TEST(CudaAttention, FusedKernelsMatchTheComposedPath) {
  REQUIRE_GPU();
  const Case cases[] = {{2, 3, 128, 128, 64, true},   {2, 3, 128, 128, 64, false},
                        {1, 2, 100, 100, 64, true},   {1, 2, 257, 257, 128, true},
                        {1, 2, 257, 257, 128, false}, {2, 2, 70, 70, 32, true},
                        {1, 1, 1, 1, 64, true},       {1, 2, 50, 190, 64, false},
                        {1, 2, 190, 50, 64, true},    {1, 1, 64, 300, 128, true}};
  for (const Case& c : cases) check_case(c, kBFloat16, false);
  check_case({2, 3, 128, 128, 64, true}, kFloat16, false);
  check_case({1, 2, 257, 257, 128, false}, kFloat16, false);
  check_case({2, 4, 200, 200, 64, true}, kBFloat16, true);
}

// Note [Attention layouts]: GPT's packed projection (B, T, 3C) split into q, k, v; the output and
// the gradients come back with the heads inside the rows, so out.transpose(1, 2) and the
// gradients' way back into the projection need no copy; grad_out arrives strided. All of it
// against the float32 composition.
TEST(CudaAttention, PackedProjectionLayoutsAndStridedGradOut) {
  REQUIRE_GPU();
  const int64_t b = 2, t = 200, h = 4, d = 64, c = h * d;
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor qkv0 = rnd({b, t, 3 * c}, dt, 7);
    const Tensor go_rows = rnd({b, t, c}, dt, 8);  // the projection's gradient, (B, T, C)
    auto attend = [&](const Tensor& qkv, bool fused) {
      const std::vector<Tensor> parts = split(qkv, c, 2);
      auto heads = [&](const Tensor& x) { return transpose(x.view({b, t, h, d}), 1, 2); };
      const Tensor y = fused ? scaled_dot_product_attention(heads(parts[0]), heads(parts[1]),
                                                            heads(parts[2]), 0.0, true)
                             : attention_math(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                              0.0, true, 1.0 / std::sqrt(double(d)));
      return transpose(y, 1, 2);
    };
    const Tensor qkv = qkv0.detach().requires_grad_();
    const Tensor y = attend(qkv, true);
    EXPECT_TRUE(y.is_contiguous()) << "the fused output is laid out (B, T, H, D)";
    const Tensor g = autograd::grad({y.reshape({b, t, c})}, {qkv}, {go_rows})[0];
    const Tensor q32 = qkv0.to(kFloat32).requires_grad_();
    const Tensor want = attend(q32, false);
    const Tensor gwant =
        autograd::grad({want.reshape({b, t, c})}, {q32}, {go_rows.to(kFloat32)})[0];
    EXPECT_LT(rel_err(y, want.detach()), 2e-2) << dtype_name(dt);
    EXPECT_LT(rel_err(g, gwant), 3e-2) << dtype_name(dt);
    // The backward's outputs are laid out like the forward's.
    auto [out, lse] =
        _flash_attention(transpose(qkv0.narrow(2, 0, c).view({b, t, h, d}), 1, 2),
                         transpose(qkv0.narrow(2, c, c).view({b, t, h, d}), 1, 2),
                         transpose(qkv0.narrow(2, 2 * c, c).view({b, t, h, d}), 1, 2), true, 0.125);
    EXPECT_EQ(out.strides().vec(), (std::vector<int64_t>{t * c, d, c, 1}));
  }
}

TEST(CudaAttention, LargeCausalProblem) {
  REQUIRE_GPU();
  check_case({2, 4, 1024, 1024, 64, true}, kBFloat16, true);
  check_case({1, 2, 2048, 2048, 128, true}, kBFloat16, false);
}

TEST(CudaAttention, ScaledDotProductAttentionPicksThePathAndTrainsThroughIt) {
  REQUIRE_GPU();
  const Tensor q = rnd({2, 4, 96, 64}, kBFloat16, 11).requires_grad_();
  const Tensor k = rnd({2, 4, 96, 64}, kBFloat16, 12).requires_grad_();
  const Tensor v = rnd({2, 4, 96, 64}, kBFloat16, 13).requires_grad_();
  EXPECT_TRUE(attention_backend(q, k, v).fused) << attention_backend(q, k, v).reason;
  const Tensor y = scaled_dot_product_attention(q, k, v, 0.0, true);
  sum(mul(y.to(kFloat32), y.to(kFloat32))).backward();
  ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
  EXPECT_EQ(q.grad().dtype(), kBFloat16);
  EXPECT_TRUE(std::isfinite(sum(q.grad().to(kFloat32).abs()).item<double>()));

  // float32 on CUDA: the composed path, said once.
  const Tensor f = rnd({1, 2, 16, 64}, kFloat32, 14);
  const AttentionBackend b = attention_backend(f, f, f);
  EXPECT_FALSE(b.fused);
  EXPECT_NE(b.reason.find("float32"), std::string::npos) << b.reason;
  WarningsToStderr quiet(false);
  const Tensor yf = scaled_dot_product_attention(f, f, f, 0.0, true);
  EXPECT_LT(rel_err(yf, attention_math(f, f, f, 0.0, true, 0.125)), 1e-5);
  bool warned = false;
  for (const Warning& w : warnings()) warned |= w.key.find("attention.math") != std::string::npos;
  EXPECT_TRUE(warned);
  // A direct call of the fused operator with float32 is a typed error.
  EXPECT_THROW(_flash_attention(f, f, f, true, 0.125), NotImplementedError);
}

}  // namespace
}  // namespace loom
