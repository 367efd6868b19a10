// Helpers shared by the nn and optim tests.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "loom/ops.h"
#include "test_errors.h"

namespace loom::testing {

inline std::vector<double> values(const Tensor& t) {
  return to_vector<double>(t);
}

inline Tensor f64(std::vector<double> v, std::vector<int64_t> shape) {
  return from_vector<double>(v, shape);
}

}  // namespace loom::testing
