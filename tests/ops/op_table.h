// The table-driven operator test. A new operator joins by adding one OpCase (in the test file of
// its family) with a function that runs loom and an independent float64 reference (reference.h).
// The runner checks every case for each listed dtype on contiguous inputs, on non-contiguous inputs
// with the same values, and on Meta inputs (shapes and dtypes must match the CPU result).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "loom/ops.h"
#include "ops/reference.h"
#include "test_errors.h"

namespace loom::testing {

struct OpCase {
  std::string name;                          // unique: "add/broadcast"
  std::vector<std::vector<int64_t>> shapes;  // one per input
  std::vector<DType> dtypes = {kFloat32, kFloat64};
  double lo = -2.0, hi = 2.0;   // input values are uniform in [lo, hi]
  bool integer_values = false;  // round the inputs to integers
  // Builds the inputs for one dtype instead of the random ones (e.g. index tensors). Optional.
  std::function<std::vector<Tensor>(DType)> make_inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;
  std::function<std::vector<Ref>(const std::vector<Ref>&)> ref;
  double rtol = 1e-5, atol = 1e-6;            // for float32; float64 uses 1e-9 / 1e-10
  double rtol_half = 2e-2, atol_half = 2e-2;  // for float16 / bfloat16
  bool noncontiguous = true;
  bool meta = true;
  // Output indices that are compared exactly (integer outputs such as argmax indices).
  std::vector<size_t> exact_outputs;
};

// Registers cases at static-initialisation time: static RegisterOpCases r({...});
std::vector<OpCase>& op_cases();
struct RegisterOpCases {
  explicit RegisterOpCases(std::vector<OpCase> cases) {
    for (auto& c : cases) op_cases().push_back(std::move(c));
  }
};

// Helpers for cases.
inline std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}
inline std::vector<Ref> one(Ref r) {
  return {std::move(r)};
}
// Shorthand for a unary elementwise case.
OpCase unary_case(const std::string& name, std::function<Tensor(const Tensor&)> op,
                  std::function<double(double)> ref, double lo = -2, double hi = 2,
                  std::vector<int64_t> shape = {3, 5});
// Shorthand for a binary broadcasting case.
OpCase binary_case(const std::string& name, std::function<Tensor(const Tensor&, const Tensor&)> op,
                   std::function<double(double, double)> ref, std::vector<int64_t> a = {4, 1, 3},
                   std::vector<int64_t> b = {5, 3}, double lo = -2, double hi = 2);

// A strided (non-contiguous) tensor with the same values as t.
Tensor noncontiguous_copy(const Tensor& t);

// The inputs of case c for dtype dt (random ones from seed unless c.make_inputs), on the CPU.
std::vector<Tensor> random_inputs(const OpCase& c, DType dt, uint32_t seed);
// Asserts that `got` matches the reference within c's tolerances for dt (variant names the run).
void compare(const OpCase& c, const std::vector<Tensor>& got, const std::vector<Ref>& want,
             DType dt, const std::string& variant);

}  // namespace loom::testing
