// scaled_dot_product_attention and the fused CPU flash-attention kernels, against the composed
// path (attention_math: matmul, masked softmax, matmul) and float64 finite differences: outputs and
// log-sum-exps, gradients of query, key and value, causal and full masks, lengths that cross the
// kernel's tiles, query and key lengths that differ, strided inputs, 3-D inputs, the backend
// report, and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"
#include "test_errors.h"

namespace loom {
namespace {

Tensor rnd(IntArrayRef shape, DType dt, uint64_t seed) {
  return randn(shape, TensorOptions(kFloat64), Generator(seed)).to(dt);
}

#define EXPECT_THROW_MSG(stmt, E, fragment) \
  EXPECT_CONTAINS(testing::error_of<E>([&] { (void)(stmt); }), fragment)

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  EXPECT_TRUE(allclose(got.to(kFloat64), want.to(kFloat64), tol, tol)) << what;
}

struct Case {
  int64_t b, h, tq, tk, d;
  bool causal;
};

// Forward and gradients of the fused kernel against the composed path computed in float64.
void check_case(const Case& c, DType dt, double tol) {
  const std::string what = "b" + std::to_string(c.b) + " h" + std::to_string(c.h) + " tq" +
                           std::to_string(c.tq) + " tk" + std::to_string(c.tk) + " d" +
                           std::to_string(c.d) + (c.causal ? " causal " : " full ") +
                           dtype_name(dt);
  const Tensor q = rnd({c.b, c.h, c.tq, c.d}, dt, 1), k = rnd({c.b, c.h, c.tk, c.d}, dt, 2),
               v = rnd({c.b, c.h, c.tk, c.d}, dt, 3), go = rnd({c.b, c.h, c.tq, c.d}, dt, 4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));

  auto [out, lse] = _flash_attention(q, k, v, c.causal, scale);
  // Reference in float64 from the same (rounded) inputs.
  const Tensor q64 = q.to(kFloat64).requires_grad_(), k64 = k.to(kFloat64).requires_grad_(),
               v64 = v.to(kFloat64).requires_grad_();
  const Tensor want = attention_math(q64, k64, v64, 0.0, c.causal, scale);
  expect_close(out, want.detach(), tol, what + " out");
  EXPECT_EQ(out.dtype(), dt);
  // lse = logsumexp of the masked, scaled scores.
  Tensor scores = mul(matmul(q64.detach(), transpose(k64.detach(), -2, -1)), scale);
  if (c.causal) {
    const Tensor future = gt(unsqueeze(arange(c.tk, TensorOptions(kInt64)), 0),
                             unsqueeze(arange(c.tq, TensorOptions(kInt64)), 1));
    scores = masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  expect_close(lse, logsumexp(scores, {-1}), tol, what + " lse");

  auto [dq, dk, dv] = _flash_attention_backward(go, q, k, v, out, lse, c.causal, scale);
  const std::vector<Tensor> ref = autograd::grad({want}, {q64, k64, v64}, {go.to(kFloat64)});
  expect_close(dq, ref[0], tol, what + " dq");
  expect_close(dk, ref[1], tol, what + " dk");
  expect_close(dv, ref[2], tol, what + " dv");
}

TEST(Attention, FusedKernelMatchesTheComposedPath) {
  // Lengths below, at and across the CPU kernel's tiles (32 queries, 64 keys).
  const Case cases[] = {{1, 1, 1, 1, 8, true},     {2, 3, 17, 17, 16, true},
                        {1, 2, 70, 70, 8, true},   {1, 2, 70, 70, 8, false},
                        {2, 1, 33, 129, 4, false}, {1, 1, 65, 40, 8, true},
                        {1, 1, 40, 65, 8, true},   {1, 2, 96, 96, 32, true}};
  for (const Case& c : cases) {
    check_case(c, kFloat64, 1e-10);
    check_case(c, kFloat32, 2e-5);
  }
  check_case({1, 2, 70, 70, 16, true}, kBFloat16, 3e-2);
  check_case({1, 2, 70, 70, 16, false}, kFloat16, 5e-3);
}

TEST(Attention, GradcheckInFloat64) {
  for (bool causal : {true, false}) {
    const Tensor q = rnd({1, 2, 5, 3}, kFloat64, 7).requires_grad_();
    const Tensor k = rnd({1, 2, 6, 3}, kFloat64, 8).requires_grad_();
    const Tensor v = rnd({1, 2, 6, 3}, kFloat64, 9).requires_grad_();
    auto fn = [&](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], 0.0, causal)};
    };
    EXPECT_EQ(autograd::gradcheck(fn, {q, k, v}), "") << (causal ? "causal" : "full");
    // With create_graph the derivative is written in differentiable operators.
    EXPECT_EQ(autograd::gradgradcheck(fn, {q, k, v}), "") << (causal ? "causal" : "full");
  }
}

