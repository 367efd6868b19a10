// Optimizers against the update formulas written out in float64 (independently of loom's code), on
// both the fused path (contiguous float32/float64) and the operator path (strided parameters);
// state dicts (bit-exact resume, errors); gradient clipping against hand-computed norms.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "loom/autograd.h"
#include "loom/io.h"
#include "loom/optim.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

// The gradient of element i at step k (k from 1): fixed, varied numbers of both signs.
double grad_value(int k, size_t i) {
  return std::sin(1.0 + 0.7 * static_cast<double>(i) + 2.3 * k) *
         (1.0 + 0.1 * static_cast<double>(i));
}
std::vector<double> initial_values(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = 0.5 - 0.3 * static_cast<double>(i) + 0.05 * static_cast<double>(i * i);
  return v;
}

// A (2, 3) parameter holding initial_values(6): contiguous, or a transposed (strided) view.
Tensor make_param(DType dt, bool strided) {
  Tensor p = strided ? empty({3, 2}, dt).t() : empty({2, 3}, dt);
  p.copy_(from_vector<double>(initial_values(6), {2, 3}));
  p.requires_grad_();
  return p;
}
void set_step_grad(const Tensor& p, int k) {
  std::vector<double> g(static_cast<size_t>(p.numel()));
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_value(k, i);
  autograd::set_grad(p, from_vector<double>(g, {2, 3}).to(p.dtype()));
}

// ---- float64 references ----

std::vector<double> ref_sgd(int steps, double lr, double momentum, double dampening, double wd,
                            bool nesterov) {
  std::vector<double> p = initial_values(6), buf(6, 0.0);
  for (int k = 1; k <= steps; ++k) {
    for (size_t i = 0; i < 6; ++i) {
      double d = grad_value(k, i) + wd * p[i];
      if (momentum != 0.0) {
        buf[i] = k == 1 ? d : momentum * buf[i] + (1.0 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
  return p;
}

std::vector<double> ref_adam(int steps, double lr, double b1, double b2, double eps, double wd,
                             bool decoupled, bool amsgrad) {
  std::vector<double> p = initial_values(6), m(6, 0.0), v(6, 0.0), vmax(6, 0.0);
  for (int k = 1; k <= steps; ++k) {
    const double bc1 = 1.0 - std::pow(b1, k), bc2 = 1.0 - std::pow(b2, k);
    for (size_t i = 0; i < 6; ++i) {
      double g = grad_value(k, i);
      if (decoupled) {
        p[i] *= 1.0 - lr * wd;
      } else {
        g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double vhat = (amsgrad ? vmax[i] : v[i]) / bc2;
      p[i] -= lr * (m[i] / bc1) / (std::sqrt(vhat) + eps);
    }
  }
  return p;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// Runs `steps` steps on a parameter of each kind and compares with the reference.
void check_against(const MakeOpt& make, int steps, const std::vector<double>& want) {
  struct Kind {
    DType dt;
    bool strided;
    double tol;
  };
  for (Kind kind : {Kind{kFloat64, false, 1e-13}, Kind{kFloat64, true, 1e-13},
                    Kind{kFloat32, false, 2e-6}, Kind{kFloat32, true, 2e-6}}) {
    SCOPED_TRACE(::testing::Message()
                 << dtype_name(kind.dt) << (kind.strided ? " strided" : " contiguous"));
    Tensor p = make_param(kind.dt, kind.strided);
    auto opt = make({p});
    for (int k = 1; k <= steps; ++k) {
      set_step_grad(p, k);
      opt->step();
    }
    std::vector<double> got = values(p);
    for (size_t i = 0; i < 6; ++i)
      EXPECT_NEAR(got[i], want[i], kind.tol * (1 + std::abs(want[i]))) << i;
  }
}

TEST(SGD, MomentumNesterovWeightDecayHandValues) {
  // One element by hand: p = 1, g = 0.5, lr 0.1, momentum 0.9, weight decay 0.1, nesterov.
  // Step 1: d = 0.5 + 0.1 = 0.6, buf = 0.6, d = 0.6 + 0.9 * 0.6 = 1.14, p = 0.886.
  // Step 2: d = 0.5 + 0.0886 = 0.5886, buf = 0.54 + 0.5886 = 1.1286, d = 0.5886 + 1.01574
  // = 1.60434,
  //         p = 0.886 - 0.160434 = 0.725566.
  Tensor p = f64({1.0}, {1});
  p.requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true});
  autograd::set_grad(p, f64({0.5}, {1}));
  opt.step();
  EXPECT_NEAR(p.item<double>(), 0.886, 1e-15);
  opt.step();
  EXPECT_NEAR(p.item<double>(), 0.725566, 1e-15);
  EXPECT_NEAR(opt.state(p).find("momentum_buffer")->item<double>(), 1.1286, 1e-15);
}

TEST(SGD, MatchesFormulas) {
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05});
      },
      3, ref_sgd(3, 0.05, 0, 0, 0, false));
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::SGD>(
            ps,
            optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
      },
      3, ref_sgd(3, 0.05, 0.9, 0.1, 0.01, false));
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::SGD>(
            ps,
            optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true});
      },
      3, ref_sgd(3, 0.05, 0.8, 0.0, 0.02, true));
}

