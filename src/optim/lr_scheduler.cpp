// Learning-rate schedulers (torch.optim.lr_scheduler): StepLR, CosineAnnealingLR and LinearWarmup
// (LinearLR + SequentialLR). Note [Chainable schedulers]: step() computes each group's next lr from
// its current lr, as PyTorch's get_lr does, so a schedule reproduces PyTorch's values to the last
// bit and composes with other schedulers or manual changes the same way; closed_form_lr is the
// formula.
#include <cmath>
#include <numbers>

#include "loom/error.h"
#include "loom/optim.h"
#include "loom/parse.h"

namespace loom::optim {

// ---- LRScheduler ----

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {
  for (auto& group : optimizer.param_groups()) {
    if (!group.has("initial_lr")) group.set("initial_lr", group.lr());
    base_lrs_.push_back(group.get("initial_lr"));
  }
}

LRScheduler::~LRScheduler() = default;

void LRScheduler::check_groups() const {
  LOOM_CHECK(optimizer_->param_groups().size() == base_lrs_.size(), "[", name(),
             "] the optimizer has ", optimizer_->param_groups().size(),
             " parameter groups but the scheduler was built for ", base_lrs_.size());
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lrs[g]);
  last_lr_ = lrs;
}

void LRScheduler::step() {
  check_groups();
  ++last_epoch_;
  std::vector<double> lrs;
  const auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) lrs.push_back(chained_lr(g, groups[g].lr()));
  set_lrs(lrs);
}

void LRScheduler::restart() {
  check_groups();
  last_epoch_ = 0;
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(closed_form_lr(g, 0));
  set_lrs(lrs);
}

double LRScheduler::require(const SchedulerState& state, const std::string& key,
                            const std::string& who) {
  for (const auto& [k, v] : state) {
    if (k == key) {
      LOOM_CHECK(std::isfinite(v), "[", who, ".load_state_dict] \"", key, "\" is ", v,
                 " (expected a finite number)");
      return v;
    }
  }
  LOOM_THROW(ValueError, "[", who, ".load_state_dict] the state has no \"", key, "\"");
}

int64_t LRScheduler::require_int(const SchedulerState& state, const std::string& key,
                                 const std::string& who, int64_t min) {
  const double v = require(state, key, who);
  LOOM_CHECK(v == std::floor(v) && v >= static_cast<double>(min) && v <= 9007199254740992.0, "[",
             who, ".load_state_dict] \"", key, "\" is ", v,
             " (expected a whole number of at least ", min, ")");
  return static_cast<int64_t>(v);
}

SchedulerState LRScheduler::state_dict() const {
  SchedulerState out;
  out.emplace_back("last_epoch", static_cast<double>(last_epoch_));
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    out.emplace_back("base_lrs." + std::to_string(g), base_lrs_[g]);
  }
  for (size_t g = 0; g < last_lr_.size(); ++g) {
    out.emplace_back("last_lr." + std::to_string(g), last_lr_[g]);
  }
  settings(out);
  return out;
}

void LRScheduler::load_state_dict(const SchedulerState& state) {
  const size_t n = base_lrs_.size();
  LOOM_CHECK(!state.empty(), "[", name(), ".load_state_dict] the state is empty");
  for (const auto& [k, v] : state) {
    if (k.rfind("base_lrs.", 0) == 0) {
      std::string what = "[";
      what += name();
      what += ".load_state_dict] the group of \"";
      what += k;
      what += "\"";
      const int64_t g = parse_int(k.substr(9), what, 0);
      LOOM_CHECK(g < static_cast<int64_t>(n), "[", name(), ".load_state_dict] \"", k,
                 "\" does not fit this scheduler's ", n, " parameter groups");
    }
  }
  const int64_t epoch = require_int(state, "last_epoch", name(), 0);
  std::vector<double> base(n), last(n);
  for (size_t g = 0; g < n; ++g) {
    base[g] = require(state, "base_lrs." + std::to_string(g), name());
    last[g] = require(state, "last_lr." + std::to_string(g), name());
    LOOM_CHECK(base[g] >= 0 && last[g] >= 0, "[", name(), ".load_state_dict] group ", g,
               " has a negative learning rate (base_lrs ", base[g], ", last_lr ", last[g], ")");
  }
  load_settings(state);
  last_epoch_ = epoch;
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LOOM_CHECK(step_size > 0, "[StepLR] step_size must be positive but got ", step_size);
  initial_step();
}

double StepLR::chained_lr(size_t, double lr) const {
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lr;
  return lr * gamma_;
}

