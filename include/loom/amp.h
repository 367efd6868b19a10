// Dynamic loss scaling for mixed-precision training (optim layer), as torch.amp.GradScaler: the
// loss is multiplied by a scale before backward so that small float16 gradients do not flush to
// zero; step() unscales the gradients, skips the update when one of them holds an inf or a NaN
// (the scale was too large), and update() lowers the scale after an overflow and raises it after
// growth_interval clean steps. Autocast itself is in loom/autocast.h (autograd layer).
//
// The scale and the growth tracker live on the device of the first scaled loss, and the overflow
// check stays there: a step reads one value on the host (one synchronisation), update() none.
// Ownership: the scaler keeps per-optimizer bookkeeping keyed by the optimizer's address between
// step() and update(); it holds no parameter. Thread-safety: none (use it where the optimizer is
// used).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/optim.h"
#include "loom/tensor.h"

namespace loom::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // when false every method is a pass-through (scale() returns the loss)
};

// "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" (PyTorch's
// keys); empty for a disabled scaler.
using GradScalerState = std::vector<std::pair<std::string, double>>;

class LOOM_API GradScaler {
 public:
  // ValueError for options outside their ranges.
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale (the scale made on loss's device on first use). Disabled: loss itself.
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records whether any held an inf or
  // a NaN (on the device, no synchronisation). At most once per optimizer between update()s
  // (ValueError otherwise); float16 gradients are refused as PyTorch does (unscale the float32
  // master weights' gradients instead). Call it before clipping gradients.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales if unscale_ was not called, then runs optimizer.step() unless a gradient was not
  // finite; returns whether it stepped. Once per optimizer between update()s.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from this iteration's overflow checks: times backoff_factor after an
  // overflow, times growth_factor after growth_interval steps in a row without one. With
  // new_scale, sets it instead. Ends the iteration (step() and unscale_() may be called again).
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (a host read); 1.0 when disabled.
  double get_scale() const;
  int64_t get_growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state_dict() const;
  // ValueError for a missing key, an empty state (saved by a disabled scaler) or a value out of
  // range.
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;  // float32 0-dim on the scale's device: > 0 after an inf or NaN gradient
  };
  void check_initialized(const char* where) const;

  GradScalerOptions options_;
  Tensor scale_;           // float32, 0-dim; undefined until the first scale()
  Tensor growth_tracker_;  // int64, 0-dim, on the scale's device
  int64_t init_tracker_ = 0;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace loom::amp