TEST(Adam, HandValueFirstStep) {
  // The first Adam step moves each element by lr * sign(g) (up to eps): m / bc1 = g, v / bc2 = g^2.
  Tensor p = f64({1.0, -2.0}, {2});
  p.requires_grad_();
  optim::Adam opt({p}, {.lr = 0.1});
  autograd::set_grad(p, f64({0.5, -3.0}, {2}));
  opt.step();
  std::vector<double> v = values(p);
  EXPECT_NEAR(v[0], 0.9, 1e-7);
  EXPECT_NEAR(v[1], -1.9, 1e-7);
  EXPECT_EQ(opt.state(p).find("step")->item<int64_t>(), 1);
  EXPECT_NEAR(values(*opt.state(p).find("exp_avg"))[0], 0.05, 1e-15);
  EXPECT_NEAR(values(*opt.state(p).find("exp_avg_sq"))[1], 0.009, 1e-15);
}

TEST(Adam, MatchesFormulas) {
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01});
      },
      3, ref_adam(3, 0.01, 0.9, 0.999, 1e-8, 0, false, false));
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::Adam>(
            ps,
            optim::AdamOptions{.lr = 0.02, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.1});
      },
      3, ref_adam(3, 0.02, 0.8, 0.95, 1e-6, 0.1, false, false));
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.02, .amsgrad = true});
      },
      3, ref_adam(3, 0.02, 0.9, 0.999, 1e-8, 0, false, true));
}

TEST(AdamW, MatchesFormulas) {
  check_against([](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps); }, 3,
                ref_adam(3, 1e-3, 0.9, 0.999, 1e-8, 1e-2, true, false));
  check_against(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::AdamW>(
            ps, optim::AdamOptions{
                    .lr = 0.05, .betas = {0.9, 0.99}, .weight_decay = 0.3, .amsgrad = true});
      },
      3, ref_adam(3, 0.05, 0.9, 0.99, 1e-8, 0.3, true, true));
  EXPECT_EQ(optim::AdamW({make_param(kFloat32, false)}).param_groups()[0].get("weight_decay"),
            1e-2);
}

TEST(Optimizer, SkipsParametersWithoutGradAndGroups) {
  Tensor a = make_param(kFloat64, false), b = make_param(kFloat64, false),
         c = make_param(kFloat64, false);
  optim::SGD opt({a, b}, {.lr = 0.1});
  opt.add_param_group({c}, {.lr = 0.01});
  set_step_grad(a, 1);
  set_step_grad(c, 1);
  opt.step();
  EXPECT_EQ(values(b), initial_values(6));  // no grad: untouched
  EXPECT_NEAR(values(a)[0], initial_values(6)[0] - 0.1 * grad_value(1, 0), 1e-15);
  EXPECT_NEAR(values(c)[0], initial_values(6)[0] - 0.01 * grad_value(1, 0), 1e-15);
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(sum(abs(a.grad())).item<double>(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

TEST(Optimizer, OptionAndParameterErrors) {
  Tensor p = make_param(kFloat32, false);
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::SGD({p}, {.lr = 0.1, .nesterov = true}); }),
                  "nesterov momentum requires a momentum > 0");
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::SGD({p}, {.lr = -1}); }),
                  "invalid learning rate");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    optim::Adam({p}, {.betas = {0.9, 1.0}});
                  }),
                  "invalid beta parameter at index 1");
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::Adam({}, {}); }), "empty parameter list");
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::Adam({p, p}, {}); }), "appears twice");
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::Adam({mul(p, 2.0)}, {}); }), "non-leaf");
  optim::SGD opt({p});
  EXPECT_CONTAINS(error_of<ValueError>([&] { opt.add_param_group({p}, {}); }),
                  "already is in another parameter group");
}

