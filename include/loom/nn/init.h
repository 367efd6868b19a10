// Parameter initialisers (nn layer), as torch.nn.init: each fills a tensor in place (under
// NoGradGuard, so parameters that require grad can be filled) and returns it. Random ones draw from
// `gen` (the caller keeps ownership) or, when null, the default generator: the same seed gives the
// same values. Calls on different tensors are thread-safe; draws from one generator are serialised
// by its lock.
#pragma once

#include <optional>
#include <string_view>
#include <utility>

#include "loom/export.h"
#include "loom/generator.h"
#include "loom/tensor.h"

namespace loom::nn::init {

// (fan_in, fan_out) of a weight: size(1) * receptive field and size(0) * receptive field, where the
// receptive field is the product of the dims after the first two. ValueError for fewer than 2 dims.
LOOM_API std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);
// The recommended gain for a nonlinearity: "linear", "conv1d", "conv2d", "conv3d", "sigmoid" -> 1,
// "tanh" -> 5/3, "relu" -> sqrt(2), "leaky_relu" -> sqrt(2 / (1 + slope^2)) (slope defaults to
// 0.01), "selu" -> 3/4. ValueError for anything else.
LOOM_API double calculate_gain(std::string_view nonlinearity,
                               std::optional<double> param = std::nullopt);

LOOM_API const Tensor& uniform_(const Tensor& tensor, double a = 0.0, double b = 1.0,
                                Generator* gen = nullptr);
LOOM_API const Tensor& normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0,
                               Generator* gen = nullptr);
LOOM_API const Tensor& constant_(const Tensor& tensor, double value);
LOOM_API const Tensor& zeros_(const Tensor& tensor);
LOOM_API const Tensor& ones_(const Tensor& tensor);

// He initialisation. std = gain(nonlinearity, a) / sqrt(fan), fan = fan_in or fan_out by `mode`
// ("fan_in" / "fan_out"); uniform draws from [-sqrt(3) std, sqrt(3) std]. Defaults as PyTorch's
// (a = 0, "fan_in", "leaky_relu"). A tensor with no elements is returned unchanged.
LOOM_API const Tensor& kaiming_uniform_(const Tensor& tensor, double a = 0.0,
                                        std::string_view mode = "fan_in",
                                        std::string_view nonlinearity = "leaky_relu",
                                        Generator* gen = nullptr);
LOOM_API const Tensor& kaiming_normal_(const Tensor& tensor, double a = 0.0,
                                       std::string_view mode = "fan_in",
                                       std::string_view nonlinearity = "leaky_relu",
                                       Generator* gen = nullptr);
// Glorot initialisation: std = gain * sqrt(2 / (fan_in + fan_out)).
LOOM_API const Tensor& xavier_uniform_(const Tensor& tensor, double gain = 1.0,
                                       Generator* gen = nullptr);
LOOM_API const Tensor& xavier_normal_(const Tensor& tensor, double gain = 1.0,
                                      Generator* gen = nullptr);

}  // namespace loom::nn::init
