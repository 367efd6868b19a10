// Autograd through views: in-place updates of a view rewrite its base's history (CopySlices), a
// view whose base changed in place reads the base's new history, and the errors that protect leaves
// and saved tensors. Every expected value is computed by hand.
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/ops.h"
#include "ops/op_table.h"

namespace loom {
namespace {

using testing::error_of;
using Vec = std::vector<double>;

Tensor leaf(Vec v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector(v, shape).requires_grad_();
}
Vec vec(const Tensor& t) {
  return to_vector<double>(t);
}

TEST(AutogradViews, InPlaceMulThroughSelect) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = mul(x, 1.0);
  y.select(0, 0).mul_(2.0);
  EXPECT_EQ(vec(y), (Vec{2, 2, 3, 4}));
  EXPECT_EQ(autograd::grad_fn(y)->name(), "CopySlices");
  sum(y).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{2, 1, 1, 1}));
}

TEST(AutogradViews, CopyIntoASliceGivesTheSourceItsGradient) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor w = leaf({10, 20});
  Tensor y = mul(x, 1.0);
  y.slice(0, 1, 3).copy_(w);
  EXPECT_EQ(vec(y), (Vec{1, 10, 20, 4}));
  // f = sum(y * [1, 2, 3, 4])
  sum(mul(y, from_vector<double>({1, 2, 3, 4}))).backward();
  EXPECT_EQ(vec(w.grad()), (Vec{2, 3}));
  EXPECT_EQ(vec(x.grad()), (Vec{1, 0, 0, 4}));  // the overwritten elements get nothing
}

TEST(AutogradViews, CopyWithBroadcastAndCastIntoAView) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = from_vector<float>({7}, {1}).requires_grad_();
  Tensor y = mul(x, 1.0);
  y.select(1, 2).copy_(w);  // both rows' last element = 7 (float32 -> float64)
  sum(mul(y, y)).backward();
  // d/dw sum over the two copies of (w^2) = 2 * 2w = 28, in w's dtype
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(to_vector<float>(w.grad()), (std::vector<float>{28}));
  EXPECT_EQ(vec(x.grad()), (Vec{2, 4, 0, 8, 10, 0}));
}

TEST(AutogradViews, InPlaceOnAViewOfALeafRaises) {
  Tensor x = leaf({1, 2, 3});
  std::string msg = error_of<ValueError>([&] { x.select(0, 0).mul_(2.0); });
  EXPECT_CONTAINS(msg, "view of a leaf tensor that requires grad");
  msg = error_of<ValueError>([&] { x.slice(0, 1, 3).transpose(0, 0).fill_(0.0); });
  EXPECT_CONTAINS(msg, "view of a leaf tensor that requires grad");
  EXPECT_EQ(vec(x), (Vec{1, 2, 3}));
}

TEST(AutogradViews, ViewSeesItsBaseModifiedInPlaceAfterwards) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 1.0);
  Tensor v = y.select(0, 1);  // a view taken before the in-place change
  y.mul_(3.0);
  EXPECT_EQ(vec(v), (Vec{6}));
  v.backward();  // v = 3 * x[1]
  EXPECT_EQ(vec(x.grad()), (Vec{0, 3, 0}));
}

TEST(AutogradViews, ViewSeesAnInPlaceChangeMadeThroughAnotherView) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 1.0);
  Tensor row = y.select(0, 0);
  Tensor col = y.select(1, 1);
  col.mul_(5.0);  // y = [[1, 10], [3, 20]]
  EXPECT_EQ(vec(row), (Vec{1, 10}));
  sum(row).backward();  // row = [x00, 5 x01]
  EXPECT_EQ(vec(x.grad()), (Vec{1, 5, 0, 0}));
}

TEST(AutogradViews, InPlaceThroughAChainOfViews) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  Tensor y = mul(x, 1.0);
  Tensor v = y.view({2, 3}).transpose(0, 1).select(0, 2);  // elements 2 and 5
  v.add_(v);                                               // doubles them: its derivative is 2
  EXPECT_EQ(vec(y), (Vec{1, 2, 6, 4, 5, 12}));
  sum(mul(y, y)).backward();  // d/dx y^2 = 2 y dy/dx
  EXPECT_EQ(vec(x.grad()), (Vec{2, 4, 24, 8, 10, 48}));
}

