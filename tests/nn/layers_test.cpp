// Layers: forward results against direct operator calls or hand-computed values, input checks with
// typed errors naming the module, Dropout in training and evaluation mode, Sequential.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "loom/autograd.h"
#include "loom/nn.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

TEST(Linear, ForwardMatchesFormula) {
  nn::Linear lin(3, 2);
  lin.to(kFloat64);
  {
    autograd::NoGradGuard g;
    lin.weight().copy_(f64({1, 2, 3, 4, 5, 6}, {2, 3}));
    lin.bias().copy_(f64({0.5, -1}, {2}));
  }
  Tensor y = lin(f64({1, 0, -1, 2, 1, 0}, {2, 3}));
  EXPECT_EQ(values(y), (std::vector<double>{1 - 3 + 0.5, 4 - 6 - 1, 2 + 2 + 0.5, 8 + 5 - 1}));
  // Any number of leading dims.
  EXPECT_EQ(lin(zeros({4, 5, 3}, kFloat64)).sizes(), IntArrayRef({4, 5, 2}));
  nn::Linear no_bias(3, 2, /*bias=*/false);
  EXPECT_FALSE(no_bias.bias().defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  EXPECT_EQ(no_bias.name(), "Linear(3 -> 2, bias=false)");
}

TEST(Linear, ShapeAndDtypeErrors) {
  nn::Linear lin(784, 256);
  const std::string msg = error_of<ValueError>([&] { lin(zeros({128, 780})); });
  EXPECT_EQ(msg,
            "[Linear(784 -> 256)] input has 780 features in its last dimension, expected 784 "
            "(input shape [128, 780])");
  EXPECT_CONTAINS(error_of<ValueError>([&] { lin(scalar_tensor(1.0)); }), "0-D");
  const std::string tmsg = error_of<TypeError>([&] { lin(zeros({2, 784}, kFloat64)); });
  EXPECT_CONTAINS(tmsg, "[Linear(784 -> 256)] input dtype float64");
  EXPECT_CONTAINS(tmsg, "parameter dtype float32");
  EXPECT_CONTAINS(error_of<TypeError>([&] { lin(zeros({2, 784}, kInt64)); }), "int64");
  EXPECT_CONTAINS(error_of<ValueError>([&] { lin(Tensor()); }), "undefined");
}

TEST(Conv2d, ForwardMatchesOperator) {
  Generator gen(1);
  nn::Conv2d conv(4, 6, 3, /*stride=*/2, /*padding=*/1, /*dilation=*/1, /*groups=*/2, true, &gen);
  Tensor x = randn({2, 4, 9, 9}, {}, gen);
  Tensor y = conv(x);
  Tensor ref = conv2d(x, conv.weight(), conv.bias(), {2, 2}, {1, 1}, {1, 1}, 2);
  EXPECT_EQ(y.sizes(), IntArrayRef({2, 6, 5, 5}));
  EXPECT_TRUE(equal(y, ref));
  EXPECT_EQ(conv(randn({4, 9, 9})).sizes(), IntArrayRef({6, 5, 5}));  // unbatched
  EXPECT_EQ(conv.name(),
            "Conv2d(4, 6, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], groups=2)");
}

TEST(Conv2d, OptionsConstructor) {
  nn::Conv2dOptions o(1, 16, 3);
  o.padding = 1;
  o.bias = false;
  Generator g1(8), g2(8);
  nn::Conv2d a(o, &g1), b(1, 16, 3, 1, 1, 1, 1, false, &g2);
  EXPECT_EQ(a.name(), b.name());
  EXPECT_TRUE(equal(a.weight(), b.weight()));
  EXPECT_EQ(a(zeros({2, 1, 28, 28})).sizes(), IntArrayRef({2, 16, 28, 28}));
}

TEST(Conv2d, ShapeAndDtypeErrors) {
  nn::Conv2d conv(3, 8, 5);
  const std::string ch = error_of<ValueError>([&] { conv(zeros({2, 4, 32, 32})); });
  EXPECT_CONTAINS(ch,
                  "[Conv2d(3, 8, kernel_size=[5, 5], stride=[1, 1])] input has 4 channels, "
                  "expected 3 (input shape [2, 4, 32, 32]");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    conv(zeros({3, 32}));
                  }),
                  "expected a 3-D (C, H, W) or 4-D (N, C, H, W) input but got shape [3, 32]");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    conv(zeros({1, 3, 4, 4}));
                  }),
                  "smaller than the effective kernel size 5x5");
  EXPECT_CONTAINS(error_of<TypeError>([&] {
                    conv(zeros({1, 3, 8, 8}, kFloat64));
                  }),
                  "input dtype float64 does not match the module's parameter dtype float32");
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::Conv2d(3, 8, 3, 1, 0, 1, 2); }),
                  "in_channels (3) must be divisible by groups (2)");
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::Conv2d(3, 8, 0); }), "kernel_size");
}

