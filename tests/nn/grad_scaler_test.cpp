// GradScaler (loom/amp.h) on the CPU: overflow skips and backoff, growth after growth_interval
// clean steps, unscaled gradients and the stepped parameters against an unscaled run of the same
// optimizer, the host reads a step makes (counted through a RecordFunction observer), state
// round-trips and misuse errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>

#include "loom/amp.h"
#include "loom/autograd.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/record_function.h"
#include "test_errors.h"

namespace loom::testing {
namespace {

using amp::GradScaler;
using amp::GradScalerOptions;

Tensor make_weight(uint64_t seed) {
  return randn({3, 4}, TensorOptions(kFloat32), Generator(seed)).requires_grad_();
}
Tensor make_input(uint64_t seed) {
  return randn({5, 4}, TensorOptions(kFloat32), Generator(seed));
}
// A loss whose gradient has every element non-zero.
Tensor loss_of(const Tensor& w, const Tensor& x) {
  return sum(tanh(mm(x, w.t())));
}

GradScalerOptions opts(double init_scale, int64_t growth_interval = 2000) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  return o;
}

// One iteration: scale, backward, step, update; returns whether it stepped.
bool scaled_iteration(GradScaler& scaler, optim::Optimizer& opt, const Tensor& w, const Tensor& x,
                      double loss_factor = 1.0) {
  opt.zero_grad();
  scaler.scale(loss_of(w, x) * loss_factor).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_TRUE(s.is_enabled());
}

TEST(GradScaler, UnscaledGradientsAndStepEqualTheUnscaledRun) {
  for (double init : {65536.0, 3.0}) {
    const Tensor w = make_weight(1), x = make_input(2);
    const Tensor w_ref = w.detach().clone().requires_grad_();
    optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_ref({w_ref}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    GradScaler scaler(opts(init));
    for (int it = 0; it < 3; ++it) {
      opt.zero_grad();
      opt_ref.zero_grad();
      const Tensor scaled = scaler.scale(loss_of(w, x));
      const double want = loss_of(w, x).item<double>() * init;
      EXPECT_NEAR(scaled.item<double>(), want, 1e-6 * std::abs(want));
      scaled.backward();
      scaler.unscale_(opt);
      loss_of(w_ref, x).backward();
      if (init == 65536.0) {
        // A power of two scales and unscales exactly.
        EXPECT_TRUE(equal(w.grad(), w_ref.grad()));
      } else {
        EXPECT_TRUE(allclose(w.grad(), w_ref.grad(), 1e-6, 1e-7));
      }
      EXPECT_TRUE(scaler.step(opt));
      opt_ref.step();
      scaler.update();
      if (init == 65536.0) {
        EXPECT_TRUE(equal(w.detach(), w_ref.detach()));
      } else {
        EXPECT_TRUE(allclose(w.detach(), w_ref.detach(), 1e-6, 1e-6));
      }
    }
    EXPECT_EQ(scaler.get_scale(), init);
    EXPECT_EQ(scaler.get_growth_tracker(), 3);
  }
}

TEST(GradScaler, AnInfOrNanGradientSkipsTheStepAndBacksOff) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    const Tensor w = make_weight(3), x = make_input(4);
    optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
    GradScaler scaler;
    EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
    EXPECT_EQ(scaler.get_growth_tracker(), 1);
    const Tensor before = w.detach().clone();
    EXPECT_FALSE(scaled_iteration(scaler, opt, w, x, bad));
    EXPECT_TRUE(equal(w.detach(), before));  // untouched
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.get_growth_tracker(), 0);
    EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
    EXPECT_FALSE(equal(w.detach(), before));
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  const Tensor w = make_weight(5), x = make_input(6);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 1e-3});
  GradScaler scaler(opts(8.0, 3));
  EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 2);
  EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_EQ(scaler.get_scale(), 16.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_EQ(scaler.get_scale(), 32.0);
  // An overflow after two clean steps: back to 16, and the count starts again.
  EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_TRUE(scaled_iteration(scaler, opt, w, x));
  EXPECT_FALSE(scaled_iteration(scaler, opt, w, x, std::numeric_limits<double>::infinity()));
  EXPECT_EQ(scaler.get_scale(), 16.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  // update(new_scale) sets it.
  scaler.scale(loss_of(w, x));
  scaler.update(4.0);
  EXPECT_EQ(scaler.get_scale(), 4.0);
}

TEST(GradScaler, AStepReadsTheHostOnce) {
  const Tensor w = make_weight(7), x = make_input(8);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
  GradScaler scaler;
  scaler.scale(loss_of(w, x)).backward();
  std::atomic<int> reads{0};
  const uint64_t h =
      add_record_callbacks(RecordFunctionCallbacks{[&](OpEvent& ev) {
                                                     if (ev.name == "loom::_local_scalar_dense")
                                                       ++reads;
                                                   },
                                                   nullptr, false, false});
  scaler.unscale_(opt);
  EXPECT_EQ(reads.load(), 0);
  scaler.step(opt);
  scaler.update();
  remove_record_callbacks(h);
  EXPECT_EQ(reads.load(), 1);
}

TEST(GradScaler, StateRoundTrip) {
  const Tensor w = make_weight(9), x = make_input(10);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 1e-3});
  GradScalerOptions o = opts(1024.0, 5);
  o.growth_factor = 4.0;
  o.backoff_factor = 0.25;
  GradScaler scaler(o);
  scaled_iteration(scaler, opt, w, x, std::numeric_limits<double>::infinity());
  scaled_iteration(scaler, opt, w, x);
  scaled_iteration(scaler, opt, w, x);
  const amp::GradScalerState st = scaler.state_dict();
  ASSERT_EQ(st.size(), 5u);
  GradScaler fresh;  // defaults, then the loaded state
  fresh.load_state_dict(st);
  EXPECT_EQ(fresh.get_scale(), 256.0);
  EXPECT_EQ(fresh.get_growth_tracker(), 2);
  EXPECT_EQ(fresh.options().growth_factor, 4.0);
  EXPECT_EQ(fresh.options().backoff_factor, 0.25);
  EXPECT_EQ(fresh.options().growth_interval, 5);
  EXPECT_EQ(fresh.state_dict(), st);
  // Both continue alike: three more clean steps reach the interval.
  for (int i = 0; i < 3; ++i) {
    scaled_iteration(scaler, opt, w, x);
    scaled_iteration(fresh, opt, w, x);
  }
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(fresh.get_scale(), 1024.0);
  // Loading into a scaler already in use overwrites its live scale.
  scaler.load_state_dict(st);
  EXPECT_EQ(scaler.get_scale(), 256.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 2);
}