TEST(AutogradViews, InPlaceOnAViewWithAnOperandThatRequiresGrad) {
  Tensor x = leaf({1, 2, 3});
  Tensor s = leaf({4, 5});
  Tensor y = mul(x, 1.0);
  y.slice(0, 0, 2).mul_(s);  // y = [4, 10, 3]
  sum(y).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{4, 5, 1}));
  EXPECT_EQ(vec(s.grad()), (Vec{1, 2}));
}

TEST(AutogradViews, ModifyingAViewOfASavedTensorIsDetected) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 1.0);
  Tensor z = mul(y, y);  // saves y
  y.select(0, 0).mul_(2.0);
  std::string msg = error_of<ValueError>([&] { sum(z).backward(); });
  EXPECT_CONTAINS(msg, "modified by an in-place operation");
}

TEST(AutogradViews, SecondDerivativeThroughCopySlices) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 1.0);
  y.slice(0, 0, 2).mul_(x.slice(0, 0, 2));  // y = [x0^2, x1^2, x2]
  auto g = autograd::grad({sum(y)}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(vec(g[0]), (Vec{2, 4, 1}));
  ASSERT_TRUE(g[0].requires_grad());
  sum(g[0]).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{2, 2, 0}));
}

TEST(AutogradViews, SecondDerivativeThroughARegeneratedView) {
  // v's history is regenerated (AsStridedBackward) after y changed in place; with create_graph the
  // gradient through it must itself be differentiable.
  Tensor x = leaf({1, 2, 3});
  Tensor y = mul(x, 1.0);
  Tensor v = y.select(0, 0);
  y.mul_(2.0);
  Tensor f = mul(v, v);  // (2 x0)^2
  auto g = autograd::grad({f}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(vec(g[0]), (Vec{8, 0, 0}));  // 8 x0
  ASSERT_TRUE(g[0].requires_grad());
  sum(g[0]).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{8, 0, 0}));
}

TEST(AutogradViews, SecondDerivativeOfAnInPlaceOpUsesTheOldValuesHistory) {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 1.0);
  y.mul_(x);  // x^2: mul_ saves a copy of y's old value
  auto g = autograd::grad({sum(y)}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(vec(g[0]), (Vec{2, 4}));
  sum(g[0]).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{2, 2}));
}

TEST(AutogradViews, SplitOutputsWithoutGradientsGiveZeros) {
  Tensor x = leaf({1, 2, 3, 4, 5});
  auto parts = split(x, 2);
  ASSERT_EQ(parts.size(), 3u);
  sum(mul(parts[1], 3.0)).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{0, 0, 3, 3, 0}));
  auto rows = unbind(leaf({1, 2, 3, 4}, {2, 2}), 1);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].requires_grad());
}

TEST(AutogradViews, InPlaceOnAnUnbindOutput) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = mul(x, 1.0);
  auto rows = unbind(y, 0);
  rows[1].mul_(3.0);  // y = [[1, 2], [9, 12]]
  EXPECT_EQ(vec(y), (Vec{1, 2, 9, 12}));
  add(sum(y), sum(rows[0])).backward();  // the first row counts twice
  EXPECT_EQ(vec(x.grad()), (Vec{2, 2, 3, 3}));
}

TEST(AutogradViews, ExpandAndAsStridedSumOverlappingElements) {
  Tensor x = leaf({1, 2, 3});
  sum(x.expand({4, 3})).backward();
  EXPECT_EQ(vec(x.grad()), (Vec{4, 4, 4}));
  Tensor z = leaf({1, 2, 3, 4});
  sum(as_strided(z, {3, 2}, {1, 1}, 0)).backward();  // windows [0,1], [1,2], [2,3]
  EXPECT_EQ(vec(z.grad()), (Vec{1, 2, 2, 1}));
}

TEST(AutogradViews, ToCopyCastsTheGradientBack) {
  Tensor x = leaf({1, 2});
  Tensor y = x.to(kFloat32);
  sum(mul(y, y)).backward();
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_EQ(vec(x.grad()), (Vec{2, 4}));
}

TEST(AutogradViews, EmbeddingPaddingRowGetsNoGradient) {
  Tensor w = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor idx = from_vector<int64_t>({0, 2, 2, 1}, {4});
  sum(embedding(w, idx, /*padding_idx=*/2)).backward();
  EXPECT_EQ(vec(w.grad()), (Vec{1, 1, 1, 1, 0, 0}));
}

}  // namespace
}  // namespace loom
