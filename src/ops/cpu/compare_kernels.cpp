// CPU kernels of allclose and equal: they compare values, element by element, in parallel.
#include <atomic>
#include <cmath>

#include "ops/op_call.h"
#include "ops/tensor_iterator.h"

namespace loom {
namespace {

void check_pair(const char* op, const Tensor& self, const Tensor& other) {
  check_defined(self, op, "self");
  check_defined(other, op, "other");
  LOOM_CHECK_TYPE(self.dtype() == other.dtype(), "[", op,
                  "] expected both tensors to have the "
                  "same dtype but got ",
                  self.dtype(), " and ", other.dtype());
  LOOM_CHECK(self.device() == other.device(), "[", op,
             "] expected both tensors on one device but "
             "got ",
             self.device(), " and ", other.device());
}

// Runs pred(a, b) over the broadcast of self and other (same dtype); true when it holds everywhere.
// Chunks stop early once any chunk has found a mismatch.
template <class Pred>
bool all_pairs(const char* op, const Tensor& self, const Tensor& other, const Pred& pred) {
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.inputs = {self, other};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  TensorIterator it(std::move(cfg));
  std::atomic<bool> ok{true};
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] {
    using M = opmath_t<scalar_t>;
    it.for_each([&](char** data, const int64_t* strides, int64_t n) {
      if (!ok.load(std::memory_order_relaxed)) return;
      for (int64_t i = 0; i < n; ++i) {
        const M a = static_cast<M>(*reinterpret_cast<const scalar_t*>(data[0] + i * strides[0]));
        const M b = static_cast<M>(*reinterpret_cast<const scalar_t*>(data[1] + i * strides[1]));
        if (!pred(a, b)) {
          ok.store(false, std::memory_order_relaxed);
          return;
        }
      }
    });
  });
  return ok.load();
}

// isclose as PyTorch: equal values (including equal infinities) are close; NaNs only with
// equal_nan; otherwise |a - b| <= atol + rtol * |b| on finite values.
bool allclose_kernel(const Tensor& self, const Tensor& other, double rtol, double atol,
                     bool equal_nan) {
  check_pair("allclose", self, other);
  LOOM_CHECK(rtol >= 0, "[allclose] rtol must be greater than or equal to zero but got ", rtol);
  LOOM_CHECK(atol >= 0, "[allclose] atol must be greater than or equal to zero but got ", atol);
  return all_pairs("allclose", self, other, [=](auto a, auto b) {
    const double x = static_cast<double>(a), y = static_cast<double>(b);
    if (x == y) return true;
    if (std::isnan(x) || std::isnan(y)) return equal_nan && std::isnan(x) && std::isnan(y);
    if (!std::isfinite(x) || !std::isfinite(y)) return false;
    return std::abs(x - y) <= atol + rtol * std::abs(y);
  });
}

bool equal_kernel(const Tensor& self, const Tensor& other) {
  check_pair("equal", self, other);
  if (self.sizes() != other.sizes()) return false;
  if (self.is_same(other) && !is_floating(self.dtype())) return true;
  return all_pairs("equal", self, other, [](auto a, auto b) { return a == b; });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("allclose", allclose_kernel);
  m.impl("equal", equal_kernel);
}

}  // namespace loom
