// Linear: y = x W^T + b with PyTorch's default initialisation.
#include <cmath>

#include "nn/check.h"

namespace loom::nn {

namespace detail {
// PyTorch's reset_parameters for Linear and Conv2d: kaiming_uniform(a = sqrt(5)) for the weight,
// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. Weight first, then
// bias, so one seed gives the same tensors as constructing in that order.
void init_like_pytorch_linear(const Tensor& weight, const Tensor* bias, Generator* gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), "fan_in", "leaky_relu", gen);
  if (bias) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(*bias, -bound, bound, gen);
  }
}
}  // namespace detail

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen)
    : in_(in_features), out_(out_features) {
  LOOM_CHECK(in_features >= 0 && out_features >= 0,
             "[Linear] in_features and out_features must be "
             "non-negative but got ",
             in_features, " and ", out_features);
  weight_ = add_parameter("weight", empty({out_, in_}, default_dtype()));
  if (bias) bias_ = add_parameter("bias", empty({out_}, default_dtype()));
  detail::init_like_pytorch_linear(weight(), bias_ ? &parameter_at(*bias_) : nullptr, gen);
}

const Tensor& Linear::bias() const {
  static const Tensor kNone;
  return bias_ ? parameter_at(*bias_) : kNone;
}

std::string Linear::name() const {
  return loom::detail::str_cat("Linear(", in_, " -> ", out_, bias_ ? "" : ", bias=false", ")");
}

Tensor Linear::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  LOOM_CHECK(input.dim() >= 1, "[", name(), "] expected an input with at least 1 dimension (..., ",
             in_, ") but got a 0-D tensor");
  LOOM_CHECK(input.size(-1) == in_, "[", name(), "] input has ", input.size(-1),
             " features in its last dimension, expected ", in_, " (input shape ", input.shape_str(),
             ")");
  detail::check_input_dtype(*this, input, weight());
  return linear(input, weight(),
                bias_ ? std::optional<Tensor>(parameter_at(*bias_)) : std::nullopt);
}

}  // namespace loom::nn