TEST(GradScaler, Disabled) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  const Tensor w = make_weight(11), x = make_input(12);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
  const Tensor loss = loss_of(w, x);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  const Tensor before = w.detach().clone();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_FALSE(equal(w.detach(), before));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScaler, Misuse) {
  const Tensor w = make_weight(13), x = make_input(14);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
  GradScaler scaler;
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.unscale_(opt); }), "scale(loss)");
  scaler.scale(loss_of(w, x)).backward();
  scaler.unscale_(opt);
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.unscale_(opt); }),
                  "[GradScaler.unscale_] unscale_() has already been called");
  scaler.step(opt);
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.step(opt); }),
                  "[GradScaler.step] step() has already been called");
  scaler.update();
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.update(); }), "no inf checks were recorded");
  // An optimizer without gradients.
  opt.zero_grad();
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.step(opt); }), "none of its parameters");
  // float16 gradients.
  const Tensor h = randn({4}).to(kFloat16).requires_grad_();
  optim::SGD opt16({h}, optim::SGDOptions{.lr = 0.1});
  GradScaler s16;
  s16.scale(sum(h)).backward();
  EXPECT_CONTAINS(error_of<ValueError>([&] { s16.unscale_(opt16); }), "float16 gradient");
  // Options and states out of range.
  EXPECT_CONTAINS(error_of<ValueError>([] { GradScaler s(opts(-1.0)); }), "init_scale");
  GradScalerOptions o;
  o.growth_factor = 0.5;
  EXPECT_CONTAINS(error_of<ValueError>([&] { GradScaler s(o); }), "growth_factor");
  o = GradScalerOptions();
  o.growth_interval = 0;
  EXPECT_CONTAINS(error_of<ValueError>([&] { GradScaler s(o); }), "growth_interval");
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.load_state_dict({}); }), "empty");
  amp::GradScalerState st = scaler.state_dict();
  st.pop_back();
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.load_state_dict(st); }), "_growth_tracker");
  st = scaler.state_dict();
  st[1].second = 1.0;  // growth_factor
  EXPECT_CONTAINS(error_of<ValueError>([&] { scaler.load_state_dict(st); }), "growth_factor");
}

}  // namespace
}  // namespace loom::testing
