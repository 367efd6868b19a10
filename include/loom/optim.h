// Optimizers, learning-rate schedulers and gradient clipping (optim layer), as torch.optim with the
// same update formulas, defaults and state layout.
//
// Ownership: an Optimizer holds handles to the parameters it updates (their storage is shared with
// the model) and owns its per-parameter state (momentum buffers, Adam moments, step counts). A
// scheduler keeps a non-owning pointer to its optimizer, which must outlive it. Thread-safety:
// none; step(), zero_grad() and the state functions must not race with each other or with
// backward().
//
// Checkpoints: state_dict() returns every tensor of the state under "state.<param index>.<name>"
// (parameter index = position across all groups, in order) and every hyperparameter as a double
// under "param_groups.<group>.<name>" (plus "param_groups.<group>.num_params", checked on load),
// so tensors can go to safetensors and scalars to JSON; loading them into an optimizer built the
// same way resumes bit-exactly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/tensor.h"

namespace loom::optim {

// A flat, checkpoint-friendly state: named tensors and named numbers.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::pair<std::string, double>> scalars;
  // nullptr / nullopt when absent.
  LOOM_API const Tensor* find_tensor(std::string_view key) const;
  LOOM_API std::optional<double> find_scalar(std::string_view key) const;
};

// A group of parameters sharing hyperparameters, like an entry of PyTorch's optimizer.param_groups:
// options hold "lr", "momentum", "weight_decay", ... (booleans as 0 / 1). Schedulers change "lr"
// and add "initial_lr".
struct LOOM_API ParamGroup {
  std::vector<Tensor> params;
  std::vector<std::pair<std::string, double>> options;

  bool has(std::string_view key) const;
  // ValueError naming the key when absent.
  double get(std::string_view key) const;
  void set(std::string_view key, double value);  // adds or replaces
  double lr() const { return get("lr"); }
  void set_lr(double lr) { set("lr", lr); }
};

// Named per-parameter state, like an entry of PyTorch's optimizer.state.
struct LOOM_API ParamState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Tensor* find(std::string_view name);
  const Tensor* find(std::string_view name) const;
  void set(std::string_view name, Tensor value);
};

class LOOM_API Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (parameters whose grad is undefined are
  // skipped).
  virtual void step() = 0;
  // Clears the gradients of all parameters: drops them (set_to_none) or fills them with zeros.
  void zero_grad(bool set_to_none = true);
  virtual std::string name() const = 0;

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The state of a parameter (empty before its first update).
  const ParamState& state(const Tensor& param) const;

  // Tensors alias the live state (no copy): write or clone them before the next step().
  OptimizerState state_dict() const;
  // Restores hyperparameters and per-parameter state from state_dict() of an optimizer of the same
  // kind built over parameters of the same shapes, in the same groups. Everything is validated
  // first (ValueError naming the key: group count or sizes differ, unknown names, shape mismatch;
  // TypeError for a non-floating moment); then tensors are copied (cast to the parameter's dtype,
  // as PyTorch).
  void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer() = default;
  // Validates the parameters (floating-point leaves, not already in a group) and the options
  // (check_options), and appends the group.
  void add_group(std::vector<Tensor> params, std::vector<std::pair<std::string, double>> options);
  // Throws ValueError when a hyperparameter of `options` is out of its range (a learning rate of
  // -1, a beta of 2, a NaN); `where` starts the message ("[Adam] " or, for load_state_dict,
  // "[Adam.load_state_dict] param_groups.0: "). Called for new groups and for every group a
  // load_state_dict would install, so a state never brings in values the constructor refuses.
  // Optional: the default accepts everything.
  virtual void check_options(const std::vector<std::pair<std::string, double>>& options,
                             const std::string& where) const;
  ParamState& mutable_state(const Tensor& param);
  // The per-parameter state names this optimizer uses ("momentum_buffer", "exp_avg", "step", ...).
  virtual bool is_state_name(std::string_view name) const = 0;

 private:
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, ParamState> state_;  // keyed by parameter identity
};

// ---- SGD ----

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

// torch.optim.SGD: g = grad + wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g at the
// first step); g = nesterov ? g + momentum * buf : buf; p -= lr * g. State: "momentum_buffer".
class LOOM_API SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  void add_param_group(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  std::string name() const override { return "SGD"; }
  const SGDOptions& defaults() const { return defaults_; }

 protected:
  bool is_state_name(std::string_view name) const override;
  void check_options(const std::vector<std::pair<std::string, double>>& options,
                     const std::string& where) const override;

 private:
  SGDOptions defaults_;
};

// ---- Adam and AdamW ----

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 penalty added to the gradient (Adam) or decoupled (AdamW)
  bool amsgrad = false;
  bool maximize = false;
  // The multi-tensor step (loom::_fused_adam_, Note [Multi-tensor Adam]): one kernel launch per
  // ~300 chunks of a group instead of ~10 launches per parameter. Unset (the default) means auto:
  // used for a group whose parameters are all float32, contiguous and on one CUDA device, since
  // there it computes the CPU fused step's formulas and only saves launches; CPU groups keep the
  // per-parameter fused loop (the same arithmetic). true: required for every group (CPU groups
  // then run the operator's CPU kernel); a group it cannot take (mixed devices, not float32 on
  // CUDA, non-contiguous) throws ValueError saying why. false: never. Applies to every group.
  std::optional<bool> fused;
};

