// Backward kernels (threshold/sigmoid/tanh/silu/gelu_backward, softmax and log_softmax backward,
// nll_loss_backward, pooling, convolution, layer norm, embedding and dropout backward). Each case
// checks every gradient against the finite-difference vector-Jacobian product of the FORWARD op in
// float64, then the same call with a non-contiguous grad_output, float32 and 16-bit floats against
// float64, and the Meta kernel's shapes and dtypes against the CPU result.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loom/dispatch.h"
#include "ops/op_table.h"

namespace loom::testing {
namespace {

constexpr double kEps = 1e-6;

Tensor uniform(std::vector<int64_t> shape, uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(multiply_sizes(shape)));
  for (auto& x : v) x = dist(rng);
  return from_vector<double>(v, shape);
}
Tensor longs(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return from_vector<int64_t>(v, shape);
}

// t as a backward call needs it next to x: x's dtype if t is floating, on x's device.
Tensor like(const Tensor& t, const Tensor& x) {
  const DType dt = is_floating(t.dtype()) ? x.dtype() : t.dtype();
  if (x.is_meta()) return empty(t.sizes(), TensorOptions(dt).with_device(kMeta));
  return t.to(dt);
}

using Tensors = std::vector<Tensor>;

struct Case {
  std::string name;
  Tensors inputs;  // float64; the forward is differentiated with respect to each
  std::function<Tensor(const Tensors&)> forward;
  // The gradients of the inputs (undefined: not checked) for grad_output v.
  std::function<Tensors(const Tensor& v, const Tensors&)> backward;
  bool half = true;  // also compare float16 and bfloat16 with float64
};

// sum(v * (f(x + eps e_i) - f(x - eps e_i))) / (2 eps) for every element i of inputs[k].
std::vector<double> fd_vjp(const Case& c, size_t k, const Tensor& v) {
  const std::vector<double> vv = to_vector<double>(v), x = to_vector<double>(c.inputs[k]);
  std::vector<double> out(x.size());
  Tensors in = c.inputs;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = 0;
    for (double sign : {1.0, -1.0}) {
      std::vector<double> xp = x;
      xp[i] += sign * kEps;
      in[k] = from_vector<double>(xp, c.inputs[k].sizes());
      const std::vector<double> y = to_vector<double>(c.forward(in));
      for (size_t j = 0; j < y.size(); ++j) d += sign * vv[j] * y[j];
    }
    out[i] = d / (2 * kEps);
  }
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  const std::vector<double> g = to_vector<double>(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], want[i], tol) << what << " element " << i;
  }
}

Tensors cast_all(const Tensors& ts, DType dt) {
  Tensors out;
  for (const Tensor& t : ts) out.push_back(t.to(dt));
  return out;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const Tensor y = c.forward(c.inputs);
  const Tensor v = uniform(y.sizes().vec(), 99, -1, 1);
  const Tensors grads = c.backward(v, c.inputs);
  ASSERT_EQ(grads.size(), c.inputs.size());
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) continue;
    const std::string what = c.name + " grad " + std::to_string(k);
    EXPECT_EQ(grads[k].sizes().vec(), c.inputs[k].sizes().vec()) << what;
    const std::vector<double> fd = fd_vjp(c, k, v);
    expect_near(grads[k], fd, 1e-6 * std::max(1.0, max_abs(fd)), what + " vs finite differences");
  }
  // A strided grad_output gives the same result.
  const Tensors strided = c.backward(noncontiguous_copy(v), c.inputs);
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) continue;
    const std::vector<double> want = to_vector<double>(grads[k]);
    expect_near(strided[k], want, 1e-12,
                c.name + " non-contiguous grad_output " + std::to_string(k));
  }
  // Lower precisions against float64.
  std::vector<std::pair<DType, double>> low = {{kFloat32, 1e-4}};
  if (c.half) low.insert(low.end(), {{kFloat16, 2e-2}, {kBFloat16, 4e-2}});
  for (auto [dt, rtol] : low) {
    const Tensors lg = c.backward(v.to(dt), cast_all(c.inputs, dt));
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;
      EXPECT_EQ(lg[k].dtype(), dt);
      const std::vector<double> want = to_vector<double>(grads[k]);
      expect_near(lg[k], want, rtol * std::max(1.0, max_abs(want)),
                  c.name + " " + dtype_name(dt) + " grad " + std::to_string(k));
    }
  }
  // Meta: the CPU result's shapes and dtypes.
  Tensors meta_in;
  const Tensor meta = empty({}, TensorOptions(kFloat64).with_device(kMeta));
  for (const Tensor& t : c.inputs) meta_in.push_back(like(t, meta));
  const Tensors mg = c.backward(like(v, meta_in[0]), meta_in);
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) continue;
    EXPECT_TRUE(mg[k].is_meta()) << c.name << " meta " << k;
    EXPECT_EQ(mg[k].sizes().vec(), grads[k].sizes().vec()) << c.name << " meta " << k;
    EXPECT_EQ(mg[k].dtype(), grads[k].dtype()) << c.name << " meta " << k;
  }
}

