// Neural-network operators: layer norm, dropout, nll_loss, cross_entropy. Table entries with
// float64 references, dropout statistics and reproducibility, and error tests.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loom/parallel.h"
#include "ops/op_table.h"

namespace loom::testing {
namespace {

size_t at(int64_t i) {
  return static_cast<size_t>(i);
}

Tensor uniform(std::vector<int64_t> shape, DType dt, uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return from_vector<double>(v, shape).to(dt);
}
Tensor longs(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return from_vector<int64_t>(v, shape);
}

// ---- references ----

// (output, mean, rstd) over the last `k` dims.
std::vector<Ref> ref_layer_norm(const Ref& x, size_t k, const Ref* w, const Ref* b, double eps) {
  int64_t cols = 1;
  for (size_t d = x.shape.size() - k; d < x.shape.size(); ++d) cols *= x.shape[d];
  const int64_t rows = x.numel() / cols;
  std::vector<int64_t> stat = x.shape;
  for (size_t d = x.shape.size() - k; d < x.shape.size(); ++d) stat[d] = 1;
  Ref y = Ref::filled(x.shape, 0), mean = Ref::filled(stat, 0), rstd = Ref::filled(stat, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mu += x.v[at(r * cols + j)];
    mu /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) var += std::pow(x.v[at(r * cols + j)] - mu, 2);
    var /= static_cast<double>(cols);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < cols; ++j) {
      double v = (x.v[at(r * cols + j)] - mu) * rs;
      if (w) v *= w->v[at(j)];
      if (b) v += b->v[at(j)];
      y.v[at(r * cols + j)] = v;
    }
    mean.v[at(r)] = mu;
    rstd.v[at(r)] = rs;
  }
  return {y, mean, rstd};
}

// Per-sample view of an (N, C, d...) or (C) input: sample i, class c.
struct Classes {
  int64_t n = 1, c = 1, s = 1;
  explicit Classes(const Ref& x) {
    if (x.dim() == 1) {
      c = x.shape[0];
    } else {
      n = x.shape[0];
      c = x.shape[1];
      for (size_t d = 2; d < x.shape.size(); ++d) s *= x.shape[d];
    }
  }
  int64_t samples() const { return n * s; }
  int64_t offset(int64_t i, int64_t cls) const { return ((i / s) * c + cls) * s + i % s; }
  std::vector<int64_t> loss_shape(const Ref& x) const {
    std::vector<int64_t> shape = x.shape;
    shape.erase(shape.begin() + (x.dim() == 1 ? 0 : 1));
    return shape;
  }
};

Ref ref_log_softmax(const Ref& x) {
  Classes k(x);
  Ref out = x;
  for (int64_t i = 0; i < k.samples(); ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < k.c; ++c) mx = std::max(mx, x.v[at(k.offset(i, c))]);
    for (int64_t c = 0; c < k.c; ++c) sum += std::exp(x.v[at(k.offset(i, c))] - mx);
    for (int64_t c = 0; c < k.c; ++c)
      out.v[at(k.offset(i, c))] = x.v[at(k.offset(i, c))] - mx - std::log(sum);
  }
  return out;
}

// nll_loss with label smoothing eps (eps = 0 is plain nll_loss); reduction 0 none, 1 mean, 2 sum.
Ref ref_nll(const Ref& logp, const Ref& target, const Ref* w, int reduction, int64_t ignore,
            double eps = 0) {
  Classes k(logp);
  Ref none = Ref::filled(k.loss_shape(logp), 0);
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < k.samples(); ++i) {
    const auto t = static_cast<int64_t>(target.v[at(i)]);
    if (t == ignore) continue;
    const double wt = w ? w->v[at(t)] : 1.0;
    double smooth = 0;
    for (int64_t c = 0; c < k.c; ++c)
      smooth -= (w ? w->v[at(c)] : 1.0) * logp.v[at(k.offset(i, c))];
    const double loss =
        (1 - eps) * -wt * logp.v[at(k.offset(i, t))] + eps / static_cast<double>(k.c) * smooth;
    none.v[at(i)] = loss;
    total += loss;
    wsum += wt;
  }
  if (reduction == 0) return none;
  return Ref({}, {reduction == 2 ? total : total / wsum});
}

