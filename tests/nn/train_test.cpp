// End to end: modules, losses, autograd and optimizers together learn small problems.
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/nn.h"
#include "loom/optim.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

// y = X w* + b* + small noise, learned by one Linear layer with SGD and momentum.
TEST(Train, LinearRegressionReachesLowLoss) {
  Generator gen(123);
  Tensor x = randn({128, 3}, {}, gen);
  Tensor w_true = from_vector<float>({1.5f, -2.0f, 0.5f}, {3, 1});
  Tensor y = add(add(matmul(x, w_true), 0.3), mul(randn({128, 1}, {}, gen), 0.01));
  nn::Linear model(3, 1, true, &gen);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  double loss_value = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = nn::mse_loss(model(x), y);
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
  }
  EXPECT_LT(loss_value, 2e-4);
  std::vector<double> w = values(model.weight());
  EXPECT_NEAR(w[0], 1.5, 0.01);
  EXPECT_NEAR(w[1], -2.0, 0.01);
  EXPECT_NEAR(w[2], 0.5, 0.01);
  EXPECT_NEAR(model.bias().item<double>(), 0.3, 0.01);
}

// Exercises the derivatives of relu, log_softmax and nll_loss.
TEST(Train, MlpLearnsXor) {
  Generator gen(7);
  Tensor x = from_vector<float>({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2});
  Tensor labels = from_vector<int64_t>({0, 1, 1, 0});
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, 16, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 2, true, &gen)});
  optim::Adam opt(model->parameters(), {.lr = 0.05});
  optim::CosineAnnealingLR sched(opt, 300, 1e-3);
  double loss_value = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy_loss((*model)(x), labels);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 5.0);
    opt.step();
    sched.step();
    loss_value = loss.item<double>();
  }
  EXPECT_LT(loss_value, 0.05);
  model->eval();
  EXPECT_EQ(to_vector<int64_t>(argmax((*model)(x), 1)), (std::vector<int64_t>{0, 1, 1, 0}));
}

// Exercises the derivatives of conv2d, max_pool2d, gelu, layer_norm, dropout, log_softmax and
// nll_loss.
TEST(Train, SmallConvNetLossDecreases) {
  Generator gen(5);
  Tensor x = randn({8, 1, 8, 8}, {}, gen);
  Tensor labels = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1});
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, 1, true, &gen),
                       std::make_shared<nn::GELU>(),
                       std::make_shared<nn::MaxPool2d>(2),
                       std::make_shared<nn::Flatten>(),
                       std::make_shared<nn::LayerNorm>(std::vector<int64_t>{64}),
                       std::make_shared<nn::Dropout>(0.1, &gen),
                       std::make_shared<nn::Linear>(64, 3, true, &gen)};
  optim::AdamW opt(model.parameters(), {.lr = 0.01});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy_loss(model(x), labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace loom::testing
