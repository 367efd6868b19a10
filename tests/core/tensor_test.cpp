#include <gtest/gtest.h>

#include "loom/ops.h"

namespace loom {
namespace {

std::vector<float> vals(const Tensor& t) {
  return to_vector<float>(t);
}

TEST(Tensor, ViewsShareStorageAndVersion) {
  Tensor a = arange(0, 12, 1, kFloat32).view({3, 4});
  Tensor t = a.t();
  EXPECT_EQ(t.storage().get(), a.storage().get());
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(t.is_contiguous());
  uint32_t v = a.version();
  t.select(0, 1).fill_(-1);  // writes column 1 of a
  EXPECT_GT(a.version(), v);
  EXPECT_EQ(vals(a.select(1, 1)), (std::vector<float>{-1, -1, -1}));
  // slice with step, narrow, expand, squeeze/unsqueeze, as_strided
  EXPECT_EQ(vals(arange(0, 10, 1, kFloat32).slice(0, 1, 9, 3)), (std::vector<float>{1, 4, 7}));
  EXPECT_EQ(vals(arange(0, 10, 1, kFloat32).slice(0, -3, std::nullopt)),
            (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(a.narrow(1, 2, 2).sizes().vec(), (std::vector<int64_t>{3, 2}));
  Tensor e = from_vector<float>({1, 2}, {2, 1}).expand({2, 3});
  EXPECT_EQ(e.strides().vec(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(vals(e), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(zeros({1, 3, 1}).squeeze().sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(zeros({1, 3, 1}).squeeze(0).sizes().vec(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(zeros({3}).unsqueeze(-1).sizes().vec(), (std::vector<int64_t>{3, 1}));
  Tensor w = as_strided(arange(0, 6, 1, kFloat32), {2, 2}, {1, 2}, 1);
  EXPECT_EQ(vals(w), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(vals(a.permute({1, 0}).contiguous().view({-1}).narrow(0, 0, 3)),
            (std::vector<float>{0, 4, 8}));
}

TEST(Tensor, ReshapeCopiesOnlyWhenNeeded) {
  Tensor a = arange(0, 6, 1, kFloat32).view({2, 3});
  EXPECT_EQ(a.reshape({3, 2}).storage().get(), a.storage().get());
  Tensor t = a.t();
  Tensor r = t.reshape({6});
  EXPECT_NE(r.storage().get(), a.storage().get());
  EXPECT_EQ(vals(r), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(t.view({6}), ValueError);
  EXPECT_EQ(zeros({2, 3, 4}).flatten(1).sizes().vec(), (std::vector<int64_t>{2, 12}));
}

TEST(Tensor, SplitChunkUnbind) {
  Tensor a = arange(0, 10, 1, kFloat32);
  auto s = split(a, 4);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].numel(), 2);
  auto c = chunk(a, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].numel(), 4);
  auto u = unbind(a.view({2, 5}), 1);
  ASSERT_EQ(u.size(), 5u);
  EXPECT_EQ(vals(u[1]), (std::vector<float>{1, 6}));
  EXPECT_THROW(split_with_sizes(a, {3, 3}), ValueError);
}

TEST(Tensor, BadViewsRaiseTypedErrors) {
  Tensor a = zeros({2, 3});
  EXPECT_THROW(a.view({4, 2}), ValueError);
  EXPECT_THROW(a.view({-1, -1}), ValueError);
  EXPECT_THROW(a.permute({0, 0}), ValueError);
  EXPECT_THROW(a.permute({0}), ValueError);
  EXPECT_THROW(a.transpose(0, 2), IndexError);
  EXPECT_THROW(a.select(1, 3), IndexError);
  EXPECT_THROW(a.narrow(1, 2, 2), IndexError);
  EXPECT_THROW(a.expand({4, 3}), ValueError);
  EXPECT_THROW(as_strided(a, {3, 3}, {3, 1}), ValueError);  // past the storage
  EXPECT_THROW(zeros({-1}), ValueError);
  EXPECT_THROW(a.size(2), IndexError);
  try {
    a.select(1, 7);
  } catch (const IndexError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[select]", 0), 0u) << m;
    EXPECT_NE(m.find("7"), std::string::npos) << m;
  }
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(from_vector<float>({1, 2, 3}).str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(from_vector<float>({1.5f, 2.25f}).str(), "tensor([1.5000, 2.2500])");
  EXPECT_EQ(from_vector<int32_t>({1, 20}).str(), "tensor([ 1, 20], dtype=int32)");
  EXPECT_EQ(from_vector<int64_t>({3, 4}, {2, 1}).str(), "tensor([[3],\n        [4]])");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([ True, False])");
  EXPECT_EQ(scalar_tensor(2.5).str(), "tensor(2.5000)");
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], size=[0, 3])");
  EXPECT_EQ(from_vector<double>({1e-5, 1.0}).str(),
            "tensor([1.0000e-05, 1.0000e+00], dtype=float64)");
  EXPECT_EQ(empty({2}, TensorOptions().with_device(kMeta)).str(),
            "tensor(..., device='meta', size=[2])");
  std::string big = arange(0, 2000, 1, kInt64).str();
  EXPECT_NE(big.find("..."), std::string::npos);
}

TEST(Tensor, ItemAndDataAccessCheckTypes) {
  Tensor a = full({1}, 3.5);
  EXPECT_EQ(a.item<double>(), 3.5);
  EXPECT_THROW(zeros({2}).item(), ValueError);
  EXPECT_THROW(a.data_ptr<int32_t>(), TypeError);
  EXPECT_THROW(Tensor().data_ptr<float>(), ValueError);
}

TEST(Factories, ValuesDtypesAndDeterminism) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(0, 1, 0.25).numel(), 4);
  EXPECT_EQ(vals(linspace(0, 1, 5)), (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1}));
  EXPECT_EQ(vals(eye(2, 3)), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 3).dtype(), kInt64);
  manual_seed(1);
  Tensor r1 = rand({1000});
  manual_seed(1);
  Tensor r2 = rand({1000});
  EXPECT_EQ(vals(r1), vals(r2));
  for (float v : vals(r1)) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
  }
  Tensor n = randn({100000}, kFloat64);
  double m = 0, s2 = 0;
  for (double v : to_vector<double>(n)) m += v;
  m /= 100000;
  for (double v : to_vector<double>(n)) s2 += (v - m) * (v - m);
  s2 /= 100000;
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(s2, 1.0, 0.02);
  Tensor ri = randint(3, 7, {1000});
  for (int64_t v : to_vector<int64_t>(ri)) {
    ASSERT_GE(v, 3);
    ASSERT_LT(v, 7);
  }
  EXPECT_THROW(randint(5, 5, {1}), ValueError);
  EXPECT_THROW(rand({2}, kInt32), TypeError);
  EXPECT_THROW(arange(0, 5, 0), ValueError);
  EXPECT_THROW(arange(0, 5, -1), ValueError);
}

TEST(Copy, CastsBroadcastsAndChecks) {
  Tensor d = zeros({2, 3}, kInt32);
  d.copy_(from_vector<float>({1.7f, -2.2f, 3.9f}));
  EXPECT_EQ(to_vector<int32_t>(d), (std::vector<int32_t>{1, -2, 3, 1, -2, 3}));
  Tensor h = from_vector<float>({0.1f, 1000.5f}).to(kFloat16).to(kFloat32);
  EXPECT_NEAR(vals(h)[0], 0.1f, 1e-4);
  EXPECT_EQ(vals(h)[1], 1000.5f);
  EXPECT_EQ(to_vector<bool>(from_vector<float>({0, 2}).to(kBool)),
            (std::vector<bool>{false, true}));
  EXPECT_THROW(zeros({2}).copy_(zeros({3})), ValueError);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {
TEST(TensorToVector, IntegersConvertExactly) {
  Tensor t = from_vector<int32_t>({2147483647, -2147483647 - 1, 16777217});
  EXPECT_EQ(to_vector<int32_t>(t), (std::vector<int32_t>{2147483647, -2147483647 - 1, 16777217}));
  EXPECT_EQ(to_vector<int64_t>(t), (std::vector<int64_t>{2147483647, -2147483648LL, 16777217}));
}
}  // namespace
}  // namespace loom