Ref ref_prob_ce(const Ref& logits, const Ref& probs, const Ref* w, int reduction, double eps) {
  Classes k(logits);
  Ref logp = ref_log_softmax(logits);
  Ref none = Ref::filled(k.loss_shape(logits), 0);
  double total = 0;
  for (int64_t i = 0; i < k.samples(); ++i) {
    double loss = 0;
    for (int64_t c = 0; c < k.c; ++c) {
      const double q = probs.v[at(k.offset(i, c))] * (1 - eps) + eps / static_cast<double>(k.c);
      loss -= (w ? w->v[at(c)] : 1.0) * q * logp.v[at(k.offset(i, c))];
    }
    none.v[at(i)] = loss;
    total += loss;
  }
  if (reduction == 0) return none;
  return Ref({}, {reduction == 2 ? total : total / static_cast<double>(k.samples())});
}

// ---- table ----

OpCase nn_case(const std::string& name, std::function<std::vector<Tensor>(DType)> inputs,
               std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run,
               std::function<std::vector<Ref>(const std::vector<Ref>&)> ref,
               std::vector<DType> dtypes = {kFloat32, kFloat64, kFloat16, kBFloat16}) {
  OpCase c;
  c.name = name;
  c.dtypes = std::move(dtypes);
  c.make_inputs = std::move(inputs);
  c.run = std::move(run);
  c.ref = std::move(ref);
  c.rtol = 1e-4;
  c.atol = 1e-5;
  return c;
}

// Log-probabilities (6, 4), targets with one ignored sample, class weights.
std::vector<Tensor> nll_inputs(DType dt) {
  return {uniform({6, 4}, dt, 1, -3, 0), longs({3, 0, -100, 1, 3, 2}, {6}),
          uniform({4}, dt, 2, 0.5, 2)};
}
std::vector<Tensor> ce_inputs(DType dt) {
  return {uniform({5, 4}, dt, 3), longs({1, -100, 0, 3, 3}, {5}), uniform({4}, dt, 4, 0.5, 2)};
}
// Logits and class probabilities of shape (N, C, d).
std::vector<Tensor> prob_inputs(DType dt) {
  Tensor p = uniform({3, 4, 2}, kFloat64, 6, 0.1, 1);
  std::vector<double> v = to_vector<double>(p);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t s = 0; s < 2; ++s) {
      double sum = 0;
      for (int64_t c = 0; c < 4; ++c) sum += v[at((n * 4 + c) * 2 + s)];
      for (int64_t c = 0; c < 4; ++c) v[at((n * 4 + c) * 2 + s)] /= sum;
    }
  return {uniform({3, 4, 2}, dt, 5), from_vector<double>(v, {3, 4, 2}).to(dt),
          uniform({4}, dt, 7, 0.5, 2)};
}

std::vector<Tensor> three(std::tuple<Tensor, Tensor, Tensor> t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t)};
}

const std::vector<DType> kFloatTypes = {kFloat32, kFloat64};

