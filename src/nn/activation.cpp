// Parameter-free modules: ReLU, GELU, Dropout, Flatten.
#include <algorithm>

#include "nn/check.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  return relu(input);
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  LOOM_CHECK(approximate_ == "none" || approximate_ == "tanh",
             "[GELU] approximate must be \"none\" or \"tanh\" but got \"", approximate_, "\"");
}

std::string GELU::name() const {
  return approximate_ == "none" ? "GELU" : "GELU(approximate=" + approximate_ + ")";
}

Tensor GELU::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  return gelu(input, approximate_);
}

Dropout::Dropout(double p, Generator* gen)
    : p_(p), gen_(gen ? std::optional<Generator>(*gen) : std::nullopt) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0,
             "[Dropout] dropout probability has to be between 0 and 1, but got ", p);
}

std::string Dropout::name() const {
  return loom::detail::str_cat("Dropout(p=", p_, ")");
}

Tensor Dropout::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  if (!is_training() || p_ == 0.0) return input;
  return dropout(input, p_, true, gen_);
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : start_(start_dim), end_(end_dim) {}

std::string Flatten::name() const {
  return loom::detail::str_cat("Flatten(start_dim=", start_, ", end_dim=", end_, ")");
}

Tensor Flatten::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  // A 0-D input flattens like a 1-D one (torch.flatten gives a 1-element tensor).
  const int64_t rank = std::max<int64_t>(input.dim(), 1);
  LOOM_CHECK(
      start_ >= -rank && start_ < rank && end_ >= -rank && end_ < rank, "[", name(),
      "] start_dim and end_dim must be valid dimensions of the input, but the input has shape ",
      input.shape_str());
  const int64_t s = start_ < 0 ? start_ + rank : start_, e = end_ < 0 ? end_ + rank : end_;
  LOOM_CHECK(s <= e, "[", name(), "] start_dim (", s, ") comes after end_dim (", e,
             ") for input shape ", input.shape_str());
  return flatten(input, start_, end_);
}

}  // namespace loom::nn
