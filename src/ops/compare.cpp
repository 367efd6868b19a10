// Whole-tensor comparisons that return a C++ bool: allclose and equal. They read values, so they
// have CPU kernels only (in cpu/compare_kernels.cpp); a Meta kernel explains why it cannot answer.
#include <atomic>
#include <cmath>

#include "loom/derivatives.h"
#include "op_call.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

bool allclose_meta(const Tensor&, const Tensor&, double, double, bool) {
  LOOM_THROW(NotImplementedError, "[allclose] compares values, and Meta tensors have none");
}
bool equal_meta(const Tensor&, const Tensor&) {
  LOOM_THROW(NotImplementedError, "[equal] compares values, and Meta tensors have none");
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "allclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, "
      "bool equal_nan=False) -> bool");
  m.def("equal(Tensor self, Tensor other) -> bool");
  m.impl("allclose", DispatchKey::Meta, allclose_meta);
  m.impl("equal", DispatchKey::Meta, equal_meta);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  LOOM_CALL_OP("loom::allclose", bool(const Tensor&, const Tensor&, double, double, bool), a, b,
               rtol, atol, equal_nan);
}
bool equal(const Tensor& a, const Tensor& b) {
  LOOM_CALL_OP("loom::equal", bool(const Tensor&, const Tensor&), a, b);
}

// ---- derivatives ----

LOOM_DERIVATIVES(m) {
  m.nondifferentiable("allclose");
  m.nondifferentiable("equal");
}

}  // namespace loom