Case activation(const std::string& name, std::function<Tensor(const Tensor&)> f,
                std::function<Tensor(const Tensor& v, const Tensor& x)> b) {
  return {name,
          {uniform({3, 7}, 1, -3, 3)},
          [f](const Tensors& in) { return f(in[0]); },
          [b](const Tensor& v, const Tensors& in) { return Tensors{b(v, in[0])}; }};
}

TEST(Backward, Activations) {
  run_case(activation(
      "threshold_backward/relu_input", [](const Tensor& x) { return relu(x); },
      [](const Tensor& v, const Tensor& x) { return threshold_backward(v, x, 0); }));
  run_case(activation(
      "threshold_backward/relu_output", [](const Tensor& x) { return relu(x); },
      [](const Tensor& v, const Tensor& x) { return threshold_backward(v, relu(x), 0); }));
  run_case(activation(
      "threshold_backward/threshold_0.5",
      [](const Tensor& x) { return where(gt(x, 0.5), x, zeros_like(x)); },
      [](const Tensor& v, const Tensor& x) { return threshold_backward(v, x, 0.5); }));
  run_case(activation(
      "sigmoid_backward", [](const Tensor& x) { return sigmoid(x); },
      [](const Tensor& v, const Tensor& x) { return sigmoid_backward(v, sigmoid(x)); }));
  run_case(activation(
      "tanh_backward", [](const Tensor& x) { return tanh(x); },
      [](const Tensor& v, const Tensor& x) { return tanh_backward(v, tanh(x)); }));
  run_case(activation(
      "silu_backward", [](const Tensor& x) { return silu(x); },
      [](const Tensor& v, const Tensor& x) { return silu_backward(v, x); }));
  for (const char* a : {"none", "tanh"}) {
    run_case(activation(
        std::string("gelu_backward/") + a, [a](const Tensor& x) { return gelu(x, a); },
        [a](const Tensor& v, const Tensor& x) { return gelu_backward(v, x, a); }));
  }
}

TEST(Backward, ActivationsLargeAndStrided) {
  // Past one parallel grain, and a strided input (the TensorIterator path).
  const Tensor x = uniform({300, 257}, 2, -4, 4), v = uniform({300, 257}, 3);
  const std::vector<double> xs = to_vector<double>(x), vs = to_vector<double>(v);
  std::vector<double> want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xs[i]));
    want[i] = vs[i] * s * (1 + xs[i] * (1 - s));
  }
  expect_near(silu_backward(v.to(kFloat32), x.to(kFloat32)), want, 1e-5, "silu float32");
  expect_near(silu_backward(v.t().contiguous().t(), x), want, 1e-12, "silu strided");
  for (size_t i = 0; i < xs.size(); ++i)
    want[i] = vs[i] * 0.5 * (1 + std::erf(xs[i] / std::sqrt(2.0))) +
              vs[i] * xs[i] * std::exp(-xs[i] * xs[i] / 2) / std::sqrt(2 * M_PI);
  expect_near(gelu_backward(v.to(kFloat32), x.to(kFloat32)), want, 1e-5, "gelu float32");
}

