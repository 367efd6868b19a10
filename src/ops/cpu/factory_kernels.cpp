// CPU kernels of the factories that write values: arange, linspace, eye, and the random ones, which
// draw from the generator's counter-based Philox stream (the shape functions never touch it).
#include <cmath>

#include "loom/generator.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

void arange_loop(const Tensor& t, const Scalar& start, const Scalar& end, const Scalar& step,
                 std::optional<DType> dtype, std::optional<Device> device) {
  const double s = start.to_double(), st = step.to_double();
  const bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType dt = t.dtype();
  const int64_t n = t.numel();
  LOOM_DISPATCH_ALL_TYPES(dt, "arange", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    if (all_int) {
      int64_t a = start.to_int(), b = step.to_int();
      for (int64_t i = 0; i < n; ++i) p[i] = convert<scalar_t>(a + i * b);
    } else {
      // One fused multiply-add, so that every compiler and device rounds the same way (a CUDA
      // kernel computes the same fma; without it, contraction depends on compiler flags).
      for (int64_t i = 0; i < n; ++i)
        p[i] = convert<scalar_t>(std::fma(static_cast<double>(i), st, s));
    }
  });
}

void linspace_loop(const Tensor& t, const Scalar& start, const Scalar& end, int64_t steps,
                   std::optional<DType> dtype, std::optional<Device> device) {
  if (steps == 0) return;
  const DType dt = t.dtype();
  double a = start.to_double(), b = end.to_double();
  double step = steps > 1 ? (b - a) / static_cast<double>(steps - 1) : 0.0;
  LOOM_DISPATCH_ALL_TYPES(dt, "linspace", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    // Like PyTorch: the first half counts up from start, the second half down from end, so both
    // ends are exact.
    const int64_t half = steps / 2;
    for (int64_t i = 0; i < steps; ++i) {
      double v = i < half ? std::fma(step, static_cast<double>(i), a)
                          : std::fma(-step, static_cast<double>(steps - 1 - i), b);
      p[i] = convert<scalar_t>(v);
    }
  });
}

void eye_loop(const Tensor& t, int64_t n, std::optional<int64_t> m, std::optional<DType> dtype,
              std::optional<Device> device) {
  const int64_t cols = m.value_or(n);
  fill_(t, 0);
  LOOM_DISPATCH_ALL_TYPES(t.dtype(), "eye", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < std::min(n, cols); ++i) p[i * cols + i] = convert<scalar_t>(1);
  });
}

Generator gen_or_default(const std::optional<Generator>& g) {
  return g ? *g : default_generator();
}

void rand_loop(const Tensor& t, IntArrayRef size, const std::optional<Generator>& gen,
               std::optional<DType> dtype, std::optional<Device> device) {
  const DType dt = t.dtype();
  const int64_t n = t.numel();
  const bool wide = dt == kFloat64;
  GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(n) * (wide ? 2 : 1));
  LOOM_DISPATCH_FLOAT_TYPES(dt, "rand", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (wide) {
        uint64_t hi = philox_draw(st, 2 * static_cast<uint64_t>(i));
        uint64_t lo = philox_draw(st, 2 * static_cast<uint64_t>(i) + 1);
        p[i] = convert<scalar_t>(uint64_to_unit_double((hi << 32) | lo));
      } else {
        p[i] = convert<scalar_t>(uint32_to_unit_float(philox_draw(st, static_cast<uint64_t>(i))));
      }
    }
  });
}

void randn_loop(const Tensor& t, IntArrayRef size, const std::optional<Generator>& gen,
                std::optional<DType> dtype, std::optional<Device> device) {
  const DType dt = t.dtype();
  const int64_t n = t.numel();
  // Box-Muller: element pair (2k, 2k+1) uses draws 4k..4k+3 (one Philox block, 2x32 bits each).
  const int64_t pairs = (n + 1) / 2;
  GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(pairs) * 4);
  LOOM_DISPATCH_FLOAT_TYPES(dt, "randn", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t k = 0; k < pairs; ++k) {
      auto block = philox4x32(st.offset + static_cast<uint64_t>(k), 0, st.seed);
      double u1 = uint64_to_unit_double((static_cast<uint64_t>(block[0]) << 32) | block[1]);
      double u2 = uint64_to_unit_double((static_cast<uint64_t>(block[2]) << 32) | block[3]);
      double r = std::sqrt(-2.0 * std::log(1.0 - u1));  // 1 - u1 is in (0, 1]
      double theta = 2.0 * M_PI * u2;
      p[2 * k] = convert<scalar_t>(r * std::cos(theta));
      if (2 * k + 1 < n) p[2 * k + 1] = convert<scalar_t>(r * std::sin(theta));
    }
  });
}

void randint_loop(const Tensor& t, int64_t low, int64_t high, IntArrayRef size,
                  const std::optional<Generator>& gen, std::optional<DType> dtype,
                  std::optional<Device> device) {
  const DType dt = t.dtype();
  const int64_t n = t.numel();
  const uint64_t range = static_cast<uint64_t>(high - low);
  GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(n) * 2);
  LOOM_DISPATCH_ALL_TYPES(dt, "randint", [&] {
    scalar_t* p = t.data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      uint64_t hi = philox_draw(st, 2 * static_cast<uint64_t>(i));
      uint64_t lo = philox_draw(st, 2 * static_cast<uint64_t>(i) + 1);
      // 64 random bits modulo a range below 2^32 has a bias under 2^-32: negligible.
      p[i] = convert<scalar_t>(low + static_cast<int64_t>(((hi << 32) | lo) % range));
    }
  });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&arange_shape, &arange_loop>::register_cpu(m, "arange");
  Structured<&linspace_shape, &linspace_loop>::register_cpu(m, "linspace");
  Structured<&eye_shape, &eye_loop>::register_cpu(m, "eye");
  Structured<&rand_shape, &rand_loop>::register_cpu(m, "rand");
  Structured<&randn_shape, &randn_loop>::register_cpu(m, "randn");
  Structured<&randint_shape, &randint_loop>::register_cpu(m, "randint");
}

}  // namespace loom