TEST(MaxPool2d, ForwardAndErrors) {
  nn::MaxPool2d pool(2);
  Tensor x = arange(16, kFloat32).view({1, 1, 4, 4});
  EXPECT_EQ(values(pool(x)), (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(pool.name(), "MaxPool2d(kernel_size=[2, 2], stride=[2, 2])");
  nn::MaxPool2d pool3(3, 1, 1);
  EXPECT_EQ(pool3(x).sizes(), IntArrayRef({1, 1, 4, 4}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { pool(zeros({4, 4})); }), "[MaxPool2d(");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    nn::MaxPool2d(3)(zeros({1, 2, 2}));
                  }),
                  "smaller than the effective kernel size 3x3");
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::MaxPool2d(2, 2, 2); }),
                  "at most half the kernel size");
}

TEST(Activations, ReluGeluFlatten) {
  Tensor x = f64({-1, 0, 2}, {3});
  EXPECT_EQ(values(nn::ReLU()(x)), (std::vector<double>{0, 0, 2}));
  std::vector<double> g = values(nn::GELU()(x));
  EXPECT_NEAR(g[0], -0.5 * (1 + std::erf(-1 / std::sqrt(2.0))), 1e-12);
  EXPECT_NEAR(g[2], 2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0))), 1e-12);
  std::vector<double> gt = values(nn::GELU("tanh")(x));
  const double c = std::sqrt(2 / std::numbers::pi);
  EXPECT_NEAR(gt[2], 0.5 * 2 * (1 + std::tanh(c * (2 + 0.044715 * 8))), 1e-12);
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::GELU("fast"); }), "\"fast\"");
  EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4, 5})).sizes(), IntArrayRef({2, 60}));
  EXPECT_EQ(nn::Flatten(0, 1)(zeros({2, 3, 4})).sizes(), IntArrayRef({6, 4}));
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    nn::Flatten(2)(zeros({2, 3}));
                  }),
                  "[Flatten(start_dim=2, end_dim=-1)]");
}

TEST(Dropout, TrainAndEval) {
  Generator gen(9);
  nn::Dropout drop(0.25, &gen);
  Tensor x = ones({200, 100});
  Tensor y = drop(x);
  std::vector<double> v = values(y);
  int64_t zeros_count = 0;
  for (double e : v) {
    if (e == 0.0) {
      ++zeros_count;
    } else {
      EXPECT_FLOAT_EQ(e, 1.0 / 0.75);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_count) / 20000.0, 0.25, 0.02);
  // Reproducible from the generator's state.
  Generator again(9);
  nn::Dropout drop2(0.25, &again);
  EXPECT_TRUE(equal(drop2(x), y));
  // Identity in evaluation mode: the very same tensor.
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  drop.train();
  EXPECT_FALSE(equal(drop(x), x));
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::Dropout(1.5); }), "between 0 and 1");
  // Inside a Sequential, eval() reaches the Dropout.
  nn::Sequential seq{std::make_shared<nn::Dropout>(0.9)};
  seq.eval();
  EXPECT_TRUE(equal(seq(x), x));
}