const RegisterOpCases kNNCases({
    nn_case(
        "native_layer_norm/affine",
        [](DType dt) {
          return std::vector<Tensor>{uniform({4, 6}, dt, 10), uniform({6}, dt, 11),
                                     uniform({6}, dt, 12)};
        },
        [](const std::vector<Tensor>& in) {
          return three(native_layer_norm(in[0], {6}, in[1], in[2], 1e-5));
        },
        [](const std::vector<Ref>& in) { return ref_layer_norm(in[0], 1, &in[1], &in[2], 1e-5); }),
    nn_case(
        "native_layer_norm/two_dims_no_affine",
        [](DType dt) {
          return std::vector<Tensor>{uniform({2, 3, 4}, dt, 13)};
        },
        [](const std::vector<Tensor>& in) {
          return three(native_layer_norm(in[0], {3, 4}, std::nullopt, std::nullopt, 1e-3));
        },
        [](const std::vector<Ref>& in) {
          return ref_layer_norm(in[0], 2, nullptr, nullptr, 1e-3);
        }),
    nn_case(
        "layer_norm/weight_only",
        [](DType dt) {
          return std::vector<Tensor>{uniform({3, 5}, dt, 14), uniform({5}, dt, 15)};
        },
        [](const std::vector<Tensor>& in) { return one(layer_norm(in[0], {5}, in[1])); },
        [](const std::vector<Ref>& in) {
          return one(ref_layer_norm(in[0], 1, &in[1], nullptr, 1e-5)[0]);
        }),
    nn_case(
        "nll_loss/mean_weighted_ignore", nll_inputs,
        [](const std::vector<Tensor>& in) { return one(nll_loss(in[0], in[1], in[2])); },
        [](const std::vector<Ref>& in) { return one(ref_nll(in[0], in[1], &in[2], 1, -100)); }),
    nn_case(
        "nll_loss/none", nll_inputs,
        [](const std::vector<Tensor>& in) {
          return one(nll_loss(in[0], in[1], in[2], Reduction::None));
        },
        [](const std::vector<Ref>& in) { return one(ref_nll(in[0], in[1], &in[2], 0, -100)); }),
    nn_case(
        "nll_loss/sum_unweighted", nll_inputs,
        [](const std::vector<Tensor>& in) {
          return one(nll_loss(in[0], in[1], std::nullopt, Reduction::Sum));
        },
        [](const std::vector<Ref>& in) { return one(ref_nll(in[0], in[1], nullptr, 2, -100)); }),
    nn_case(
        "nll_loss/ignore_index_in_range",
        [](DType dt) {
          std::vector<Tensor> in = nll_inputs(dt);
          in[1] = longs({3, 0, 3, 1, 2, 2}, {6});
          return in;
        },
        [](const std::vector<Tensor>& in) {
          return one(nll_loss(in[0], in[1], in[2], Reduction::Mean, 3));
        },
        [](const std::vector<Ref>& in) { return one(ref_nll(in[0], in[1], &in[2], 1, 3)); }),
    nn_case(
        "nll_loss/spatial",
        [](DType dt) {
          return std::vector<Tensor>{uniform({2, 3, 2, 2}, dt, 20, -3, 0),
                                     longs({0, 2, 1, 1, 2, 0, -100, 1}, {2, 2, 2})};
        },
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{nll_loss(in[0], in[1]),
                                     nll_loss(in[0], in[1], std::nullopt, Reduction::None)};
        },
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_nll(in[0], in[1], nullptr, 1, -100),
                                  ref_nll(in[0], in[1], nullptr, 0, -100)};
        }),
    nn_case(
        "nll_loss/unbatched",
        [](DType dt) {
          return std::vector<Tensor>{uniform({5}, dt, 21, -3, 0), scalar_tensor(2, kInt64)};
        },
        [](const std::vector<Tensor>& in) { return one(nll_loss(in[0], in[1])); },
        [](const std::vector<Ref>& in) { return one(ref_nll(in[0], in[1], nullptr, 1, -100)); }),
    nn_case(
        "cross_entropy/indices", ce_inputs,
        [](const std::vector<Tensor>& in) { return one(cross_entropy(in[0], in[1])); },
        [](const std::vector<Ref>& in) {
          return one(ref_nll(ref_log_softmax(in[0]), in[1], nullptr, 1, -100));
        },
        kFloatTypes),
    nn_case(
        "cross_entropy/indices_weighted_smoothing", ce_inputs,
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{cross_entropy(in[0], in[1], in[2], Reduction::Mean, -100, 0.2),
                                     cross_entropy(in[0], in[1], in[2], Reduction::None, -100, 0.2),
                                     cross_entropy(in[0], in[1], in[2], Reduction::Sum, -100, 0.2)};
        },
        [](const std::vector<Ref>& in) {
          Ref lp = ref_log_softmax(in[0]);
          return std::vector<Ref>{ref_nll(lp, in[1], &in[2], 1, -100, 0.2),
                                  ref_nll(lp, in[1], &in[2], 0, -100, 0.2),
                                  ref_nll(lp, in[1], &in[2], 2, -100, 0.2)};
        },
        kFloatTypes),
    nn_case(
        "cross_entropy/indices_smoothing_unweighted", ce_inputs,
        [](const std::vector<Tensor>& in) {
          return one(cross_entropy(in[0], in[1], std::nullopt, Reduction::Mean, -100, 0.1));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_nll(ref_log_softmax(in[0]), in[1], nullptr, 1, -100, 0.1));
        },
        kFloatTypes),
    nn_case(
        "cross_entropy/probabilities", prob_inputs,
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{cross_entropy(in[0], in[1]),
                                     cross_entropy(in[0], in[1], in[2], Reduction::None, -100, 0.3),
                                     cross_entropy(in[0], in[1], in[2], Reduction::Sum)};
        },
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_prob_ce(in[0], in[1], nullptr, 1, 0),
                                  ref_prob_ce(in[0], in[1], &in[2], 0, 0.3),
                                  ref_prob_ce(in[0], in[1], &in[2], 2, 0)};
        },
        kFloatTypes),
});

