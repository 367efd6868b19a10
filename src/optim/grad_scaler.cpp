// GradScaler: dynamic loss scaling (include/loom/amp.h), as torch.amp.GradScaler.
#include <cmath>

#include "loom/amp.h"
#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::amp {

namespace {

// `scale_name`: "init_scale" for the constructor, "scale" for a loaded state.
void check_options(const GradScalerOptions& o, const char* where, const char* scale_name) {
  LOOM_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "[", where, "] ", scale_name,
             " must be a positive finite number, but got ", o.init_scale);
  LOOM_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0, "[", where,
             "] growth_factor must be a finite number above 1, but got ", o.growth_factor);
  LOOM_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "[", where,
             "] backoff_factor must be in (0, 1), but got ", o.backoff_factor);
  LOOM_CHECK(o.growth_interval >= 1, "[", where, "] growth_interval must be at least 1, but got ",
             o.growth_interval);
}

double state_value(const GradScalerState& state, const char* key) {
  for (const auto& [k, v] : state) {
    if (k == key) return v;
  }
  LOOM_THROW(ValueError, "[GradScaler.load_state_dict] the state has no '", key, "'");
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options) {
  if (options_.enabled) check_options(options_, "GradScaler", "init_scale");
}

void GradScaler::check_initialized(const char* where) const {
  LOOM_CHECK(scale_.defined(), "[GradScaler.", where,
             "] the scale is not initialised yet: scale the loss with scale(loss) before "
             "backward, then call ",
             where, "()");
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  LOOM_CHECK(loss.defined(), "[GradScaler.scale] the loss is an undefined tensor");
  if (!scale_.defined()) {
    const TensorOptions on_device = TensorOptions().with_device(loss.device());
    scale_ = full({}, options_.init_scale, on_device.with_dtype(kFloat32));
    growth_tracker_ = full({}, init_tracker_, on_device.with_dtype(kInt64));
  }
  return mul(loss, scale_.device() == loss.device() ? scale_ : scale_.to(loss.device()));
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_initialized("unscale_");
  PerOptimizer& st = per_optimizer_[&optimizer];
  LOOM_CHECK(st.stage != Stage::Unscaled,
             "[GradScaler.unscale_] unscale_() has already been called on this optimizer since "
             "the last update()");
  LOOM_CHECK(st.stage != Stage::Stepped,
             "[GradScaler.unscale_] unscale_() is being called after step() (call update() "
             "first)");
  autograd::NoGradGuard no_grad;
  // 1 / scale in double, then float32, as PyTorch (exact for the usual power-of-two scales).
  const Tensor inv = reciprocal(scale_.to(kFloat64)).to(kFloat32);
  // x * 0 is 0 for every finite x and NaN for an inf or a NaN, so the sum of g * 0 over a
  // gradient is NaN exactly when it holds a non-finite value; the sums of all gradients add up on
  // the scale's device, with no host read.
  Tensor nonfinite_sum;
  size_t index = 0;
  for (const optim::ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      const size_t i = index++;
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      LOOM_CHECK(g.dtype() != kFloat16, "[GradScaler.unscale_] parameter ", i, " (shape ",
                 g.shape_str(),
                 ") has a float16 gradient; keep the parameters in float32 and autocast the "
                 "computation (float16 gradients cannot be unscaled safely)");
      Tensor probe = sum(mul(g, 0)).to(TensorOptions(kFloat32).with_device(scale_.device()));
      nonfinite_sum = nonfinite_sum.defined() ? add(nonfinite_sum, probe) : probe;
      g.mul_(g.device() == inv.device() ? inv : inv.to(g.device()));
    }
  }
  if (nonfinite_sum.defined()) st.found_inf = ne(nonfinite_sum, nonfinite_sum).to(kFloat32);
  st.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  LOOM_CHECK(per_optimizer_[&optimizer].stage != Stage::Stepped,
             "[GradScaler.step] step() has already been called on this optimizer since the last "
             "update()");
  if (per_optimizer_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  PerOptimizer& st = per_optimizer_[&optimizer];
  LOOM_CHECK(st.found_inf.defined(), "[GradScaler.step] no gradient was checked for this ",
             optimizer.name(), " optimizer: none of its parameters has a gradient");
  // The step's one host read.
  const bool overflow = st.found_inf.item().to_double() != 0.0;
  if (!overflow) optimizer.step();
  st.stage = Stage::Stepped;
  return !overflow;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  check_initialized("update");
  autograd::NoGradGuard no_grad;
  if (new_scale.has_value()) {
    LOOM_CHECK(std::isfinite(*new_scale) && *new_scale > 0,
               "[GradScaler.update] new_scale must be a positive finite number, but got ",
               *new_scale);
    scale_.fill_(*new_scale);
    per_optimizer_.clear();
    return;
  }
  Tensor found;
  for (const auto& [opt, st] : per_optimizer_) {
    if (st.found_inf.defined()) found = found.defined() ? add(found, st.found_inf) : st.found_inf;
  }
  LOOM_CHECK(found.defined(),
             "[GradScaler.update] no inf checks were recorded before update(): call step() (or "
             "unscale_()) on an optimizer with gradients first");
  // The same arithmetic as PyTorch's _amp_update_scale_, in tensor operations on the scale's
  // device (no host read): back off after an overflow, grow after growth_interval clean steps, and
  // never grow to an infinite scale.
  const Tensor overflow = gt(found, 0);
  Tensor tracker = where(overflow, Scalar(int64_t{0}), add(growth_tracker_, 1));
  const Tensor grown = mul(scale_, options_.growth_factor);
  const Tensor grow =
      logical_and(eq(tracker, options_.growth_interval), eq(mul(grown, 0), 0));  // finite
  const Tensor next =
      where(overflow, mul(scale_, options_.backoff_factor), where(grow, grown, scale_));
  tracker = where(grow, Scalar(int64_t{0}), tracker);
  scale_.copy_(next);
  growth_tracker_.copy_(tracker);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item().to_double() : options_.init_scale;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item().to<int64_t>() : init_tracker_;
}

GradScalerState GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(get_growth_tracker())}};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!options_.enabled) return;
  LOOM_CHECK(!state.empty(),
             "[GradScaler.load_state_dict] the state is empty, possibly because it was saved "
             "from a disabled GradScaler");
  GradScalerOptions o = options_;
  o.init_scale = state_value(state, "scale");
  o.growth_factor = state_value(state, "growth_factor");
  o.backoff_factor = state_value(state, "backoff_factor");
  const double interval = state_value(state, "growth_interval");
  const double tracker = state_value(state, "_growth_tracker");
  LOOM_CHECK(interval == std::floor(interval) && interval >= 1 && interval < 9.0e18,
             "[GradScaler.load_state_dict] growth_interval must be a positive integer, but got ",
             interval);
  o.growth_interval = static_cast<int64_t>(interval);
  check_options(o, "GradScaler.load_state_dict", "scale");
  LOOM_CHECK(tracker == std::floor(tracker) && tracker >= 0 && tracker < o.growth_interval,
             "[GradScaler.load_state_dict] _growth_tracker must be an integer in [0, "
             "growth_interval = ",
             o.growth_interval, "), but got ", tracker);
  options_ = o;
  init_tracker_ = static_cast<int64_t>(tracker);
  if (scale_.defined()) {
    scale_.fill_(o.init_scale);
    growth_tracker_.fill_(init_tracker_);
  }
}

}  // namespace loom::amp