double StepLR::closed_form_lr(size_t g, int64_t epoch) const {
  return base_lrs_[g] * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

void StepLR::settings(SchedulerState& out) const {
  out.emplace_back("step_size", static_cast<double>(step_size_));
  out.emplace_back("gamma", gamma_);
}

void StepLR::load_settings(const SchedulerState& s) {
  step_size_ = static_cast<int64_t>(require(s, "step_size", name()));
  gamma_ = require(s, "gamma", name());
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  LOOM_CHECK(T_max > 0, "[CosineAnnealingLR] T_max must be positive but got ", T_max);
  initial_step();
}

double CosineAnnealingLR::chained_lr(size_t g, double lr) const {
  constexpr double pi = std::numbers::pi;
  const int64_t e = last_epoch_;
  const auto t = static_cast<double>(t_max_);
  if (e == 0) return lr;
  // (e - 1 - T_max) % (2 T_max) == 0 with Python's modulo: the first epoch after a minimum.
  const int64_t period = 2 * t_max_;
  if ((((e - 1 - t_max_) % period) + period) % period == 0) {
    return lr + (base_lrs_[g] - eta_min_) * (1.0 - std::cos(pi / t)) / 2.0;
  }
  return (1.0 + std::cos(pi * static_cast<double>(e) / t)) /
             (1.0 + std::cos(pi * static_cast<double>(e - 1) / t)) * (lr - eta_min_) +
         eta_min_;
}

double CosineAnnealingLR::closed_form_lr(size_t g, int64_t epoch) const {
  return eta_min_ + (base_lrs_[g] - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * static_cast<double>(epoch) /
                                        static_cast<double>(t_max_))) /
                        2.0;
}

void CosineAnnealingLR::settings(SchedulerState& out) const {
  out.emplace_back("T_max", static_cast<double>(t_max_));
  out.emplace_back("eta_min", eta_min_);
}

void CosineAnnealingLR::load_settings(const SchedulerState& s) {
  const int64_t t_max = require_int(s, "T_max", name(), 1);
  const double eta_min = require(s, "eta_min", name());
  LOOM_CHECK(eta_min >= 0, "[", name(), ".load_state_dict] \"eta_min\" is ", eta_min,
             " (expected >= 0)");
  t_max_ = t_max;
  eta_min_ = eta_min;
}

// ---- LinearWarmup ----

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer),
      warmup_(warmup_steps),
      start_factor_(start_factor),
      after_(std::move(after)) {
  LOOM_CHECK(warmup_steps >= 0, "[LinearWarmup] warmup_steps must be non-negative but got ",
             warmup_steps);
  LOOM_CHECK(start_factor > 0.0 && start_factor <= 1.0,
             "[LinearWarmup] start_factor must be in (0, 1] but got ", start_factor);
  if (after_) {
    LOOM_CHECK(after_->optimizer_ == &optimizer, "[LinearWarmup] the scheduler to hand over to (",
               after_->name(), ") was built on a different optimizer");
    // As SequentialLR: back to the initial lrs, and undo the step `after` made when it was built.
    auto& groups = optimizer.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(base_lrs_[g]);
    after_->last_epoch_ -= 1;
  }
  initial_step();
}

double LinearWarmup::chained_lr(size_t g, double lr) const {
  const int64_t e = last_epoch_;
  if (warmup_ == 0) return e == 0 ? base_lrs_[g] : lr;
  if (e == 0) return lr * start_factor_;
  if (e > warmup_) return lr;
  // torch's LinearLR with end_factor = 1.
  const double delta = 1.0 - start_factor_;
  return lr * (1.0 + delta / (static_cast<double>(warmup_) * start_factor_ +
                              static_cast<double>(e - 1) * delta));
}

void LinearWarmup::step() {
  if (!after_ || last_epoch_ + 1 < warmup_) {
    LRScheduler::step();
    return;
  }
  check_groups();
  ++last_epoch_;
  if (last_epoch_ == warmup_) {
    after_->restart();
  } else {
    after_->step();
  }
  last_lr_ = after_->get_last_lr();
}

double LinearWarmup::closed_form_lr(size_t g, int64_t epoch) const {
  if (epoch < warmup_) {
    return base_lrs_[g] * (start_factor_ + (1.0 - start_factor_) * static_cast<double>(epoch) /
                                               static_cast<double>(warmup_));
  }
  return after_ ? after_->closed_form_lr(g, epoch - warmup_) : base_lrs_[g];
}

void LinearWarmup::settings(SchedulerState& out) const {
  out.emplace_back("warmup_steps", static_cast<double>(warmup_));
  out.emplace_back("start_factor", start_factor_);
}

void LinearWarmup::load_settings(const SchedulerState& s) {
  const int64_t warmup = require_int(s, "warmup_steps", name(), 0);
  const double start_factor = require(s, "start_factor", name());
  LOOM_CHECK(start_factor > 0.0 && start_factor <= 1.0, "[", name(),
             ".load_state_dict] \"start_factor\" is ", start_factor, " (expected in (0, 1])");
  warmup_ = warmup;
  start_factor_ = start_factor;
}

SchedulerState LinearWarmup::state_dict() const {
  SchedulerState out = LRScheduler::state_dict();
  if (after_) {
    for (auto& [k, v] : after_->state_dict()) out.emplace_back("after." + k, v);
  }
  return out;
}

void LinearWarmup::load_state_dict(const SchedulerState& state) {
  SchedulerState own, nested;
  for (const auto& [k, v] : state) {
    if (k.rfind("after.", 0) == 0) {
      nested.emplace_back(k.substr(6), v);
    } else {
      own.emplace_back(k, v);
    }
  }
  LOOM_CHECK(nested.empty() || after_,
             "[LinearWarmup.load_state_dict] the state has \"after.\" keys "
             "but this scheduler hands over to no other");
  if (after_) after_->load_state_dict(nested);
  LRScheduler::load_state_dict(own);
}

}  // namespace loom::optim