// ---- backward kernels without a forward case above: float64 formulas ----

// Row r of the result sums the rows of g whose index is r (none for padding).
Ref ref_embedding_backward(const Ref& g, const Ref& idx, int64_t num_weights, int64_t padding) {
  const int64_t dim = g.shape.back();
  Ref out = Ref::filled({num_weights, dim}, 0.0);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const auto r = static_cast<int64_t>(idx.v[at(i)]);
    if (r == padding) continue;
    for (int64_t j = 0; j < dim; ++j) out.v[at(r * dim + j)] += g.v[at(i * dim + j)];
  }
  return out;
}

// The gradient of nll_loss over (N, C) log-probabilities for grad_output g (N values for none,
// one otherwise).
Ref ref_nll_backward(const Ref& g, const Ref& logp, const Ref& target, const Ref& w,
                     int reduction) {
  const int64_t n = logp.shape[0], classes = logp.shape[1];
  Ref out = Ref::filled(logp.shape, 0.0);
  double wsum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto t = static_cast<int64_t>(target.v[at(i)]);
    if (t != -100) wsum += w.v[at(t)];
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto t = static_cast<int64_t>(target.v[at(i)]);
    if (t == -100) continue;
    const double gi = reduction == 0 ? g.v[at(i)] : (reduction == 1 ? g.v[0] / wsum : g.v[0]);
    out.v[at(i * classes + t)] = -w.v[at(t)] * gi;
  }
  return out;
}

// softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g); sums along `dim` of a 2-D shape.
Ref ref_softmax_backward(const Ref& g, const Ref& y, int64_t dim, bool log) {
  const int64_t rows = g.shape[0], cols = g.shape[1];
  Ref out = g;
  const int64_t lines = dim == 1 ? rows : cols, len = dim == 1 ? cols : rows;
  for (int64_t a = 0; a < lines; ++a) {
    auto idx = [&](int64_t k) { return at(dim == 1 ? a * cols + k : k * cols + a); };
    double s = 0;
    for (int64_t k = 0; k < len; ++k) s += log ? g.v[idx(k)] : g.v[idx(k)] * y.v[idx(k)];
    for (int64_t k = 0; k < len; ++k) {
      out.v[idx(k)] =
          log ? g.v[idx(k)] - std::exp(y.v[idx(k)]) * s : y.v[idx(k)] * (g.v[idx(k)] - s);
    }
  }
  return out;
}