TEST(Backward, Softmax) {
  for (bool log : {false, true}) {
    for (int64_t dim : {2, 1, 0, -1}) {
      auto f = [log, dim](const Tensor& x) { return log ? log_softmax(x, dim) : softmax(x, dim); };
      run_case({std::string(log ? "log_softmax" : "softmax") + "/dim" + std::to_string(dim),
                {uniform({3, 4, 5}, 4)},
                [f](const Tensors& in) { return f(in[0]); },
                [f, log, dim](const Tensor& v, const Tensors& in) {
                  const Tensor y = f(in[0]);
                  return Tensors{log ? _log_softmax_backward_data(v, y, dim, in[0].dtype())
                                     : _softmax_backward_data(v, y, dim, in[0].dtype())};
                }});
    }
  }
  // A float32 output of a float16 input: the gradient is cast back to float16.
  const Tensor y = softmax(uniform({2, 3}, 5).to(kFloat32), 1);
  EXPECT_EQ(_softmax_backward_data(ones({2, 3}), y, 1, kFloat16).dtype(), kFloat16);
}

TEST(Backward, NllLoss) {
  const Tensor w = uniform({4}, 6, 0.5, 2);
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    Tensor target;
    bool weighted;
    Reduction reduction;
    int64_t ignore;
  };
  const std::vector<Spec> specs = {
      {"mean_weighted_ignore",
       {6, 4},
       longs({3, 0, -100, 1, 3, 2}, {6}),
       true,
       Reduction::Mean,
       -100},
      {"sum_ignore_in_range", {6, 4}, longs({3, 0, 3, 1, 2, 2}, {6}), false, Reduction::Sum, 3},
      {"none_weighted", {6, 4}, longs({3, 0, 0, 1, 3, 2}, {6}), true, Reduction::None, -100},
      {"unbatched_mean", {4}, scalar_tensor(2, kInt64), true, Reduction::Mean, -100},
      {"spatial_mean",
       {2, 4, 2, 2},
       longs({0, 2, 1, 1, 3, 0, -100, 1}, {2, 2, 2}),
       false,
       Reduction::Mean,
       -100},
      {"spatial_none",
       {2, 4, 3},
       longs({0, 2, 1, 3, -100, 1}, {2, 3}),
       true,
       Reduction::None,
       -100},
  };
  for (const Spec& s : specs) {
    auto weight = [&s, w](const Tensor& x) {
      return s.weighted ? std::optional<Tensor>(like(w, x)) : std::nullopt;
    };
    run_case({"nll_loss/" + s.name,
              {uniform(s.shape, 7, -3, 0)},
              [s, weight](const Tensors& in) {
                return nll_loss(in[0], s.target, weight(in[0]), s.reduction, s.ignore);
              },
              [s, weight](const Tensor& v, const Tensors& in) {
                return Tensors{nll_loss_backward(v, in[0], like(s.target, in[0]), weight(in[0]),
                                                 s.reduction, s.ignore)};
              }});
  }
}

