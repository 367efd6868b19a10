// reduce_into for every dtype and op against plain loops: integer wrap-around without undefined
// behaviour (the sanitizer builds check that), bool as or/and, NaN propagation for float MIN/MAX,
// f16/bf16 through float, and AVG refused as an internal error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/reduce_reference.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::check_reduced;
using loom::testing::make_input;
using loom::testing::op_label;

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};

TEST(ReduceKernels, EveryDtypeAndOpMatchesPlainLoops) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dt = static_cast<DType>(d);
    for (ReduceOp op : kOps) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{1000}}) {
        // Fold three "ranks" into rank 0's buffer, as an algorithm would.
        std::vector<char> acc = make_input(dt, 0, n, op);
        for (int r = 1; r < 3; ++r) {
          std::vector<char> in = make_input(dt, r, n, op);
          reduce_into(acc.data(), in.data(), n, dt, op);
        }
        EXPECT_EQ(check_reduced(dt, acc.data(), 3, n, op), "")
            << dtype_name(dt) << " " << op_label(op) << " n=" << n;
      }
    }
  }
}

TEST(ReduceKernels, IntegersWrapLikeUnsigned) {
  int32_t a[2] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  int32_t b[2] = {1, -1};
  reduce_into(a, b, 2, kInt32, ReduceOp::Sum);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], std::numeric_limits<int32_t>::max());
  int16_t c[1] = {-32768}, e[1] = {-1};
  reduce_into(c, e, 1, kInt16, ReduceOp::Prod);  // 32768 wraps to -32768
  EXPECT_EQ(c[0], -32768);
  int64_t h[1] = {std::numeric_limits<int64_t>::max()}, k[1] = {2};
  reduce_into(h, k, 1, kInt64, ReduceOp::Prod);
  EXPECT_EQ(h[0], -2);
  uint8_t m[1] = {200}, q[1] = {100};
  reduce_into(m, q, 1, kUInt8, ReduceOp::Sum);
  EXPECT_EQ(m[0], 44);
}

TEST(ReduceKernels, BoolIsOrAndAnd) {
  bool x[4] = {false, false, true, true}, y[4] = {false, true, false, true};
  const bool want_or[4] = {false, true, true, true}, want_and[4] = {false, false, false, true};
  for (ReduceOp op : kOps) {
    bool d[4] = {x[0], x[1], x[2], x[3]};
    reduce_into(d, y, 4, kBool, op);
    const bool* want = (op == ReduceOp::Sum || op == ReduceOp::Max) ? want_or : want_and;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(d[i], want[i]) << op_label(op) << " " << i;
  }
}

TEST(ReduceKernels, FloatMinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    float d[3] = {nan, 1.0f, 2.0f}, s[3] = {1.0f, nan, 3.0f};
    reduce_into(d, s, 3, kFloat32, op);
    EXPECT_TRUE(std::isnan(d[0]));
    EXPECT_TRUE(std::isnan(d[1]));
    EXPECT_EQ(d[2], op == ReduceOp::Min ? 2.0f : 3.0f);
    Half hd[2] = {Half(nan), Half(1.0f)}, hs[2] = {Half(1.0f), Half(-4.0f)};
    reduce_into(hd, hs, 2, kFloat16, op);
    EXPECT_TRUE(std::isnan(static_cast<float>(hd[0])));
    EXPECT_EQ(static_cast<float>(hd[1]), op == ReduceOp::Min ? -4.0f : 1.0f);
  }
}

TEST(ReduceKernels, ReducedFloatsSumThroughFloat) {
  BFloat16 d[2] = {BFloat16(1.5f), BFloat16(-2.0f)}, s[2] = {BFloat16(0.25f), BFloat16(0.5f)};
  reduce_into(d, s, 2, kBFloat16, ReduceOp::Sum);
  EXPECT_EQ(static_cast<float>(d[0]), 1.75f);
  EXPECT_EQ(static_cast<float>(d[1]), -1.5f);
  Half e[1] = {Half(3.0f)}, f[1] = {Half(0.5f)};
  reduce_into(e, f, 1, kFloat16, ReduceOp::Prod);
  EXPECT_EQ(static_cast<float>(e[0]), 1.5f);
}

TEST(ReduceKernels, AvgIsAnInternalError) {
  float d[1] = {1}, s[1] = {2};
  EXPECT_THROW(reduce_into(d, s, 1, kFloat32, ReduceOp::Avg), InternalError);
}

}  // namespace
}  // namespace loom::dist
