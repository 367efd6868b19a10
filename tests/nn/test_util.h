// Helpers shared by the nn and optim tests.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "loom/ops.h"

namespace loom::testing {

// The message of the E that f() throws; "no exception" or "wrong exception type: ..." otherwise.
template <class E, class F>
std::string nn_error_of(const F& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

#define NN_EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

inline std::vector<double> values(const Tensor& t) {
  return to_vector<double>(t);
}

inline Tensor f64(std::vector<double> v, std::vector<int64_t> shape) {
  return from_vector<double>(v, shape);
}

}  // namespace loom::testing
