// Helpers of the compiler tests: comparing compiled results with eager ones bit for bit, inputs
// that exercise the math's edges, and a kernel cache of the test's own.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "loom/config.h"
#include "loom/ops.h"
#include "temp_dir.h"

namespace loom {

// A kernel cache of the test's own, so that builds and hits are the test's.
struct FreshCache {
  FreshCache() { config::set("LOOM_CACHE_DIR", dir.path()); }
  ~FreshCache() { config::set("LOOM_CACHE_DIR", ""); }
  testing::TempDir dir{"loom-kernels"};
};

// Bit for bit, except that any NaN equals any NaN (its sign and payload are not specified).
inline void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor g = got.contiguous().to(kFloat64), w = want.contiguous().to(kFloat64);
  const Tensor gb = got.contiguous(), wb = want.contiguous();
  const size_t width = gb.element_size();
  const auto* gd = static_cast<const double*>(g.data_ptr());
  const auto* wd = static_cast<const double*>(w.data_ptr());
  const auto* gr = static_cast<const unsigned char*>(gb.data_ptr());
  const auto* wr = static_cast<const unsigned char*>(wb.data_ptr());
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (gd[i] != gd[i] && wd[i] != wd[i]) continue;
    if (std::memcmp(gr + i * width, wr + i * width, width) != 0) {
      ADD_FAILURE() << what << ": element " << i << " compiled " << gd[i] << " eager " << wd[i];
      return;
    }
  }
}

// Floats that exercise the math's edges: zeros of both signs, infinities, NaN, large and tiny.
inline Tensor edgy(IntArrayRef sizes, DType dtype = kFloat32) {
  Tensor t = mul(randn(sizes, dtype), 3.0);
  const double specials[] = {0.0,
                             -0.0,
                             1e30,
                             -1e30,
                             1e-30,
                             88.0,
                             -104.0,
                             200.0,
                             -200.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  Tensor flat = t.view({-1});
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && int64_t(i) < flat.numel(); ++i)
    flat.select(0, static_cast<int64_t>(i) * 3 % flat.numel()).fill_(specials[i]);
  return t;
}

}  // namespace loom
