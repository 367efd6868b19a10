// Losses: values against hand-computed ones, reductions, label smoothing, errors, and gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loom/autograd.h"
#include "loom/nn.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

TEST(MSELoss, ValuesAndReductions) {
  Tensor a = f64({1, 2, 3, 4}, {2, 2});
  Tensor b = f64({0, 2, 5, 3}, {2, 2});
  EXPECT_EQ(values(nn::mse_loss(a, b, Reduction::None)), (std::vector<double>{1, 0, 4, 1}));
  EXPECT_DOUBLE_EQ(nn::mse_loss(a, b).item<double>(), 1.5);
  EXPECT_DOUBLE_EQ(nn::mse_loss(a, b, Reduction::Sum).item<double>(), 6.0);
  EXPECT_DOUBLE_EQ(nn::MSELoss(Reduction::Sum)(a, b).item<double>(), 6.0);
}

TEST(MSELoss, Errors) {
  const std::string shape = error_of<ValueError>([] { nn::mse_loss(zeros({4, 1}), zeros({4})); });
  EXPECT_CONTAINS(shape, "[mse_loss] input shape [4, 1] and target shape [4] differ");
  EXPECT_CONTAINS(error_of<TypeError>([] { nn::mse_loss(zeros({4}), zeros({4}, kFloat64)); }),
                  "input dtype float32 and target dtype float64 differ");
}

TEST(MSELoss, Gradient) {
  Tensor a = f64({1, 2, 3, 4}, {4});
  a.requires_grad_();
  Tensor b = f64({0, 2, 5, 3}, {4});
  nn::mse_loss(a, b).backward();
  // d/da mean((a - b)^2) = 2 (a - b) / n
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 0.0, -1.0, 0.5}));
}

// -log softmax(x)[target], by hand.
double nll_of(const std::vector<double>& logits, size_t target, double smoothing = 0.0) {
  double m = logits[0];
  for (double v : logits) m = std::max(m, v);
  double s = 0;
  for (double v : logits) s += std::exp(v - m);
  const double lse = m + std::log(s);
  double smooth = 0;
  for (double v : logits) smooth += lse - v;
  const auto c = static_cast<double>(logits.size());
  return (1 - smoothing) * (lse - logits[target]) + smoothing * smooth / c;
}

TEST(CrossEntropyLoss, ValuesSmoothingAndReduction) {
  Tensor x = f64({1, 2, 0.5, -1, 0, 3}, {2, 3});
  Tensor t = from_vector<int64_t>({1, 2});
  const double l0 = nll_of({1, 2, 0.5}, 1), l1 = nll_of({-1, 0, 3}, 2);
  EXPECT_NEAR(nn::cross_entropy_loss(x, t).item<double>(), (l0 + l1) / 2, 1e-12);
  nn::CrossEntropyOptions sum;
  sum.reduction = Reduction::Sum;
  EXPECT_NEAR(nn::CrossEntropyLoss(sum)(x, t).item<double>(), l0 + l1, 1e-12);
  nn::CrossEntropyOptions smooth;
  smooth.label_smoothing = 0.1;
  EXPECT_NEAR(nn::cross_entropy_loss(x, t, smooth).item<double>(),
              (nll_of({1, 2, 0.5}, 1, 0.1) + nll_of({-1, 0, 3}, 2, 0.1)) / 2, 1e-12);
  nn::CrossEntropyOptions ignore;
  ignore.ignore_index = 2;
  EXPECT_NEAR(nn::cross_entropy_loss(x, t, ignore).item<double>(), l0, 1e-12);
  nn::CrossEntropyOptions bad;
  bad.label_smoothing = 1.5;
  EXPECT_CONTAINS(error_of<ValueError>([&] { nn::cross_entropy_loss(x, t, bad); }),
                  "label_smoothing");
}

// Through the derivatives of log_softmax and nll_loss.
TEST(CrossEntropyLoss, Gradient) {
  Tensor x = f64({1, 2, 0.5, -1, 0, 3}, {2, 3});
  x.requires_grad_();
  Tensor t = from_vector<int64_t>({1, 2});
  nn::cross_entropy_loss(x, t).backward();
  // (softmax(x) - onehot(t)) / N
  std::vector<double> g = values(x.grad());
  const std::vector<std::vector<double>> rows = {{1, 2, 0.5}, {-1, 0, 3}};
  const size_t targets[2] = {1, 2};
  for (size_t r = 0; r < 2; ++r) {
    double s = 0;
    for (double v : rows[r]) s += std::exp(v);
    for (size_t c = 0; c < 3; ++c) {
      const double want = (std::exp(rows[r][c]) / s - (c == targets[r] ? 1.0 : 0.0)) / 2.0;
      EXPECT_NEAR(g[r * 3 + c], want, 1e-12);
    }
  }
}

}  // namespace
}  // namespace loom::testing