TEST(Attention, ScaledDotProductAttentionUsesTheFusedKernelAndItsGradients) {
  const Tensor q = rnd({2, 2, 40, 8}, kFloat32, 11).requires_grad_();
  const Tensor k = rnd({2, 2, 40, 8}, kFloat32, 12).requires_grad_();
  const Tensor v = rnd({2, 2, 40, 8}, kFloat32, 13).requires_grad_();
  const AttentionBackend b = attention_backend(q, k, v);
  EXPECT_TRUE(b.fused);
  EXPECT_CONTAINS(b.reason, "flash");
  const Tensor y = scaled_dot_product_attention(q, k, v, 0.0, true, 0.3);
  EXPECT_CONTAINS(autograd::describe_graph(y), "_flash_attention");
  const Tensor want = attention_math(q, k, v, 0.0, true, 0.3);
  expect_close(y, want, 2e-5, "forward");
  const Tensor go = rnd({2, 2, 40, 8}, kFloat32, 14);
  const auto got = autograd::grad({y}, {q, k, v}, {go});
  const auto ref = autograd::grad({want}, {q, k, v}, {go});
  for (int i = 0; i < 3; ++i) expect_close(got[i], ref[i], 2e-5, "grad " + std::to_string(i));
}

TEST(Attention, StridedAndThreeDimensionalInputs) {
  // (B, T, H, D) viewed as (B, H, T, D), as a transformer splits heads.
  const Tensor x = rnd({2, 37, 3, 8}, kFloat32, 21);
  const Tensor q = transpose(x, 1, 2), k = transpose(mul(x, 0.5), 1, 2);
  const Tensor v = transpose(rnd({2, 37, 3, 8}, kFloat32, 22), 1, 2);
  ASSERT_FALSE(q.is_contiguous());
  expect_close(scaled_dot_product_attention(q, k, v, 0.0, true),
               attention_math(q, k, v, 0.0, true, 1.0 / std::sqrt(8.0)), 2e-5, "strided");
  // Note [Attention layouts]: the output and the gradients come back with the heads inside the
  // rows, as PyTorch's flash kernels return them.
  auto [out, lse] = _flash_attention(q, k, v, true, 0.25);
  EXPECT_EQ(out.strides().vec(), (std::vector<int64_t>{37 * 24, 8, 24, 1}));
  EXPECT_TRUE(transpose(out, 1, 2).is_contiguous());
  auto [dq, dk, dv] = _flash_attention_backward(out, q, k, v, out, lse, true, 0.25);
  for (const Tensor& g : {dq, dk, dv}) EXPECT_TRUE(transpose(g, 1, 2).is_contiguous());
  const Tensor q3 = rnd({3, 9, 4}, kFloat32, 23), k3 = rnd({3, 11, 4}, kFloat32, 24),
               v3 = rnd({3, 11, 4}, kFloat32, 25);
  const Tensor y3 = scaled_dot_product_attention(q3, k3, v3);
  ASSERT_EQ(y3.sizes().vec(), (std::vector<int64_t>{3, 9, 4}));
  expect_close(y3, attention_math(q3, k3, v3, 0.0, false, 0.5), 2e-5, "3-D");
}

TEST(Attention, DropoutRunsTheComposedPathAndSaysSo) {
  const Tensor q = rnd({1, 1, 8, 4}, kFloat32, 31);
  const AttentionBackend b = attention_backend(q, q, q, 0.1);
  EXPECT_FALSE(b.fused);
  EXPECT_CONTAINS(b.reason, "dropout");
  WarningsToStderr quiet(false);
  const Tensor y = scaled_dot_product_attention(q, q, q, 0.1, true);
  EXPECT_EQ(y.sizes().vec(), q.sizes().vec());
  bool warned = false;
  for (const Warning& w : warnings()) warned |= w.key.find("attention.math") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(Attention, BadInputsAreTypedErrors) {
  const Tensor q = rnd({1, 2, 4, 8}, kFloat32, 41);
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, rnd({1, 2, 4, 6}, kFloat32, 42), q), ValueError,
                   "one head_dim");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, q, rnd({1, 2, 5, 8}, kFloat32, 43)), ValueError,
                   "one length");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, q.to(kFloat64), q), TypeError,
                   "one floating dtype");
  EXPECT_THROW_MSG(scaled_dot_product_attention(rnd({4, 8}, kFloat32, 44), q, q), ValueError,
                   "expected query, key and value");
  EXPECT_THROW_MSG(scaled_dot_product_attention(q, q, q, 1.5), ValueError, "dropout_p");
  EXPECT_THROW_MSG(_flash_attention(q.to(kInt64), q.to(kInt64), q.to(kInt64), true, 1.0), TypeError,
                   "floating");
}

}  // namespace
}  // namespace loom