// torch.optim.Adam (single-tensor implementation): m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), with g = grad + wd * p. State:
// "step" (0-dim int64), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
class LOOM_API Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  void add_param_group(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  const AdamOptions& defaults() const { return defaults_; }

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay);
  bool is_state_name(std::string_view name) const override;
  void check_options(const std::vector<std::pair<std::string, double>>& options,
                     const std::string& where) const override;

 private:
  AdamOptions defaults_;
  bool decoupled_;
};

// torch.optim.AdamW: Adam with decoupled weight decay, p *= 1 - lr * wd before the update. The
// default weight_decay is 1e-2, as PyTorch's.
inline AdamOptions adamw_defaults() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  return o;
}
class LOOM_API AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& options = adamw_defaults());
};

// ---- learning-rate schedulers ----

using SchedulerState = std::vector<std::pair<std::string, double>>;

// As torch.optim.lr_scheduler: constructing a scheduler records each group's "initial_lr" (if not
// already set) as its base lr and performs the first step (epoch 0); call step() once per epoch (or
// iteration) after optimizer.step(). Updates are chainable (each scheduler changes the current lr,
// as PyTorch's get_lr), so values match PyTorch's; closed_form_lr gives the formula.
class LOOM_API LRScheduler {
 public:
  virtual ~LRScheduler();
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  virtual void step();
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The lr of group g at `epoch` by the closed-form formula.
  virtual double closed_form_lr(size_t group, int64_t epoch) const = 0;
  virtual std::string name() const = 0;

  // "last_epoch", "base_lrs.<g>", "last_lr.<g>" and the scheduler's settings.
  virtual SchedulerState state_dict() const;
  // ValueError when a key is missing or the group count differs. Does not touch the optimizer's lr
  // (that is in the optimizer's state).
  virtual void load_state_dict(const SchedulerState& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // The next lr of group g from its current lr at epoch last_epoch_ (PyTorch's get_lr).
  virtual double chained_lr(size_t group, double current_lr) const = 0;
  // Constructors of concrete schedulers end with this (the step to epoch 0).
  void initial_step() { step(); }
  // Jumps to epoch 0 with the closed form (PyTorch's step(0), used when a scheduler takes over).
  void restart();
  void check_groups() const;
  void set_lrs(const std::vector<double>& lrs);
  // Settings for state_dict: subclasses list theirs and read them back.
  virtual void settings(SchedulerState& out) const {}
  virtual void load_settings(const SchedulerState& state) {}
  static int64_t require_int(const SchedulerState& state, const std::string& key,
                             const std::string& who, int64_t min);
  static double require(const SchedulerState& state, const std::string& key,
                        const std::string& who);

  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  std::vector<double> last_lr_;

  friend class LinearWarmup;
};

// lr = base_lr * gamma^(epoch / step_size) (integer division).
class LOOM_API StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double closed_form_lr(size_t group, int64_t epoch) const override;
  std::string name() const override { return "StepLR"; }

 protected:
  double chained_lr(size_t group, double current_lr) const override;
  void settings(SchedulerState& out) const override;
  void load_settings(const SchedulerState& state) override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
class LOOM_API CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double closed_form_lr(size_t group, int64_t epoch) const override;
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double chained_lr(size_t group, double current_lr) const override;
  void settings(SchedulerState& out) const override;
  void load_settings(const SchedulerState& state) override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warmup from start_factor * base_lr to base_lr over warmup_steps steps (torch's LinearLR
// with end_factor 1), then either constant or handed over to `after` at its epoch 0 (torch's
// SequentialLR with one milestone at warmup_steps). `after` must be built on the same optimizer
// (before this one); this scheduler owns it and steps it.
class LOOM_API LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  void step() override;
  double closed_form_lr(size_t group, int64_t epoch) const override;
  std::string name() const override { return "LinearWarmup"; }
  // Keys of `after` are prefixed with "after.".
  SchedulerState state_dict() const override;
  void load_state_dict(const SchedulerState& state) override;

 protected:
  double chained_lr(size_t group, double current_lr) const override;
  void settings(SchedulerState& out) const override;
  void load_settings(const SchedulerState& state) override;

 private:
  int64_t warmup_;
  double start_factor_;
  std::unique_ptr<LRScheduler> after_;
};

// ---- gradient clipping ----

// torch.nn.utils.clip_grad_norm_: the norm of all gradients together (as if concatenated; norm_type
// may be +inf), then every gradient is scaled by max_norm / (total + 1e-6) when that is below 1.
// Parameters without a gradient are skipped. Returns the total norm (before clipping). With
// error_if_nonfinite, a NaN or infinite total throws ValueError instead of scaling.
LOOM_API double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                                double norm_type = 2.0, bool error_if_nonfinite = false);

}  // namespace loom::optim
