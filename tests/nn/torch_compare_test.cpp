// Cross-checks against PyTorch itself: the same optimizer and scheduler runs in loom and in
// torch.optim (through /usr/bin/python3), compared number by number. Skipped when python3 or torch
// is not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <unistd.h>

#include "loom/autograd.h"
#include "loom/optim.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

// A (37, 29) parameter: large enough for vectorised loops on both sides, odd so tails run too. The
// first elements are fixed; the rest follow a formula (grads of both signs, some zeros).
constexpr int64_t kRows = 37, kCols = 29;
std::vector<double> init_values() {
  std::vector<double> v = {0.5, -0.25, 1.75, -1.0, 0.125, 2.0};
  for (size_t i = v.size(); i < kRows * kCols; ++i)
    v.push_back(std::sin(0.37 * static_cast<double>(i)) * 2.0);
  return v;
}
std::vector<double> grad_values(int step) {
  static const std::vector<std::vector<double>> head = {{0.3, -1.2, 0.05, 2.0, -0.7, 0.0},
                                                        {-0.4, -0.9, 0.2, 1.5, 0.8, -0.1},
                                                        {0.6, 0.3, -0.25, -2.5, 0.1, 0.9}};
  std::vector<double> g = head[static_cast<size_t>(step)];
  for (size_t i = g.size(); i < kRows * kCols; ++i) {
    g.push_back(i % 17 == 0 ? 0.0
                            : std::cos(1.3 * static_cast<double>(i) + step) *
                                  (1.0 + static_cast<double>(i % 5)));
  }
  return g;
}

struct OptCase {
  std::string key;
  std::string torch_ctor;  // python expression over `params`
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};

std::vector<OptCase> opt_cases() {
  return {
      {"adam", "torch.optim.Adam(params, lr=0.01)",
       [](auto ps) { return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01}); }},
      {"adam_wd_amsgrad",
       "torch.optim.Adam(params, lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, "
       "amsgrad=True)",
       [](auto ps) {
         return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.05,
                                                                     .betas = {0.8, 0.95},
                                                                     .eps = 1e-6,
                                                                     .weight_decay = 0.1,
                                                                     .amsgrad = true});
       }},
      {"adamw", "torch.optim.AdamW(params, lr=0.02, weight_decay=0.3)",
       [](auto ps) {
         return std::make_unique<optim::AdamW>(ps,
                                               optim::AdamOptions{.lr = 0.02, .weight_decay = 0.3});
       }},
      {"sgd_nesterov",
       "torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.05, nesterov=True)",
       [](auto ps) {
         return std::make_unique<optim::SGD>(
             ps,
             optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true});
       }},
  };
}

TEST(TorchCompare, OptimizersMatchTorchOptimForThreeSteps) {
  std::string script =
      "import sys\n"
      "try:\n"
      "    import torch\n"
      "except Exception:\n"
      "    print('NO_TORCH'); sys.exit(0)\n"
      "torch.set_num_threads(1)\n"
      "init = " +
      py_list(init_values()) +
      "\n"
      "grads = [" +
      py_list(grad_values(0)) + ", " + py_list(grad_values(1)) + ", " + py_list(grad_values(2)) +
      "]\n"
      "def run(key, make):\n"
      "    for dt, name in ((torch.float32, 'f32'), (torch.float64, 'f64')):\n"
      "        p = torch.tensor(init, dtype=dt).reshape(" +
      std::to_string(kRows) + ", " + std::to_string(kCols) +
      ").requires_grad_()\n"
      "        params = [p]\n"
      "        opt = make(params)\n"
      "        for g in grads:\n"
      "            p.grad = torch.tensor(g, dtype=dt).reshape(" +
      std::to_string(kRows) + ", " + std::to_string(kCols) +
      ")\n"
      "            opt.step()\n"
      "        print(key + '.' + name, ' '.join(repr(float(x)) for x in p.detach().reshape(-1)))\n";
  for (const auto& c : opt_cases())
    script += "run('" + c.key + "', lambda params: " + c.torch_ctor + ")\n";
  auto torch_out = run_python(script);
  if (torch_out.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";

  for (const auto& c : opt_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      const std::string key = c.key + (dt == kFloat32 ? ".f32" : ".f64");
      SCOPED_TRACE(key);
      ASSERT_TRUE(torch_out.count(key));
      Tensor p = from_vector<double>(init_values(), {kRows, kCols}).to(dt);
      p.requires_grad_();
      auto opt = c.make({p});
      for (int step = 0; step < 3; ++step) {
        autograd::set_grad(p, from_vector<double>(grad_values(step), {kRows, kCols}).to(dt));
        opt->step();
      }
      const std::vector<double> got = values(p), want = torch_out[key];
      ASSERT_EQ(want.size(), got.size());
      const double rtol = dt == kFloat32 ? 1e-6 : 1e-14;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], rtol * (1.0 + std::abs(want[i]))) << "element " << i;
      }
    }
  }
}

TEST(TorchCompare, SchedulersMatchTorchLrScheduler) {
  const int epochs = 20;
  std::string script =
      "import sys, warnings\n"
      "warnings.filterwarnings('ignore')\n"
      "try:\n"
      "    import torch\n"
      "except Exception:\n"
      "    print('NO_TORCH'); sys.exit(0)\n"
      "def trace(key, make):\n"
      "    p = torch.zeros(2, requires_grad=True)\n"
      "    opt = torch.optim.SGD([p], lr=0.1)\n"
      "    s = make(opt)\n"
      "    lrs = []\n"
      "    for e in range(" +
      std::to_string(epochs) +
      "):\n"
      "        if e > 0:\n"
      "            opt.step(); s.step()\n"
      "        lrs.append(opt.param_groups[0]['lr'])\n"
      "    print(key, ' '.join(repr(x) for x in lrs))\n"
      "L = torch.optim.lr_scheduler\n"
      "trace('step', lambda o: L.StepLR(o, 4, 0.3))\n"
      "trace('cosine', lambda o: L.CosineAnnealingLR(o, 7, 0.002))\n"
      "trace('warmup', lambda o: L.LinearLR(o, 0.2, 1.0, 6))\n"
      "trace('warmup_cosine', lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.1, 1.0, 5), "
      "L.CosineAnnealingLR(o, 9, 0.001)], [5]))\n";
  auto torch_out = run_python(script);
  if (torch_out.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";

  auto check = [&](const std::string& key, auto make) {
    SCOPED_TRACE(key);
    Tensor p = zeros({2});
    p.requires_grad_();
    optim::SGD opt({p}, {.lr = 0.1});
    auto sched = make(opt);
    ASSERT_EQ(torch_out[key].size(), static_cast<size_t>(epochs));
    for (int e = 0; e < epochs; ++e) {
      if (e > 0) sched->step();
      // Chainable updates as PyTorch's: the same double operations, so the same bits.
      EXPECT_DOUBLE_EQ(opt.param_groups()[0].lr(), torch_out[key][static_cast<size_t>(e)])
          << "epoch " << e;
    }
  };
  check("step", [](optim::SGD& o) { return std::make_unique<optim::StepLR>(o, 4, 0.3); });
  check("cosine",
        [](optim::SGD& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 7, 0.002); });
  check("warmup", [](optim::SGD& o) { return std::make_unique<optim::LinearWarmup>(o, 6, 0.2); });
  check("warmup_cosine", [](optim::SGD& o) {
    return std::make_unique<optim::LinearWarmup>(
        o, 5, 0.1, std::make_unique<optim::CosineAnnealingLR>(o, 9, 0.001));
  });
}

}  // namespace
}  // namespace loom::testing