TEST(LayerNorm, ForwardAndErrors) {
  nn::LayerNorm ln({4});
  Tensor x = f64({1, 2, 3, 4, -1, 0, 1, 5}, {2, 4}).to(kFloat32);
  std::vector<double> y = values(ln(x));
  // Row 0: mean 2.5, variance 1.25.
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(y[j], (j + 1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  EXPECT_EQ(ln.parameters().size(), 2u);
  EXPECT_EQ(values(ln.weight()), std::vector<double>(4, 1.0));
  EXPECT_EQ(values(ln.bias()), std::vector<double>(4, 0.0));
  const std::string msg = error_of<ValueError>([&] { ln(zeros({8, 32})); });
  EXPECT_EQ(msg,
            "[LayerNorm([4], eps=1e-05)] expected the last 1 dimension(s) of the input to be [4] "
            "but got input shape [8, 32]");
  EXPECT_CONTAINS(error_of<TypeError>([&] { ln(zeros({2, 4}, kFloat64)); }), "input dtype float64");
  nn::LayerNorm plain({2, 4}, 1e-5, /*elementwise_affine=*/false);
  EXPECT_EQ(plain.parameters().size(), 0u);
  EXPECT_EQ(plain(zeros({3, 2, 4}, kFloat64)).dtype(), kFloat64);
}

TEST(Embedding, LookupPaddingAndErrors) {
  Generator gen(4);
  nn::Embedding emb(10, 3, /*padding_idx=*/0, &gen);
  EXPECT_EQ(values(emb.weight().select(0, 0)), std::vector<double>(3, 0.0));
  Tensor idx = from_vector<int64_t>({1, 0, 9, 1}, {2, 2});
  Tensor y = emb(idx);
  EXPECT_EQ(y.sizes(), IntArrayRef({2, 2, 3}));
  EXPECT_EQ(values(y.select(0, 0).select(0, 0)), values(emb.weight().select(0, 1)));
  EXPECT_EQ(values(y.select(0, 1).select(0, 0)), values(emb.weight().select(0, 9)));
  EXPECT_EQ(emb(idx.to(kInt32)).sizes(), IntArrayRef({2, 2, 3}));
  EXPECT_CONTAINS(error_of<TypeError>([&] { emb(zeros({2})); }),
                  "[Embedding(10, 3, padding_idx=0)] expected integer indices (int64 or int32) "
                  "but got float32");
  EXPECT_CONTAINS(error_of<IndexError>([&] {
                    emb(from_vector<int64_t>({3, 10}));
                  }),
                  "[Embedding(10, 3, padding_idx=0)] index out of range");
  EXPECT_CONTAINS(error_of<ValueError>([] { nn::Embedding(10, 3, 10); }), "padding_idx");
}

TEST(Sequential, ChainsAndIndexes) {
  Generator gen(2);
  auto l1 = std::make_shared<nn::Linear>(4, 8, true, &gen);
  auto l2 = std::make_shared<nn::Linear>(8, 2, true, &gen);
  nn::Sequential seq{l1, std::make_shared<nn::ReLU>()};
  seq.push_back("head", l2);
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[2].get(), l2.get());
  EXPECT_EQ(seq.named_parameters()[2].first, "head.weight");
  Tensor x = randn({5, 4}, {}, gen);
  EXPECT_TRUE(equal(seq(x), (*l2)(relu((*l1)(x)))));
  // A shape error deep inside names the module that raised it.
  nn::Sequential bad{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::Linear>(7, 2)};
  EXPECT_CONTAINS(error_of<ValueError>([&] { bad(x); }),
                  "[Linear(7 -> 2)] input has 8 features in its last dimension, expected 7");
}

}  // namespace
}  // namespace loom::testing