const RegisterOpCases kNNBackwardCases({
    nn_case(
        "embedding_dense_backward/repeated",
        [](DType dt) {
          return std::vector<Tensor>{uniform({7, 3}, dt, 40), longs({2, 0, 2, 4, 2, 1, 0}, {7})};
        },
        [](const std::vector<Tensor>& in) {
          return one(embedding_dense_backward(in[0], in[1], 5, -1));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_embedding_backward(in[0], in[1], 5, -1));
        }),
    nn_case(
        "embedding_dense_backward/padding_2d_indices",
        [](DType dt) {
          return std::vector<Tensor>{uniform({2, 3, 4}, dt, 41), longs({2, 0, 2, 3, 2, 1}, {2, 3})};
        },
        [](const std::vector<Tensor>& in) {
          return one(embedding_dense_backward(in[0], in[1], 4, 2));
        },
        [](const std::vector<Ref>& in) { return one(ref_embedding_backward(in[0], in[1], 4, 2)); }),
    nn_case(
        "nll_loss_backward/mean_weighted_ignore",
        [](DType dt) {
          std::vector<Tensor> v = nll_inputs(dt);
          return std::vector<Tensor>{uniform({}, dt, 42), v[0], v[1], v[2]};
        },
        [](const std::vector<Tensor>& in) {
          return one(nll_loss_backward(in[0], in[1], in[2], in[3], Reduction::Mean, -100));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_nll_backward(in[0], in[1], in[2], in[3], 1));
        }),
    nn_case(
        "nll_loss_backward/none_weighted",
        [](DType dt) {
          std::vector<Tensor> v = nll_inputs(dt);
          return std::vector<Tensor>{uniform({6}, dt, 43), v[0], v[1], v[2]};
        },
        [](const std::vector<Tensor>& in) {
          return one(nll_loss_backward(in[0], in[1], in[2], in[3], Reduction::None, -100));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_nll_backward(in[0], in[1], in[2], in[3], 0));
        }),
    nn_case(
        "_softmax_backward_data/last",
        [](DType dt) {
          return std::vector<Tensor>{uniform({4, 7}, dt, 44), uniform({4, 7}, dt, 45, 0, 1)};
        },
        [](const std::vector<Tensor>& in) {
          return one(_softmax_backward_data(in[0], in[1], 1, in[0].dtype()));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_softmax_backward(in[0], in[1], 1, false));
        }),
    nn_case(
        "_log_softmax_backward_data/dim0",
        [](DType dt) {
          return std::vector<Tensor>{uniform({5, 3}, dt, 46), uniform({5, 3}, dt, 47, -3, 0)};
        },
        [](const std::vector<Tensor>& in) {
          return one(_log_softmax_backward_data(in[0], in[1], 0, in[0].dtype()));
        },
        [](const std::vector<Ref>& in) {
          return one(ref_softmax_backward(in[0], in[1], 0, true));
        }),
});

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- layer norm ----

