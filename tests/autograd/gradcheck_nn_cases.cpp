// gradcheck cases for pointwise unary operators, activations and their backward kernels, softmax,
// losses, normalisation, dropout, convolution and pooling.
#include "autograd/gradcheck_cases.h"
#include "loom/dispatch.h"

namespace loom::testing {
namespace {

using V = std::vector<Tensor>;

Tensor ints(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return from_vector(v, shape);
}
// A non-leaf copy of x, so that in-place operators may write into it.
Tensor writable(const Tensor& x) {
  return mul(x, 1.0);
}
// Values in (-1, -0.2] and [0.2, 1): away from the kinks of relu, abs and sign at 0.
Tensor away_from_zero(std::vector<int64_t> shape, uint64_t seed) {
  Tensor x = rnd(shape, seed, -0.8, 0.8, false);
  return add(x, mul(sign(x), 0.2)).requires_grad_();
}

// Calls an operator the C++ API does not expose in this form (in-place pow with a tensor
// exponent, avg_pool2d with divisor_override).
Tensor pow_inplace_tensor(const Tensor& self, const Tensor& exponent) {
  static const auto op =
      Dispatcher::singleton().find_typed<Tensor(const Tensor&, const Tensor&)>("loom::pow_.Tensor");
  return op.call(self, exponent);
}
Tensor avg_pool2d_divisor(const Tensor& self, IntArrayRef kernel, int64_t divisor) {
  using Sig = Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool,
                     std::optional<int64_t>);
  static const auto op = Dispatcher::singleton().find_typed<Sig>("loom::avg_pool2d");
  const std::vector<int64_t> no_padding = {0};
  return op.call(self, kernel, IntArrayRef(), IntArrayRef(no_padding), false, true, divisor);
}

// ---- pointwise unary (all with the second derivative) ----

const RegisterGradCases kUnaryCases({
    {"neg", "", [](const V& x) { return V{neg(x[0])}; },
     [] {
       return V{rnd({2, 3}, 301)};
     },
     true},
    {"neg", "in-place, non-contiguous",
     [](const V& x) {
       Tensor y = x[0].transpose(0, 1).clone();
       return V{neg_(y)};
     },
     [] {
       return V{noncontig({3, 2}, 302)};
     },
     true},
    {"abs", "", [](const V& x) { return V{abs(x[0])}; },
     [] {
       return V{away_from_zero({2, 3}, 303)};
     },
     true},
    {"exp", "", [](const V& x) { return V{exp(x[0])}; },
     [] {
       return V{rnd({2, 3}, 304)};
     },
     true},
    {"exp", "in-place (saves its output)", [](const V& x) { return V{exp_(writable(x[0]))}; },
     [] {
       return V{noncontig({3, 2}, 305)};
     },
     true},
    {"log", "", [](const V& x) { return V{log(x[0])}; },
     [] {
       return V{rnd({2, 3}, 306, 0.5, 2.0)};
     },
     true},
    {"log", "in-place (saves a copy of its input)",
     [](const V& x) { return V{log_(writable(x[0]))}; }, [] { return V{rnd({4}, 307, 0.5, 2.0)}; },
     true},
    {"log1p", "", [](const V& x) { return V{log1p(x[0])}; },
     [] {
       return V{rnd({2, 3}, 308, -0.5, 1.0)};
     },
     true},
    {"sqrt", "", [](const V& x) { return V{sqrt(x[0])}; },
     [] {
       return V{rnd({2, 3}, 309, 0.5, 2.0)};
     },
     true},
    {"sqrt", "in-place", [](const V& x) { return V{sqrt_(writable(x[0]))}; },
     [] { return V{rnd({3}, 310, 0.5, 2.0)}; }, true},
    {"rsqrt", "", [](const V& x) { return V{rsqrt(x[0])}; },
     [] {
       return V{rnd({2, 3}, 311, 0.5, 2.0)};
     },
     true},
    {"sin", "", [](const V& x) { return V{sin(x[0])}; },
     [] {
       return V{rnd({2, 3}, 312, -2.0, 2.0)};
     },
     true},
    {"cos", "non-contiguous", [](const V& x) { return V{cos(x[0])}; },
     [] {
       return V{noncontig({3, 2}, 313, -2.0, 2.0)};
     },
     true},
    {"tanh", "", [](const V& x) { return V{tanh(x[0])}; },
     [] {
       return V{rnd({2, 3}, 314, -2.0, 2.0)};
     },
     true},
    {"tanh", "in-place through a view",
     [](const V& x) {
       Tensor y = writable(x[0]);
       tanh_(y.slice(1, 0, 2));
       return V{y};
     },
     [] {
       return V{rnd({2, 3}, 315, -2.0, 2.0)};
     },
     true},
    {"sigmoid", "non-contiguous", [](const V& x) { return V{sigmoid(x[0])}; },
     [] {
       return V{noncontig({3, 2}, 316, -3.0, 3.0)};
     },
     true},
    {"sigmoid", "in-place through a view",
     [](const V& x) {
       Tensor y = writable(x[0]);
       sigmoid_(y.select(0, 1));
       return V{y};
     },
     [] {
       return V{rnd({3, 2}, 317, -3.0, 3.0)};
     },
     true},
    {"relu", "", [](const V& x) { return V{relu(x[0])}; },
     [] {
       return V{away_from_zero({3, 4}, 318)};
     },
     true},
    {"relu", "in-place, then used again",
     [](const V& x) {
       Tensor y = relu_(writable(x[0]));
       return V{mul(y, y)};
     },
     [] { return V{away_from_zero({5}, 319)}; }, true},
    {"silu", "", [](const V& x) { return V{silu(x[0])}; },
     [] {
       return V{rnd({2, 3}, 320, -3.0, 3.0)};
     },
     true},
    {"gelu", "erf", [](const V& x) { return V{gelu(x[0])}; },
     [] {
       return V{rnd({2, 3}, 321, -3.0, 3.0)};
     },
     true},
    {"gelu", "tanh, in-place", [](const V& x) { return V{gelu_(writable(x[0]), "tanh")}; },
     [] {
       return V{rnd({2, 3}, 322, -3.0, 3.0)};
     },
     true},
    {"erf", "", [](const V& x) { return V{erf(x[0])}; },
     [] {
       return V{rnd({2, 3}, 323, -2.0, 2.0)};
     },
     true},
    {"sign", "zero gradient", [](const V& x) { return V{mul(sign(x[0]), x[0])}; },
     [] {
       return V{away_from_zero({2, 3}, 324)};
     },
     true},
    {"reciprocal", "", [](const V& x) { return V{reciprocal(x[0])}; },
     [] {
       return V{away_from_zero({2, 3}, 325)};
     },
     true},
    {"reciprocal", "in-place", [](const V& x) { return V{reciprocal_(writable(x[0]))}; },
     [] { return V{rnd({4}, 326, 0.5, 2.0)}; }, true},
    {"pow.Tensor_Scalar", "cube, non-contiguous", [](const V& x) { return V{pow(x[0], 3)}; },
     [] {
       return V{noncontig({3, 2}, 327)};
     },
     true},
    {"pow.Tensor_Scalar", "square", [](const V& x) { return V{pow(x[0], 2.0)}; },
     [] { return V{rnd({4}, 328)}; }, true},
    {"pow.Tensor_Scalar", "fractional and negative exponents",
     [](const V& x) {
       return V{pow(x[0], 0.5), pow(x[0], -1.5)};
     },
     [] {
       return V{rnd({2, 3}, 329, 0.5, 2.0)};
     },
     true},
    {"pow.Tensor_Scalar", "exponent 0 and 1",
     [](const V& x) {
       return V{pow(x[0], 0), pow(x[0], 1.0)};
     },
     [] { return V{rnd({3}, 330)}; }, true},
    {"pow.Tensor_Scalar", "in-place", [](const V& x) { return V{pow_(writable(x[0]), 2.5)}; },
     [] { return V{rnd({3}, 331, 0.5, 2.0)}; }, true},
    {"pow.Tensor_Tensor", "broadcast", [](const V& x) { return V{pow(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 332, 0.5, 2.0), rnd({3}, 333, -1.5, 1.5)};
     },
     true},
    {"pow.Tensor_Tensor", "scalar base", [](const V& x) { return V{pow(2.5, x[0])}; },
     [] {
       return V{rnd({2, 3}, 334, -1.5, 1.5)};
     },
     true},
    {"pow.Tensor_Tensor", "zero base, non-negative exponent: no exponent gradient",
     [](const V& x) { return V{pow(x[0], x[1])}; },
     [] {
       return V{from_vector<double>({0.0, 0.5, 0.0, 2.0}), rnd({4}, 335, 0.5, 2.0)};
     },
     true},
    {"pow.Tensor_Tensor", "in-place",
     [](const V& x) { return V{pow_inplace_tensor(writable(x[0]), x[1])}; },
     [] {
       return V{rnd({2, 3}, 336, 0.5, 2.0), rnd({2, 1}, 337, -1.5, 1.5)};
     },
     true},
    {"clamp", "min and max", [](const V& x) { return V{clamp(x[0], -0.5, 0.5)}; },
     [] {
       return V{rnd({3, 4}, 338)};
     },
     true},
    {"clamp", "min only, non-contiguous", [](const V& x) { return V{clamp(x[0], 0.1)}; },
     [] {
       return V{noncontig({3, 4}, 339)};
     },
     true},
    {"clamp", "max only, in-place",
     [](const V& x) { return V{clamp_(writable(x[0]), std::nullopt, 0.2)}; },
     [] { return V{rnd({6}, 340)}; }, true},
});

// ---- activation backward kernels (their derivatives serve double backward) ----

const RegisterGradCases kActivationBackwardCases({
    {"threshold_backward", "", [](const V& x) { return V{threshold_backward(x[0], x[1], 0.0)}; },
     [] {
       return V{rnd({2, 3}, 341), away_from_zero({2, 3}, 342)};
     },
     true},
    {"threshold_backward", "threshold 0.5, non-contiguous",
     [](const V& x) { return V{threshold_backward(x[0], x[1], 0.5)}; },
     [] {
       return V{noncontig({3, 2}, 343), rnd({3, 2}, 344, 0.6, 1.0)};
     },
     true},
    {"sigmoid_backward", "", [](const V& x) { return V{sigmoid_backward(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 345), rnd({2, 3}, 346, 0.1, 0.9)};
     },
     true},
    {"tanh_backward", "", [](const V& x) { return V{tanh_backward(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 347), rnd({2, 3}, 348, -0.9, 0.9)};
     },
     true},
    {"silu_backward", "", [](const V& x) { return V{silu_backward(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 349), rnd({2, 3}, 350, -3.0, 3.0)};
     },
     true},
    {"gelu_backward", "erf", [](const V& x) { return V{gelu_backward(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 351), rnd({2, 3}, 352, -3.0, 3.0)};
     },
     true},
    {"gelu_backward", "tanh", [](const V& x) { return V{gelu_backward(x[0], x[1], "tanh")}; },
     [] {
       return V{rnd({2, 3}, 353), rnd({2, 3}, 354, -3.0, 3.0)};
     },
     true},
});

// ---- softmax ----

const RegisterGradCases kSoftmaxCases({
    {"softmax", "last dim", [](const V& x) { return V{softmax(x[0], 1)}; },
     [] {
       return V{rnd({3, 4}, 355, -2.0, 2.0)};
     },
     true},
    {"softmax", "dim 0, non-contiguous", [](const V& x) { return V{softmax(x[0], 0)}; },
     [] {
       return V{noncontig({3, 4}, 356, -2.0, 2.0)};
     },
     true},
    {"softmax", "middle dim of 3", [](const V& x) { return V{softmax(x[0], -2)}; },
     [] {
       return V{rnd({2, 3, 2}, 357, -2.0, 2.0)};
     },
     true},
    {"log_softmax", "last dim", [](const V& x) { return V{log_softmax(x[0], -1)}; },
     [] {
       return V{rnd({3, 4}, 358, -2.0, 2.0)};
     },
     true},
    {"log_softmax", "dim 1 of 3, non-contiguous",
     [](const V& x) { return V{log_softmax(x[0], 1)}; },
     [] {
       return V{noncontig({3, 2, 2}, 359, -2.0, 2.0)};
     },
     true},
    {"_softmax_backward_data", "",
     [](const V& x) { return V{_softmax_backward_data(x[0], x[1], 1, DType::Float64)}; },
     [] {
       return V{rnd({3, 4}, 360), rnd({3, 4}, 361, 0.1, 1.0)};
     },
     true},
    {"_softmax_backward_data", "dim 0",
     [](const V& x) { return V{_softmax_backward_data(x[0], x[1], 0, DType::Float64)}; },
     [] {
       return V{rnd({3, 2}, 362), rnd({3, 2}, 363, 0.1, 1.0)};
     },
     true},
    {"_log_softmax_backward_data", "",
     [](const V& x) { return V{_log_softmax_backward_data(x[0], x[1], -1, DType::Float64)}; },
     [] {
       return V{rnd({3, 4}, 364), rnd({3, 4}, 365, -2.0, -0.1)};
     },
     true},
});

// ---- losses, layer norm, dropout ----

Tensor class_weight() {
  return from_vector<double>({0.5, 1.0, 2.0, 1.5});
}

const RegisterGradCases kNnCases({
    {"nll_loss", "mean",
     [](const V& x) {
       return V{nll_loss(x[0], ints({1, 0, 3}, {3}))};
     },
     [] {
       return V{rnd({3, 4}, 366)};
     },
     true},
    {"nll_loss", "weighted mean, ignore_index",
     [](const V& x) {
       return V{nll_loss(x[0], ints({1, 2, 3, 2}, {4}), class_weight(), Reduction::Mean, 2)};
     },
     [] {
       return V{rnd({4, 4}, 367)};
     },
     true},
    {"nll_loss", "none, spatial dims, non-contiguous",
     [](const V& x) {
       return V{nll_loss(x[0].transpose(1, 2), ints({0, 3, 2, 1, 1, 0}, {2, 3}), std::nullopt,
                         Reduction::None)};
     },
     [] {
       return V{rnd({2, 3, 4}, 368)};
     },
     true},
    {"nll_loss", "sum, unbatched",
     [](const V& x) { return V{nll_loss(x[0], ints({2}, {}), class_weight(), Reduction::Sum)}; },
     [] { return V{rnd({4}, 369)}; }, true},
    {"nll_loss_backward", "mean",
     [](const V& x) {
       return V{nll_loss_backward(x[0], x[1], ints({1, 0, 3}, {3}), class_weight(), Reduction::Mean,
                                  -100)};
     },
     [] {
       return V{rnd({}, 370), rnd({3, 4}, 371, -1.0, 1.0, false)};
     },
     true},
    {"nll_loss_backward", "none, ignore_index",
     [](const V& x) {
       return V{
           nll_loss_backward(x[0], x[1], ints({1, 0, 3}, {3}), std::nullopt, Reduction::None, 0)};
     },
     [] {
       return V{rnd({3}, 372), rnd({3, 4}, 373, -1.0, 1.0, false)};
     },
     true},
    {"native_layer_norm", "weight and bias; all three outputs",
     [](const V& x) {
       auto [y, mu, rs] = native_layer_norm(x[0], {4}, x[1], x[2], 1e-5);
       return V{y, mu, rs};
     },
     [] {
       return V{rnd({3, 4}, 374), rnd({4}, 375), rnd({4}, 376)};
     }},
    {"native_layer_norm", "weight and bias",
     [](const V& x) { return V{std::get<0>(native_layer_norm(x[0], {4}, x[1], x[2], 1e-5))}; },
     [] {
       return V{rnd({3, 4}, 377), rnd({4}, 378), rnd({4}, 379)};
     },
     true},
    {"native_layer_norm", "two normalized dims, no affine, non-contiguous",
     [](const V& x) {
       auto [y, mu, rs] = native_layer_norm(x[0], {3, 2}, std::nullopt, std::nullopt, 1e-5);
       return V{y, mu, rs};
     },
     [] {
       return V{noncontig({2, 3, 2}, 380)};
     },
     true},
    {"native_layer_norm", "layer_norm, weight only, 1-D",
     [](const V& x) { return V{layer_norm(x[0], {5}, x[1])}; },
     [] {
       return V{rnd({5}, 381), rnd({5}, 382)};
     },
     true},
    {"native_layer_norm_backward", "all inputs, mean and rstd taken as independent",
     [](const V& x) {
       auto [gi, gw, gb] = native_layer_norm_backward(x[0], x[1], {4}, x[2], x[3], x[4],
                                                      std::nullopt, {true, true, true});
       return V{gi, gw, gb};
     },
     [] {
       return V{rnd({3, 4}, 410), rnd({3, 4}, 411), rnd({3, 1}, 412), rnd({3, 1}, 413, 0.5, 2.0),
                rnd({4}, 414)};
     }},
    {"native_layer_norm_backward", "two normalized dims, no weight, grad_weight not computed",
     [](const V& x) {
       auto [gi, gw, gb] = native_layer_norm_backward(x[0], x[1], {2, 3}, x[2], x[3], std::nullopt,
                                                      std::nullopt, {true, false, true});
       return V{gi, gb};
     },
     [] {
       return V{rnd({2, 2, 3}, 415), noncontig({2, 2, 3}, 416), rnd({2, 1, 1}, 417),
                rnd({2, 1, 1}, 418, 0.5, 2.0)};
     }},
    {"native_layer_norm_backward", "second derivative of layer_norm through the fused kernel",
     [](const V& x) {
       auto [y, mu, rs] = native_layer_norm(x[0], {4}, x[1], std::nullopt, 1e-5);
       auto [gi, gw, gb] = native_layer_norm_backward(x[2], x[0], {4}, mu, rs, x[1], std::nullopt,
                                                      {true, true, false});
       return V{gi, gw};
     },
     [] {
       return V{rnd({3, 4}, 419), rnd({4}, 420), rnd({3, 4}, 421)};
     },
     true},
    {"native_dropout", "p 0.4, training",
     [](const V& x) { return V{std::get<0>(native_dropout(x[0], 0.4, true, Generator(7)))}; },
     [] {
       return V{rnd({4, 5}, 383)};
     },
     true},
    {"native_dropout", "dropout, eval (identity)",
     [](const V& x) { return V{dropout(x[0], 0.4, false)}; }, [] { return V{rnd({6}, 384)}; }},
    {"native_dropout_backward", "",
     [](const V& x) {
       return V{
           native_dropout_backward(x[0], gt(rand({3, 4}, DType::Float64, Generator(8)), 0.3), 2.0)};
     },
     [] {
       return V{rnd({3, 4}, 385)};
     },
     true},
});

// ---- convolution and pooling ----

const RegisterGradCases kConvPoolCases({
    {"conv2d", "bias, stride 2, padding 1",
     [](const V& x) {
       return V{conv2d(x[0], x[1], x[2], {2, 2}, {1, 1})};
     },
     [] {
       return V{rnd({2, 2, 5, 5}, 386), rnd({3, 2, 3, 3}, 387), rnd({3}, 388)};
     },
     true},
    {"conv2d", "groups 2, dilation 2, no bias, non-contiguous input",
     [](const V& x) {
       return V{conv2d(x[0], x[1], std::nullopt, {1, 1}, {1, 0}, {2, 1}, 2)};
     },
     [] {
       Tensor base = rnd({1, 4, 5, 4}, 389, -1.0, 1.0, false);
       Tensor in = base.transpose(2, 3).contiguous().transpose(2, 3).requires_grad_();
       return V{in, rnd({4, 2, 2, 3}, 390)};
     }},
    {"conv2d", "unbatched, 1x1 kernel", [](const V& x) { return V{conv2d(x[0], x[1], x[2])}; },
     [] {
       return V{rnd({3, 3, 2}, 391), rnd({2, 3, 1, 1}, 392), rnd({2}, 393)};
     },
     true},
    {"convolution_backward", "all three gradients",
     [](const V& x) {
       auto [gi, gw, gb] =
           convolution_backward(x[0], x[1], x[2], {2, 1}, {1, 0}, {1, 1}, 1, {true, true, true});
       return V{gi, gw, gb};
     },
     [] {
       return V{rnd({2, 2, 2, 2}, 394), rnd({2, 3, 4, 4}, 395), rnd({2, 3, 3, 3}, 396)};
     },
     true},
    {"convolution_backward", "input and bias only (grad_weight undefined)",
     [](const V& x) {
       auto [gi, gw, gb] =
           convolution_backward(x[0], x[1], x[2], {1, 1}, {0, 0}, {1, 1}, 2, {true, false, true});
       return V{gi, gb};
     },
     [] {
       return V{rnd({1, 2, 2, 2}, 397), rnd({1, 2, 3, 3}, 398), rnd({2, 1, 2, 2}, 399)};
     },
     true},
    {"max_pool2d_with_indices", "2x2",
     [](const V& x) {
       return V{max_pool2d(x[0], {2, 2})};
     },
     [] {
       return V{rnd({2, 2, 4, 4}, 400)};
     },
     true},
    {"max_pool2d_with_indices", "stride 1, padding 1, dilation 2, ceil_mode, unbatched",
     [](const V& x) {
       return V{std::get<0>(max_pool2d_with_indices(x[0], {3, 2}, {2, 1}, {1, 1}, {2, 1}, true))};
     },
     [] {
       return V{noncontig({2, 5, 6}, 401)};
     }},
    {"max_pool2d_with_indices_backward", "",
     [](const V& x) {
       Tensor indices;
       {
         autograd::NoGradGuard ng;
         indices = std::get<1>(
             max_pool2d_with_indices(rnd({1, 2, 4, 5}, 402, -1, 1, false), {2, 2}, {2, 2}, {1, 1}));
       }
       return V{max_pool2d_with_indices_backward(x[0], x[1], {2, 2}, {2, 2}, {1, 1}, {1, 1}, false,
                                                 indices)};
     },
     [] {
       return V{rnd({1, 2, 3, 3}, 403), rnd({1, 2, 4, 5}, 404, -1.0, 1.0, false)};
     },
     true},
    {"avg_pool2d", "3x3 stride 2, padding 1",
     [](const V& x) {
       return V{avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1})};
     },
     [] {
       return V{rnd({2, 2, 5, 5}, 405)};
     },
     true},
    {"avg_pool2d", "ceil_mode, padding not counted, unbatched",
     [](const V& x) {
       return V{avg_pool2d(x[0], {2, 3}, {2, 2}, {1, 1}, true, false)};
     },
     [] {
       return V{noncontig({2, 5, 4}, 406)};
     },
     true},
    {"avg_pool2d", "divisor_override",
     [](const V& x) {
       return V{avg_pool2d_divisor(x[0], {2, 2}, 3)};
     },
     [] {
       return V{rnd({1, 2, 4, 4}, 407)};
     },
     true},
    {"avg_pool2d_backward", "",
     [](const V& x) {
       return V{avg_pool2d_backward(x[0], x[1], {2, 2}, {2, 2}, {1, 1}, false, false, 5)};
     },
     [] {
       return V{rnd({1, 2, 3, 3}, 408), rnd({1, 2, 4, 4}, 409, -1.0, 1.0, false)};
     },
     true},
});

}  // namespace
}  // namespace loom::testing