// Runs steps first..last of an optimizer over two parameters.
void run_steps(optim::Optimizer& opt, const std::vector<Tensor>& ps, int first, int last) {
  for (int k = first; k <= last; ++k) {
    for (const Tensor& p : ps) set_step_grad(p, k);
    opt.step();
  }
}

optim::OptimizerState clone_state(const optim::OptimizerState& s) {
  optim::OptimizerState c = s;
  for (auto& [k, t] : c.tensors) t = t.clone();
  return c;
}

template <class Opt, class Options>
void check_bit_exact_resume(const Options& options, DType dt) {
  std::vector<Tensor> ps = {make_param(dt, false), make_param(dt, false)};
  Opt a(ps, options);
  run_steps(a, ps, 1, 3);
  optim::OptimizerState saved = clone_state(a.state_dict());
  std::vector<Tensor> resumed = {ps[0].detach().clone(), ps[1].detach().clone()};
  run_steps(a, ps, 4, 6);

  for (auto& p : resumed) p.requires_grad_();
  Opt b(resumed, Options{});  // different hyperparameters until loaded
  b.load_state_dict(saved);
  EXPECT_EQ(b.param_groups()[0].lr(), options.lr);
  run_steps(b, resumed, 4, 6);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(equal(ps[i], resumed[i])) << i;
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (size_t i = 0; i < sa.tensors.size(); ++i) {
    EXPECT_EQ(sa.tensors[i].first, sb.tensors[i].first);
    EXPECT_TRUE(equal(sa.tensors[i].second, sb.tensors[i].second)) << sa.tensors[i].first;
  }
}

TEST(Optimizer, StateDictResumesBitExactly) {
  check_bit_exact_resume<optim::SGD>(
      optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true}, kFloat32);
  check_bit_exact_resume<optim::Adam>(
      optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true}, kFloat32);
  check_bit_exact_resume<optim::AdamW>(optim::AdamOptions{.lr = 0.01}, kFloat64);
}

TEST(Optimizer, StateDictLayout) {
  std::vector<Tensor> ps = {make_param(kFloat32, false), make_param(kFloat32, false)};
  optim::Adam opt({ps[0]}, {.lr = 0.01});
  opt.add_param_group({ps[1]}, {.lr = 0.02, .amsgrad = true});
  run_steps(opt, ps, 1, 2);
  auto st = opt.state_dict();
  std::vector<std::string> keys;
  for (auto& [k, t] : st.tensors) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                                            "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq",
                                            "state.1.max_exp_avg_sq"}));
  EXPECT_EQ(st.find_tensor("state.1.step")->item<int64_t>(), 2);
  EXPECT_EQ(st.find_scalar("param_groups.1.lr"), 0.02);
  EXPECT_EQ(st.find_scalar("param_groups.1.amsgrad"), 1.0);
  EXPECT_EQ(st.find_scalar("param_groups.0.beta2"), 0.999);
  EXPECT_EQ(st.find_scalar("param_groups.0.num_params"), 1.0);

  // Tensors through safetensors (scalars would go to JSON), then resume.
  const auto path =
      (std::filesystem::temp_directory_path() / "loom_optim_state.safetensors").string();
  io::save_safetensors(path, st.tensors);
  optim::OptimizerState loaded;
  loaded.tensors = io::load_safetensors(path).tensors;
  loaded.scalars = st.scalars;
  std::filesystem::remove(path);
  std::vector<Tensor> qs = {ps[0].detach().clone(), ps[1].detach().clone()};
  for (auto& q : qs) q.requires_grad_();
  optim::Adam opt2({qs[0]});
  opt2.add_param_group({qs[1]}, {});
  opt2.load_state_dict(loaded);
  run_steps(opt, ps, 3, 3);
  run_steps(opt2, qs, 3, 3);
  EXPECT_TRUE(equal(ps[0], qs[0]));
  EXPECT_TRUE(equal(ps[1], qs[1]));
}

