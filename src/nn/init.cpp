// Parameter initialisers (torch.nn.init). Random fills draw in float32 (float64 for float64
// tensors) and cast, so a reduced-precision tensor gets the rounded float32 values of the same
// draws.
#include "loom/nn/init.h"

#include <cmath>
#include <string>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::nn::init {
namespace {

std::optional<Generator> gen_of(Generator* gen) {
  return gen ? std::optional<Generator>(*gen) : std::nullopt;
}

void check_floating_target(const Tensor& t, const char* op) {
  LOOM_CHECK(t.defined(), "[nn.init.", op, "] got an undefined tensor");
  LOOM_CHECK_TYPE(t.is_floating_point(), "[nn.init.", op,
                  "] expected a floating-point tensor but got ", dtype_name(t.dtype()));
}

DType draw_dtype(const Tensor& t) {
  return t.dtype() == kFloat64 ? kFloat64 : kFloat32;
}

int64_t fan_for(const Tensor& t, std::string_view mode, const char* op) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (mode == "fan_in") return fan_in;
  if (mode == "fan_out") return fan_out;
  LOOM_THROW(ValueError, "[nn.init.", op, "] mode ", std::string(mode),
             " not supported, please use one of fan_in, fan_out");
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  LOOM_CHECK(t.defined(), "[nn.init.calculate_fan_in_and_fan_out] got an undefined tensor");
  LOOM_CHECK(t.dim() >= 2,
             "[nn.init.calculate_fan_in_and_fan_out] fan in and fan out can not be "
             "computed for a tensor with fewer than 2 dimensions (shape ",
             t.shape_str(), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(std::string_view nl, std::optional<double> param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" ||
      nl == "conv_transpose1d" || nl == "conv_transpose2d" || nl == "conv_transpose3d" ||
      nl == "sigmoid") {
    return 1.0;
  }
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nl == "selu") return 3.0 / 4.0;
  LOOM_THROW(ValueError, "[nn.init.calculate_gain] unsupported nonlinearity ", std::string(nl),
             " (expected linear, conv1d, conv2d, conv3d, sigmoid, tanh, relu, leaky_relu or selu)");
}

const Tensor& uniform_(const Tensor& t, double a, double b, Generator* gen) {
  check_floating_target(t, "uniform_");
  LOOM_CHECK(a <= b, "[nn.init.uniform_] expected a <= b but got a=", a, " b=", b);
  autograd::NoGradGuard no_grad;
  Tensor r = rand(t.sizes(), draw_dtype(t), gen_of(gen));
  add_(mul_(r, b - a), a);
  t.copy_(r);
  return t;
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* gen) {
  check_floating_target(t, "normal_");
  LOOM_CHECK(std >= 0, "[nn.init.normal_] expected std >= 0 but got ", std);
  autograd::NoGradGuard no_grad;
  Tensor r = randn(t.sizes(), draw_dtype(t), gen_of(gen));
  add_(mul_(r, std), mean);
  t.copy_(r);
  return t;
}

const Tensor& constant_(const Tensor& t, double value) {
  LOOM_CHECK(t.defined(), "[nn.init.constant_] got an undefined tensor");
  autograd::NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
const Tensor& zeros_(const Tensor& t) {
  return constant_(t, 0.0);
}
const Tensor& ones_(const Tensor& t) {
  return constant_(t, 1.0);
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, std::string_view mode,
                               std::string_view nonlinearity, Generator* gen) {
  check_floating_target(t, "kaiming_uniform_");
  if (t.numel() == 0) return t;
  const double sd = calculate_gain(nonlinearity, a) /
                    std::sqrt(static_cast<double>(fan_for(t, mode, "kaiming_uniform_")));
  const double bound = std::sqrt(3.0) * sd;
  return uniform_(t, -bound, bound, gen);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, std::string_view mode,
                              std::string_view nonlinearity, Generator* gen) {
  check_floating_target(t, "kaiming_normal_");
  if (t.numel() == 0) return t;
  const double sd = calculate_gain(nonlinearity, a) /
                    std::sqrt(static_cast<double>(fan_for(t, mode, "kaiming_normal_")));
  return normal_(t, 0.0, sd, gen);
}

const Tensor& xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  check_floating_target(t, "xavier_uniform_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double sd = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double bound = std::sqrt(3.0) * sd;
  return uniform_(t, -bound, bound, gen);
}

const Tensor& xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  check_floating_target(t, "xavier_normal_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double sd = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(t, 0.0, sd, gen);
}

}  // namespace loom::nn::init