TEST(Backward, Pooling) {
  struct MaxSpec {
    std::vector<int64_t> shape, k, s, p, d;
    bool ceil;
  };
  for (const MaxSpec& m : std::vector<MaxSpec>{{{2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
                                               {{2, 6, 7}, {2, 3}, {1, 2}, {1, 0}, {2, 1}, false},
                                               {{1, 2, 5, 5}, {2, 2}, {}, {0, 0}, {1, 1}, false}}) {
    auto f = [m](const Tensor& x) {
      return max_pool2d_with_indices(x, m.k, m.s, m.p, m.d, m.ceil);
    };
    run_case({"max_pool2d_with_indices/" + std::to_string(m.shape.size()) + "d",
              {uniform(m.shape, 8)},
              [f](const Tensors& in) { return std::get<0>(f(in[0])); },
              [f, m](const Tensor& v, const Tensors& in) {
                return Tensors{max_pool2d_with_indices_backward(v, in[0], m.k, m.s, m.p, m.d,
                                                                m.ceil, std::get<1>(f(in[0])))};
              },
              /*half=*/false});  // 16-bit rounding creates ties that move the argmax
  }
  static const auto avg =
      Dispatcher::singleton()
          .find_typed<Tensor(const Tensor&, IntArrayRef, IntArrayRef, IntArrayRef, bool, bool,
                             std::optional<int64_t>)>("loom::avg_pool2d");
  struct AvgSpec {
    std::vector<int64_t> shape, k, s, p;
    bool ceil, include_pad;
    std::optional<int64_t> divisor;
  };
  for (const AvgSpec& a :
       std::vector<AvgSpec>{{{2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1}, true, true, std::nullopt},
                            {{2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, true, false, std::nullopt},
                            {{3, 5, 5}, {2, 2}, {}, {0, 0}, false, true, 3}}) {
    run_case({"avg_pool2d",
              {uniform(a.shape, 9)},
              [a](const Tensors& in) {
                return avg.call(in[0], a.k, a.s, a.p, a.ceil, a.include_pad, a.divisor);
              },
              [a](const Tensor& v, const Tensors& in) {
                return Tensors{
                    avg_pool2d_backward(v, in[0], a.k, a.s, a.p, a.ceil, a.include_pad, a.divisor)};
              }});
  }
}

Case conv_case(const std::string& name, std::vector<int64_t> x, std::vector<int64_t> w,
               std::vector<int64_t> stride, std::vector<int64_t> pad, std::vector<int64_t> dil,
               int64_t groups, std::array<bool, 3> mask = {true, true, true}) {
  return {"convolution_backward/" + name,
          {uniform(x, 10), uniform(w, 11, -1, 1), uniform({w[0]}, 12)},
          [=](const Tensors& in) { return conv2d(in[0], in[1], in[2], stride, pad, dil, groups); },
          [=](const Tensor& v, const Tensors& in) {
            auto [gi, gw, gb] =
                convolution_backward(v, in[0], in[1], stride, pad, dil, groups, mask);
            return Tensors{gi, gw, gb};
          }};
}

TEST(Backward, Convolution) {
  run_case(conv_case("groups_stride_pad", {2, 4, 6, 5}, {6, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2));
  run_case(conv_case("unbatched_dilated", {3, 7, 7}, {2, 3, 2, 3}, {1, 1}, {2, 1}, {2, 2}, 1));
  run_case(conv_case("one_image", {1, 2, 5, 5}, {3, 2, 3, 3}, {1, 2}, {0, 1}, {1, 1}, 1));
  run_case(conv_case("1x1_unbatched", {4, 3, 5}, {3, 4, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1));
  run_case(conv_case("1x1_batched", {3, 4, 3, 5}, {6, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2));
  // Masks: the unrequested entries are undefined.
  const Tensor x = uniform({1, 2, 4, 4}, 13), w = uniform({3, 2, 3, 3}, 14);
  const Tensor v = uniform({1, 3, 2, 2}, 15);
  auto [gi, gw, gb] =
      convolution_backward(v, x, w, {1, 1}, {0, 0}, {1, 1}, 1, {false, true, false});
  EXPECT_TRUE(!gi.defined() && gw.defined() && !gb.defined());
}

// Enough images that one gemm batch does not hold them all (Note [conv2d backward]): the result
// must equal the sum over single-image calls.
TEST(Backward, ConvolutionManyImageBatches) {
  const Tensor x = uniform({9, 16, 64, 64}, 16), w = uniform({16, 16, 3, 3}, 17, -1, 1);
  const Tensor v = uniform({9, 16, 64, 64}, 18);
  auto [gi, gw, gb] = convolution_backward(v, x, w, {1, 1}, {1, 1}, {1, 1}, 1, {true, true, true});
  Tensor gw_sum = zeros({16, 16, 3, 3}, kFloat64), gb_sum = zeros({16}, kFloat64);
  for (int64_t n = 0; n < 9; ++n) {
    auto [a, b, c] =
        convolution_backward(v[n], x[n], w, {1, 1}, {1, 1}, {1, 1}, 1, {true, true, true});
    EXPECT_TRUE(allclose(a, gi[n], 1e-12, 1e-12)) << n;
    gw_sum = add(gw_sum, b);
    gb_sum = add(gb_sum, c);
  }
  EXPECT_TRUE(allclose(gw, gw_sum, 1e-10, 1e-9));
  EXPECT_TRUE(allclose(gb, gb_sum, 1e-10, 1e-9));
}

Case layer_norm_case(const std::string& name, std::vector<int64_t> shape,
                     std::vector<int64_t> normalized, bool affine) {
  Tensors in = {uniform(shape, 20)};
  if (affine) in.insert(in.end(), {uniform(normalized, 21), uniform(normalized, 22)});
  auto params = [affine](const Tensors& t, size_t i) {
    return affine ? std::optional<Tensor>(t[i]) : std::nullopt;
  };
  return {
      "native_layer_norm_backward/" + name, in,
      [=](const Tensors& t) {
        return std::get<0>(native_layer_norm(t[0], normalized, params(t, 1), params(t, 2), 1e-5));
      },
      [=](const Tensor& v, const Tensors& t) {
        auto [y, mean, rstd] =
            native_layer_norm(t[0], normalized, params(t, 1), params(t, 2), 1e-5);
        auto [gi, gw, gb] = native_layer_norm_backward(
            v, t[0], normalized, mean, rstd, params(t, 1), params(t, 2), {true, affine, affine});
        return affine ? Tensors{gi, gw, gb} : Tensors{gi};
      }};
}

TEST(Backward, LayerNorm) {
  run_case(layer_norm_case("affine", {4, 6}, {6}, true));
  run_case(layer_norm_case("two_dims_no_affine", {2, 3, 4}, {3, 4}, false));
  run_case(layer_norm_case("many_row_blocks", {130, 3}, {3}, true));
  // Without weight and bias, grad_weight and grad_bias are those of an all-ones weight and zero
  // bias.
  const Tensor x = uniform({5, 4}, 23), v = uniform({5, 4}, 24);
  auto [y, mean, rstd] = native_layer_norm(x, {4}, std::nullopt, std::nullopt, 1e-5);
  auto [gi, gw, gb] = native_layer_norm_backward(v, x, {4}, mean, rstd, std::nullopt, std::nullopt,
                                                 {false, true, true});
  auto [gi1, gw1, gb1] = native_layer_norm_backward(v, x, {4}, mean, rstd, ones({4}, kFloat64),
                                                    zeros({4}, kFloat64), {true, true, true});
  EXPECT_FALSE(gi.defined());
  EXPECT_TRUE(allclose(gw, gw1, 1e-12, 1e-12) && allclose(gb, gb1, 1e-12, 1e-12));
}

TEST(Backward, Embedding) {
  const Tensor idx = longs({3, 0, 3, 4, 1, 3}, {2, 3});
  for (int64_t padding : {-1, 3}) {
    const Case c = {"embedding_dense_backward/padding" + std::to_string(padding),
                    {uniform({5, 4}, 30)},
                    [idx](const Tensors& in) { return embedding(in[0], idx); },
                    [idx, padding](const Tensor& v, const Tensors& in) {
                      return Tensors{embedding_dense_backward(v, like(idx, in[0]), 5, padding)};
                    }};
    if (padding < 0) {
      run_case(c);
      continue;
    }
    // The padding row gets no gradient (the forward does use it, so finite differences differ).
    const Tensor v = uniform({2, 3, 4}, 31);
    const std::vector<double> g = to_vector<double>(c.backward(v, c.inputs)[0]);
    std::vector<double> fd = fd_vjp(c, 0, v);
    for (size_t j = 0; j < 4; ++j) fd[3 * 4 + j] = 0;
    expect_near(c.backward(v, c.inputs)[0], fd, 1e-6, "embedding padding");
  }
  // int32 indices.
  const Tensor v = uniform({2, 3, 4}, 32);
  EXPECT_TRUE(equal(embedding_dense_backward(v, idx.to(kInt32), 5, -1),
                    embedding_dense_backward(v, idx, 5, -1)));
}

TEST(Backward, Dropout) {
  run_case({"native_dropout_backward",
            {uniform({4, 5}, 40)},
            [](const Tensors& in) {
              return std::get<0>(native_dropout(in[0], 0.4, true, Generator(5)));
            },
            [](const Tensor& v, const Tensors& in) {
              Tensor mask = std::get<1>(native_dropout(in[0], 0.4, true, Generator(5)));
              return Tensors{native_dropout_backward(v, mask, 1.0 / 0.6)};
            }});
}

TEST(Backward, SchemasAreRegistered) {
  for (const char* name :
       {"threshold_backward", "sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward",
        "_softmax_backward_data", "_log_softmax_backward_data", "nll_loss_backward",
        "max_pool2d_with_indices_backward", "avg_pool2d_backward", "convolution_backward",
        "native_layer_norm_backward", "embedding_dense_backward", "native_dropout_backward"}) {
    auto op = Dispatcher::singleton().find(std::string("loom::") + name);
    ASSERT_TRUE(op.has_value()) << name;
    EXPECT_TRUE(op->has_kernel(DispatchKey::CPU) && op->has_kernel(DispatchKey::Meta)) << name;
  }
}

// Bad grad_output shapes are ValueErrors and wrong dtypes TypeErrors, named by the op.
TEST(Backward, Errors) {
  const Tensor x = uniform({2, 3, 4, 4}, 50), g = uniform({2, 3, 4, 4}, 51);
  const Tensor bad = uniform({2, 3, 4, 5}, 52), ints = g.to(kInt64);
  auto [pooled, ind] = max_pool2d_with_indices(x, {2, 2});
  auto [y, mean, rstd] = native_layer_norm(x, {4}, std::nullopt, std::nullopt, 1e-5);
  const Tensor w = uniform({3, 3, 1, 1}, 53), mask = ones({2, 3, 4, 4}, kBool);
  const Tensor logp = uniform({3, 4}, 54), target = longs({0, 1, 2}, {3});
  const std::vector<std::pair<std::string, std::function<void(const Tensor&)>>> calls = {
      {"threshold_backward", [&](const Tensor& go) { threshold_backward(go, x, 0); }},
      {"sigmoid_backward", [&](const Tensor& go) { sigmoid_backward(go, x); }},
      {"gelu_backward", [&](const Tensor& go) { gelu_backward(go, x, "tanh"); }},
      {"_softmax_backward_data",
       [&](const Tensor& go) { _softmax_backward_data(go, x, 1, kFloat64); }},
      {"max_pool2d_with_indices_backward",
       [&](const Tensor& go) {
         max_pool2d_with_indices_backward(go, x, {1, 1}, {}, {0, 0}, {1, 1}, false, ind);
       }},
      {"avg_pool2d_backward",
       [&](const Tensor& go) {
         avg_pool2d_backward(go, x, {1, 1}, {}, {0, 0}, false, true);
       }},
      {"convolution_backward",
       [&](const Tensor& go) {
         convolution_backward(go, x, w, {1, 1}, {0, 0}, {1, 1}, 1, {true, true, true});
       }},
      {"native_layer_norm_backward",
       [&](const Tensor& go) {
         native_layer_norm_backward(go, x, {4}, mean, rstd, std::nullopt, std::nullopt,
                                    {true, true, true});
       }},
      {"native_dropout_backward", [&](const Tensor& go) { native_dropout_backward(go, mask, 2); }},
  };
  for (const auto& [op, call] : calls) {
    const std::string prefix = "[" + op + "]";
    const std::string shape_error = error_of<ValueError>([&] { call(bad); });
    EXPECT_EQ(shape_error.rfind(prefix, 0), 0u) << op << ": " << shape_error;
    const std::string type_error = error_of<TypeError>([&] { call(ints); });
    EXPECT_EQ(type_error.rfind(prefix, 0), 0u) << op << ": " << type_error;
  }
  EXPECT_THROW(gelu_backward(g, x, "fast"), ValueError);
  EXPECT_THROW(native_dropout_backward(g, g, 2), TypeError);
  EXPECT_THROW(
      nll_loss_backward(zeros({3}, kFloat64), logp, target, std::nullopt, Reduction::Mean, -100),
      ValueError);
  EXPECT_THROW(nll_loss_backward(scalar_tensor(1.0, kFloat64), logp, longs({0, 9, 1}, {3}),
                                 std::nullopt, Reduction::Sum, -100),
               IndexError);
  EXPECT_THROW(embedding_dense_backward(uniform({3, 2}, 55), longs({0, 5, 1}, {3}), 5, -1),
               IndexError);
  EXPECT_THROW(embedding_dense_backward(uniform({2, 2}, 56), longs({0, 1, 1}, {3}), 5, -1),
               ValueError);
  const Tensor bad_ind = full(pooled.sizes(), 99, kInt64);
  EXPECT_THROW(max_pool2d_with_indices_backward(ones_like(pooled), x, {2, 2}, {}, {0, 0}, {1, 1},
                                                false, bad_ind),
               IndexError);
}

}  // namespace
}  // namespace loom::testing
