// Learning-rate schedulers: values over epochs against the closed forms, hand-over after warmup,
// several parameter groups, and state round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "loom/optim.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

Tensor param() {
  Tensor p = zeros({2});
  p.requires_grad_();
  return p;
}

// lr of every epoch 0..epochs-1, as seen in the optimizer after the scheduler's step.
template <class Sched>
std::vector<double> trace(optim::Optimizer& opt, Sched& sched, int epochs) {
  std::vector<double> out;
  for (int e = 0; e < epochs; ++e) {
    if (e > 0) sched.step();
    EXPECT_EQ(sched.last_epoch(), e);
    EXPECT_EQ(sched.get_last_lr()[0], opt.param_groups()[0].lr());
    out.push_back(opt.param_groups()[0].lr());
  }
  return out;
}

TEST(StepLR, MatchesClosedForm) {
  optim::SGD opt({param()}, {.lr = 0.1});
  optim::StepLR sched(opt, 3, 0.5);
  auto lrs = trace(opt, sched, 12);
  for (int e = 0; e < 12; ++e) {
    EXPECT_NEAR(lrs[e], 0.1 * std::pow(0.5, e / 3), 1e-17) << e;
    EXPECT_NEAR(sched.closed_form_lr(0, e), 0.1 * std::pow(0.5, e / 3), 1e-17);
  }
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::StepLR(opt, 0); }), "step_size");
}

TEST(CosineAnnealingLR, MatchesClosedFormOverMoreThanOnePeriod) {
  optim::SGD opt({param()}, {.lr = 0.1});
  const double eta_min = 0.001;
  optim::CosineAnnealingLR sched(opt, 10, eta_min);
  auto lrs = trace(opt, sched, 35);
  for (int e = 0; e < 35; ++e) {
    const double want = eta_min + (0.1 - eta_min) * (1 + std::cos(std::numbers::pi * e / 10)) / 2;
    EXPECT_NEAR(lrs[e], want, 1e-15) << e;
  }
  EXPECT_NEAR(lrs[10], eta_min, 1e-15);
  EXPECT_NEAR(lrs[20], 0.1, 1e-15);
}

TEST(LinearWarmup, AloneStaysConstantAfterwards) {
  optim::SGD opt({param()}, {.lr = 0.2});
  optim::LinearWarmup sched(opt, 5, 0.1);
  auto lrs = trace(opt, sched, 9);
  for (int e = 0; e < 9; ++e) {
    const double want = e < 5 ? 0.2 * (0.1 + 0.9 * e / 5.0) : 0.2;
    EXPECT_NEAR(lrs[e], want, 1e-15) << e;
    EXPECT_NEAR(sched.closed_form_lr(0, e), want, 1e-15);
  }
}

TEST(LinearWarmup, HandsOverToCosine) {
  optim::SGD opt({param()}, {.lr = 0.1});
  auto cosine = std::make_unique<optim::CosineAnnealingLR>(opt, 10);
  optim::LinearWarmup sched(opt, 4, 0.25, std::move(cosine));
  auto lrs = trace(opt, sched, 16);
  for (int e = 0; e < 16; ++e) {
    const double want = e < 4 ? 0.1 * (0.25 + 0.75 * e / 4.0)
                              : 0.1 * (1 + std::cos(std::numbers::pi * (e - 4) / 10)) / 2;
    EXPECT_NEAR(lrs[e], want, 1e-15) << e;
    EXPECT_NEAR(sched.closed_form_lr(0, e), want, 1e-15) << e;
  }
  optim::SGD other({param()});
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    optim::LinearWarmup(opt, 3, 0.5, std::make_unique<optim::StepLR>(other, 2));
                  }),
                  "different optimizer");
}

TEST(LRScheduler, SeveralGroupsKeepTheirBaseLr) {
  optim::SGD opt({param()}, {.lr = 0.1});
  opt.add_param_group({param()}, {.lr = 0.4});
  optim::StepLR sched(opt, 2, 0.1);
  for (int e = 1; e <= 4; ++e) sched.step();
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.1 * 0.01, 1e-17);
  EXPECT_NEAR(opt.param_groups()[1].lr(), 0.4 * 0.01, 1e-17);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{0.1, 0.4}));
  EXPECT_EQ(opt.param_groups()[1].get("initial_lr"), 0.4);
}

TEST(LRScheduler, StateRoundTripResumesTheSchedule) {
  auto make = [](optim::SGD& opt) {
    return std::make_unique<optim::LinearWarmup>(
        opt, 3, 0.1, std::make_unique<optim::CosineAnnealingLR>(opt, 8, 1e-4));
  };
  optim::SGD a({param()}, {.lr = 0.3});
  auto sa = make(a);
  for (int e = 0; e < 6; ++e) sa->step();
  auto sched_state = sa->state_dict();
  auto opt_state = a.state_dict();

  optim::SGD b({param()}, {.lr = 0.3});
  auto sb = make(b);
  b.load_state_dict(opt_state);
  sb->load_state_dict(sched_state);
  EXPECT_EQ(sb->last_epoch(), 6);
  EXPECT_EQ(b.param_groups()[0].lr(), a.param_groups()[0].lr());
  for (int e = 0; e < 8; ++e) {
    sa->step();
    sb->step();
    EXPECT_EQ(a.param_groups()[0].lr(), b.param_groups()[0].lr()) << e;
  }
  optim::SchedulerState missing = {{"last_epoch", 1}};
  EXPECT_CONTAINS(error_of<ValueError>([&] { optim::StepLR(b, 2).load_state_dict(missing); }),
                  "the state has no \"base_lrs.0\"");
}

}  // namespace
}  // namespace loom::testing
