// The CUDA random kernels' counter -> number mapping (src/ops/cuda/philox.h), compiled here by the
// host compiler and checked against the core generator and the CPU factories value by value, so
// Note [Same random numbers on every device] holds on a machine without a GPU as far as the host
// can tell (the device runs the same functions; tests/cuda/cuda_pointwise_test.cpp compares the
// devices themselves).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "loom/generator.h"
#include "ops/cuda/philox.h"

namespace loom {
namespace {

namespace px = cuda_ops::philox;

TEST(PhiloxMapping, BlockEqualsCoreGenerator) {
  for (uint64_t key : {uint64_t{0}, uint64_t{42}, uint64_t{67280421310721ull}, ~uint64_t{0}}) {
    for (uint64_t c :
         {uint64_t{0}, uint64_t{1}, uint64_t{12345}, uint64_t{1} << 40, ~uint64_t{0}}) {
      const auto want = philox4x32(c, 0, key);
      const px::Block got = px::philox4x32(c, 0, key);
      for (int l = 0; l < 4; ++l) EXPECT_EQ(got.v[l], want[static_cast<size_t>(l)]) << key << c;
    }
  }
}

// Values of the host mapping for n elements from a generator state, per the CUDA kernels' layout.
std::vector<float> rand_float_mapping(GeneratorState st, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const px::Block b = px::block(st.seed, st.offset, static_cast<uint64_t>(i / 4));
    v[static_cast<size_t>(i)] = px::unit_float(b.v[i % 4]);
  }
  return v;
}

TEST(PhiloxMapping, RandFloatEqualsCpu) {
  Generator g(2024);
  g.set_state({2024, 7});  // a non-zero offset, as after earlier draws
  const GeneratorState st = g.state();
  const Tensor t = rand({1003}, kFloat32, g);
  EXPECT_EQ(to_vector<float>(t), rand_float_mapping(st, 1003));
  EXPECT_EQ(g.state().offset, st.offset + (1003 + 3) / 4);
}

TEST(PhiloxMapping, RandDoubleEqualsCpu) {
  Generator g(99);
  const GeneratorState st = g.state();
  const std::vector<double> got = to_vector<double>(rand({501}, kFloat64, g));
  for (int64_t i = 0; i < 501; ++i) {
    const px::Block b = px::block(st.seed, st.offset, static_cast<uint64_t>(i / 2));
    EXPECT_EQ(got[static_cast<size_t>(i)], px::rand_double(b, static_cast<uint64_t>(i))) << i;
  }
  EXPECT_EQ(g.state().offset, st.offset + (2 * 501 + 3) / 4);
}

TEST(PhiloxMapping, RandintEqualsCpu) {
  Generator g(5);
  const GeneratorState st = g.state();
  const std::vector<int64_t> got = to_vector<int64_t>(randint(-7, 1000, {333}, kInt64, g));
  for (int64_t i = 0; i < 333; ++i) {
    const px::Block b = px::block(st.seed, st.offset, static_cast<uint64_t>(i / 2));
    EXPECT_EQ(got[static_cast<size_t>(i)], px::randint_value(b, static_cast<uint64_t>(i), -7, 1007))
        << i;
  }
}

TEST(PhiloxMapping, RandnEqualsCpu) {
  Generator g(31337);
  const GeneratorState st = g.state();
  const std::vector<double> got = to_vector<double>(randn({257}, kFloat64, g));
  for (int64_t k = 0; k < 129; ++k) {
    double z0 = 0, z1 = 0;
    px::randn_pair(px::block(st.seed, st.offset, static_cast<uint64_t>(k)), &z0, &z1);
    EXPECT_EQ(got[static_cast<size_t>(2 * k)], z0) << k;
    if (2 * k + 1 < 257) {
      EXPECT_EQ(got[static_cast<size_t>(2 * k + 1)], z1) << k;
    }
  }
  EXPECT_EQ(g.state().offset, st.offset + 129);
}

TEST(PhiloxMapping, DropoutMaskEqualsCpu) {
  Generator g(77);
  const GeneratorState st = g.state();
  const double p = 0.3;
  const auto [out, mask] = native_dropout(ones({1001}), p, true, g);
  const std::vector<bool> m = to_vector<bool>(mask);
  const std::vector<float> draws = rand_float_mapping(st, 1001);
  const auto keep = static_cast<float>(1.0 - p);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i], draws[i] < keep) << i;
  EXPECT_EQ(g.state().offset, st.offset + (1001 + 3) / 4);
}

}  // namespace
}  // namespace loom