TEST(Optimizer, LoadStateDictErrors) {
  std::vector<Tensor> ps = {make_param(kFloat32, false)};
  optim::SGD sgd(ps, {.lr = 0.1, .momentum = 0.9});
  run_steps(sgd, ps, 1, 1);
  optim::Adam adam(ps);
  EXPECT_CONTAINS(error_of<ValueError>([&] { adam.load_state_dict(sgd.state_dict()); }),
                  "unexpected key \"param_groups.0.momentum\"");

  run_steps(adam, ps, 1, 1);
  auto st = adam.state_dict();
  auto bad_shape = clone_state(st);
  bad_shape.tensors[1].second = zeros({3, 2});
  const std::string shape_msg = error_of<ValueError>([&] { adam.load_state_dict(bad_shape); });
  EXPECT_CONTAINS(shape_msg, "size mismatch for \"state.0.exp_avg\"");
  EXPECT_CONTAINS(shape_msg, "[3, 2]");
  auto bad_dtype = clone_state(st);
  bad_dtype.tensors[2].second = zeros({2, 3}, kInt64);
  EXPECT_CONTAINS(error_of<TypeError>([&] { adam.load_state_dict(bad_dtype); }),
                  "\"state.0.exp_avg_sq\" must be floating-point");
  auto bad_index = clone_state(st);
  bad_index.tensors.emplace_back("state.5.exp_avg", zeros({2, 3}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { adam.load_state_dict(bad_index); }),
                  "refers to parameter 5");

  std::vector<Tensor> two = {make_param(kFloat32, false), make_param(kFloat32, false)};
  optim::Adam bigger(two);
  EXPECT_CONTAINS(error_of<ValueError>([&] { bigger.load_state_dict(st); }),
                  "parameter group 0 has 2 parameters but the state's has 1");
  // A failed load changed nothing.
  EXPECT_EQ(adam.state(ps[0]).find("step")->item<int64_t>(), 1);
}

// ---- clip_grad_norm_ ----

TEST(ClipGradNorm, TwoNormScalesToMaxNorm) {
  Tensor a = f64({3, 4}, {2}), b = f64({12}, {1}), c = f64({7}, {1});
  for (Tensor* t : {&a, &b, &c}) t->requires_grad_();
  autograd::set_grad(a, f64({3, 4}, {2}));
  autograd::set_grad(b, f64({-12}, {1}));
  // c has no gradient: skipped.
  const double total = optim::clip_grad_norm_({a, b, c}, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);  // sqrt(9 + 16 + 144)
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(values(a.grad())[0], 3 * coef, 1e-15);
  EXPECT_NEAR(values(a.grad())[1], 4 * coef, 1e-15);
  EXPECT_NEAR(values(b.grad())[0], -12 * coef, 1e-15);
  // Below the limit: unchanged.
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 100.0), 6.5, 1e-6);
  EXPECT_NEAR(values(a.grad())[0], 3 * coef, 1e-15);
}

TEST(ClipGradNorm, InfAndOneNorms) {
  Tensor a = f64({0}, {1}), b = f64({0, 0}, {2});
  a.requires_grad_();
  b.requires_grad_();
  autograd::set_grad(a, f64({-5}, {1}));
  autograd::set_grad(b, f64({2, 3}, {2}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a, b}, 100.0, 1.0), 10.0);  // |-5| + 2 + 3
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a, b}, 1.0, INFINITY), 5.0);
  EXPECT_NEAR(values(a.grad())[0], -5.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_NEAR(values(b.grad())[1], 3.0 / (5.0 + 1e-6), 1e-15);
  EXPECT_EQ(optim::clip_grad_norm_({make_param(kFloat32, false)}, 1.0), 0.0);  // no gradients
  autograd::set_grad(a, f64({INFINITY}, {1}));
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    optim::clip_grad_norm_({a, b}, 1.0, 2.0, true);
                  }),
                  "non-finite");
}

}  // namespace
}  // namespace loom::testing
