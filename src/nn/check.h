// Input checks shared by the modules' forward(): messages start with the module's name().
#pragma once

#include "loom/autocast.h"
#include "loom/error.h"
#include "loom/nn.h"

namespace loom::nn::detail {

inline void check_defined_input(const Module& m, const Tensor& input) {
  LOOM_CHECK(input.defined(), "[", m.name(), "] input is an undefined tensor");
}

// The input must have the parameters' dtype (no implicit promotion, as in PyTorch), unless
// autocast is on for its device: the operators then cast both (Note [Autocast]).
inline void check_input_dtype(const Module& m, const Tensor& input, const Tensor& param) {
  if (autocast_enabled(input.device().type())) return;
  LOOM_CHECK_TYPE(input.dtype() == param.dtype(), "[", m.name(), "] input dtype ",
                  dtype_name(input.dtype()), " does not match the module's parameter dtype ",
                  dtype_name(param.dtype()), "; convert the input with .to(",
                  dtype_name(param.dtype()), ") or the module with .to(", dtype_name(input.dtype()),
                  ")");
}

// A (C, H, W) or (N, C, H, W) input.
inline void check_image_input(const Module& m, const Tensor& input) {
  check_defined_input(m, input);
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "[", m.name(),
             "] expected a 3-D (C, H, W) or 4-D (N, C, H, W) input but got shape ",
             input.shape_str());
}

}  // namespace loom::nn::detail
