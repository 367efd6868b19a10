// Initialisers: fans, gains, bounds and moments, reproducibility from a seed, PyTorch's defaults
// for Linear, Conv2d and Embedding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/nn.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

namespace init = nn::init;

struct Moments {
  double min, max, mean, var;
};
Moments moments(const Tensor& t) {
  auto v = values(t);
  Moments m{v[0], v[0], 0, 0};
  for (double x : v) {
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.mean += x;
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size());
  return m;
}

TEST(Init, FanInFanOutAndGain) {
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({256, 784})),
            std::make_pair(int64_t{784}, int64_t{256}));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(empty({16, 3, 5, 5})),
            std::make_pair(int64_t{75}, int64_t{400}));
  EXPECT_CONTAINS(error_of<ValueError>([] { init::calculate_fan_in_and_fan_out(empty({5})); }),
                  "fewer than 2 dimensions");
  EXPECT_DOUBLE_EQ(init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_CONTAINS(error_of<ValueError>([] { init::calculate_gain("swish"); }), "swish");
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    init::kaiming_uniform_(empty({3, 3}), 0, "fan_avg");
                  }),
                  "fan_avg");
  EXPECT_CONTAINS(error_of<TypeError>([] { init::uniform_(empty({3}, kInt64)); }),
                  "floating-point");
}

TEST(Init, KaimingUniformBoundAndVariance) {
  Tensor w = empty({512, 400});
  Generator gen(11);
  init::kaiming_uniform_(w, 0.0, "fan_in", "relu", &gen);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 400.0);
  Moments m = moments(w);
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  EXPECT_GT(m.max, 0.99 * bound);  // 204800 draws reach the edges
  EXPECT_LT(m.min, -0.99 * bound);
  EXPECT_NEAR(m.mean, 0.0, 0.01 * bound);
  EXPECT_NEAR(m.var, bound * bound / 3.0, 0.02 * bound * bound / 3.0);
  // fan_out uses size(0).
  init::kaiming_uniform_(w, 0.0, "fan_out", "relu", &gen);
  EXPECT_LE(moments(w).max, std::sqrt(2.0) * std::sqrt(3.0 / 512.0));
}

TEST(Init, KaimingNormalAndXavierMoments) {
  Generator gen(12);
  Tensor w = empty({400, 300}, kFloat64);
  init::kaiming_normal_(w, 0.0, "fan_in", "relu", &gen);
  Moments m = moments(w);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.var, 2.0 / 300.0, 0.03 * 2.0 / 300.0);
  init::xavier_uniform_(w, 1.0, &gen);
  const double xb = std::sqrt(6.0 / 700.0);
  m = moments(w);
  EXPECT_LE(m.max, xb);
  EXPECT_GE(m.min, -xb);
  EXPECT_NEAR(m.var, 2.0 / 700.0, 0.03 * 2.0 / 700.0);
  init::xavier_normal_(w, 2.0, &gen);
  EXPECT_NEAR(moments(w).var, 4.0 * 2.0 / 700.0, 0.03 * 8.0 / 700.0);
  init::normal_(w, 3.0, 0.5, &gen);
  m = moments(w);
  EXPECT_NEAR(m.mean, 3.0, 0.01);
  EXPECT_NEAR(m.var, 0.25, 0.01);
  init::uniform_(w, -1.0, 2.0, &gen);
  m = moments(w);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LT(m.max, 2.0);
  EXPECT_NEAR(m.mean, 0.5, 0.02);
  init::zeros_(w);
  EXPECT_EQ(moments(w).max, 0.0);
  init::ones_(w);
  EXPECT_EQ(moments(w).min, 1.0);
  init::constant_(w, 0.25);
  EXPECT_EQ(moments(w).mean, 0.25);
}

TEST(Init, SameSeedSameWeights) {
  Generator a(42), b(42), c(43);
  nn::Linear la(20, 10, true, &a), lb(20, 10, true, &b), lc(20, 10, true, &c);
  EXPECT_EQ(values(la.weight()), values(lb.weight()));
  EXPECT_EQ(values(la.bias()), values(lb.bias()));
  EXPECT_NE(values(la.weight()), values(lc.weight()));
  // The default generator, reseeded, is reproducible too.
  manual_seed(7);
  nn::Conv2d c1(3, 4, 3);
  manual_seed(7);
  nn::Conv2d c2(3, 4, 3);
  EXPECT_EQ(values(c1.weight()), values(c2.weight()));
  EXPECT_EQ(values(c1.bias()), values(c2.bias()));
}

TEST(Init, PyTorchDefaultsForLinearConvEmbedding) {
  Generator gen(5);
  nn::Linear lin(784, 256, true, &gen);
  const double b = 1.0 / std::sqrt(784.0);  // kaiming_uniform(a = sqrt(5)) == U(-1/sqrt(fan_in), .)
  Moments w = moments(lin.weight()), bias = moments(lin.bias());
  EXPECT_GE(w.min, -b);
  EXPECT_LE(w.max, b);
  EXPECT_GT(w.max, 0.99 * b);
  EXPECT_NEAR(w.var, b * b / 3.0, 0.02 * b * b / 3.0);
  EXPECT_GE(bias.min, -b);
  EXPECT_LE(bias.max, b);
  EXPECT_GT(bias.max - bias.min, b);  // spread over the interval, not zeros

  nn::Conv2d conv(6, 16, {3, 5}, 1, 0, 1, /*groups=*/2, true, &gen);
  const double cb = 1.0 / std::sqrt(3.0 * 3 * 5);  // fan_in = in / groups * kh * kw
  EXPECT_EQ(conv.weight().sizes(), IntArrayRef({16, 3, 3, 5}));
  EXPECT_LE(moments(conv.weight()).max, cb);
  EXPECT_GT(moments(conv.weight()).max, 0.9 * cb);
  EXPECT_LE(moments(conv.bias()).max, cb);

  nn::Embedding emb(1000, 64, /*padding_idx=*/-1, &gen);
  Moments e = moments(emb.weight().narrow(0, 0, 999));
  EXPECT_NEAR(e.mean, 0.0, 0.02);
  EXPECT_NEAR(e.var, 1.0, 0.03);
  EXPECT_EQ(values(emb.weight().select(0, 999)), std::vector<double>(64, 0.0));
}

}  // namespace
}  // namespace loom::testing