TEST(NN, LayerNormChecksShapes) {
  std::string m = error_of<ValueError>([] { layer_norm(zeros({2, 5}), {4}); });
  EXPECT_TRUE(has(m, "[native_layer_norm]") && has(m, "[*, 4]") && has(m, "[2, 5]")) << m;
  EXPECT_THROW(layer_norm(zeros({2, 4}), {4}, zeros({3})), ValueError);
  EXPECT_THROW(layer_norm(zeros({2, 4}), {4}, std::nullopt, zeros({4, 1})), ValueError);
  EXPECT_THROW(layer_norm(zeros({2, 4}, kInt64), {4}), TypeError);
  EXPECT_THROW(layer_norm(zeros({4}), {}), ValueError);
  auto [y, mean, rstd] =
      native_layer_norm(empty({2, 3, 4}, TensorOptions(kBFloat16).with_device(kMeta)), {4},
                        std::nullopt, std::nullopt, 1e-5);
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(mean.sizes().vec(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(rstd.dtype(), kBFloat16);
}

TEST(NN, LayerNormLargeRowsParallel) {
  Tensor x =
      uniform({512, 300}, kFloat32, 30, -50, 80);  // a large offset tests the two-pass variance
  Tensor w = uniform({300}, kFloat32, 31);
  auto [y, mean, rstd] = native_layer_norm(x, {300}, w, std::nullopt, 1e-5);
  Ref rw = Ref::of(w);
  auto want = ref_layer_norm(Ref::of(x), 1, &rw, nullptr, 1e-5);
  std::vector<double> got = to_vector<double>(y);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[0].v[i], 1e-4) << i;
  EXPECT_EQ(mean.sizes().vec(), (std::vector<int64_t>{512, 1}));
  // Rows of a non-contiguous input.
  Tensor xt = x.t().contiguous().t();
  EXPECT_TRUE(allclose(layer_norm(xt, {300}, w), y, 1e-5, 1e-5));
}

// ---- dropout ----

TEST(NN, DropoutKeepsAboutOneMinusPAndScales) {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.8}) {
    Generator g(1234);
    Tensor x = uniform({n}, kFloat32, 40, 0.5, 1.5);
    auto [out, mask] = native_dropout(x, p, true, g);
    ASSERT_EQ(mask.dtype(), kBool);
    std::vector<bool> m = to_vector<bool>(mask);
    std::vector<float> o = to_vector<float>(out), xv = to_vector<float>(x);
    int64_t kept = 0;
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; ++i) {
      if (m[at(i)]) {
        ++kept;
        ASSERT_FLOAT_EQ(o[at(i)], xv[at(i)] * scale) << i;
      } else {
        ASSERT_EQ(o[at(i)], 0.0f) << i;
      }
    }
    const double frac = static_cast<double>(kept) / n, sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(frac, 1 - p, 4 * sigma) << "p=" << p;
  }
}

TEST(NN, DropoutIsReproducibleAndSeedDependent) {
  Tensor x = ones({10001});
  Generator a(7), b(7), c(8);
  auto ma = std::get<1>(native_dropout(x, 0.5, true, a));
  auto mb = std::get<1>(native_dropout(x, 0.5, true, b));
  auto mc = std::get<1>(native_dropout(x, 0.5, true, c));
  EXPECT_TRUE(equal(ma, mb));
  EXPECT_FALSE(equal(ma, mc));
  // Each call advances the generator by ceil(n / 4) Philox blocks, so the next mask differs.
  EXPECT_EQ(a.state().offset, (10001u + 3) / 4);
  EXPECT_FALSE(equal(std::get<1>(native_dropout(x, 0.5, true, a)), ma));
  // The mask does not depend on the number of threads.
  const int threads = get_num_threads();
  set_num_threads(1);
  Generator d(7);
  Tensor serial = std::get<1>(native_dropout(x, 0.5, true, d));
  set_num_threads(threads);
  EXPECT_TRUE(equal(serial, ma));
  // Without a generator the default one is used (and manual_seed makes it reproducible).
  manual_seed(99);
  Tensor d1 = dropout(x, 0.3, true);
  manual_seed(99);
  EXPECT_TRUE(equal(dropout(x, 0.3, true), d1));
}

TEST(NN, DropoutEdgeCases) {
  Tensor x = uniform({3, 5}, kFloat64, 50);
  auto [o0, m0] = native_dropout(x, 0.0, true);
  EXPECT_TRUE(equal(o0, x));
  EXPECT_TRUE(equal(m0, ones({3, 5}, kBool)));
  auto [oe, me] = native_dropout(x, 0.5, false);
  EXPECT_TRUE(equal(oe, x));
  EXPECT_TRUE(equal(me, ones({3, 5}, kBool)));
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  auto [o1, m1] = native_dropout(x, 1.0, true);
  EXPECT_TRUE(equal(o1, zeros({3, 5}, kFloat64)));
  EXPECT_TRUE(equal(m1, zeros({3, 5}, kBool)));
  EXPECT_TRUE(equal(dropout(x, 1.0, true), zeros({3, 5}, kFloat64)));
  for (double p : {-0.1, 1.5, std::nan("")}) {
    std::string m = error_of<ValueError>([&] { native_dropout(x, p, true); });
    EXPECT_TRUE(has(m, "[native_dropout]")) << m;
    EXPECT_THROW(dropout(x, p, false), ValueError);
  }
  EXPECT_THROW(native_dropout(zeros({2}, kInt64), 0.5, true), TypeError);
  auto [om, mm] =
      native_dropout(empty({4, 2}, TensorOptions(kFloat16).with_device(kMeta)), 0.5, true);
  EXPECT_TRUE(om.is_meta() && mm.is_meta());
  EXPECT_EQ(mm.dtype(), kBool);
  EXPECT_EQ(om.sizes().vec(), (std::vector<int64_t>{4, 2}));
  // 16-bit inputs scale in float.
  Generator g(3);
  auto [oh, mh] = native_dropout(ones({1000}, kBFloat16), 0.2, true, g);
  std::vector<float> ov = to_vector<float>(oh);
  std::vector<bool> mv = to_vector<bool>(mh);
  for (size_t i = 0; i < ov.size(); ++i)
    ASSERT_EQ(ov[i], mv[i] ? static_cast<float>(BFloat16(1.25f)) : 0.0f);
}

// ---- losses ----

TEST(NN, NllLossTargetOutOfRangeIsIndexError) {
  Tensor logp = uniform({3, 4}, kFloat32, 60, -3, 0);
  std::string m = error_of<IndexError>([&] { nll_loss(logp, longs({0, 7, 1}, {3})); });
  EXPECT_TRUE(has(m, "[nll_loss]") && has(m, "target 7") && has(m, "4 classes")) << m;
  EXPECT_THROW(nll_loss(logp, longs({0, -1, 1}, {3})), IndexError);
  // A target equal to ignore_index is skipped even when it is not a valid class.
  EXPECT_NO_THROW(nll_loss(logp, longs({0, 9, 1}, {3}), std::nullopt, Reduction::Mean, 9));
}

TEST(NN, NllLossArgumentChecks) {
  Tensor logp = uniform({3, 4}, kFloat32, 61, -3, 0);
  EXPECT_THROW(nll_loss(logp, from_vector<float>({0, 1, 2})), TypeError);
  EXPECT_THROW(nll_loss(logp, longs({0, 1}, {2})), ValueError);
  EXPECT_THROW(nll_loss(logp, longs({0, 1, 2}, {3}), zeros({3})), ValueError);
  EXPECT_THROW(nll_loss(logp, longs({0, 1, 2}, {3}), std::nullopt, static_cast<Reduction>(3)),
               ValueError);
  EXPECT_THROW(nll_loss(longs({0, 1, 2}, {3}), longs({0}, {})), TypeError);
  // Every target ignored: the weighted mean is 0/0 = NaN (as PyTorch), the sum is 0.
  Tensor ignored = longs({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(nll_loss(logp, ignored).item<double>()));
  EXPECT_EQ(nll_loss(logp, ignored, std::nullopt, Reduction::Sum).item<double>(), 0.0);
  EXPECT_TRUE(std::isnan(nll_loss(empty({0, 4}), empty({0}, kInt64)).item<double>()));
  Tensor meta =
      nll_loss(empty({3, 4}, TensorOptions(kFloat32).with_device(kMeta)),
               empty({3}, TensorOptions(kInt64).with_device(kMeta)), std::nullopt, Reduction::None);
  EXPECT_TRUE(meta.is_meta());
  EXPECT_EQ(meta.sizes().vec(), (std::vector<int64_t>{3}));
}

TEST(NN, CrossEntropyArgumentChecks) {
  Tensor logits = uniform({3, 4}, kFloat32, 70);
  Tensor target = longs({0, 1, 2}, {3});
  EXPECT_THROW(cross_entropy(logits, target, std::nullopt, Reduction::Mean, -100, 1.5), ValueError);
  EXPECT_THROW(cross_entropy(logits, target, zeros({5})), ValueError);
  EXPECT_THROW(cross_entropy(logits, zeros({3, 4}, kInt64)),
               TypeError);  // probabilities must be floats
  EXPECT_THROW(cross_entropy(logits, longs({0, 9, 1}, {3})), IndexError);
}

}  // namespace
}  // namespace loom::testing
