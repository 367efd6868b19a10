#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

#include "loom/dtype.h"
#include "loom/error.h"
#include "loom/generator.h"
#include "loom/scalar.h"

namespace loom {
namespace {

TEST(DType, PromotionTableMatchesPyTorch) {
  // Spot checks from torch.promote_types, plus the table's algebraic properties.
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBFloat16, kInt64), kBFloat16);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kUInt8, kBool), kUInt8);
  EXPECT_EQ(promote_types(kInt16, kUInt8), kInt16);
  for (int i = 0; i < kNumDTypes; ++i) {
    for (int j = 0; j < kNumDTypes; ++j) {
      auto a = static_cast<DType>(i), b = static_cast<DType>(j);
      EXPECT_EQ(promote_types(a, b), promote_types(b, a)) << a << " " << b;
      EXPECT_EQ(promote_types(a, a), a);
      DType p = promote_types(a, b);
      // The result holds both: promoting again changes nothing.
      EXPECT_EQ(promote_types(p, a), p);
      EXPECT_EQ(promote_types(p, b), p);
      if (is_floating(a) || is_floating(b)) {
        EXPECT_TRUE(is_floating(p)) << a << " " << b;
      }
    }
  }
}

TEST(DType, NamesParseAndPrint) {
  for (int i = 0; i < kNumDTypes; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("f32"), kFloat32);
  EXPECT_THROW(parse_dtype("float128"), ValueError);
}

#if defined(__F16C__)
TEST(Half, MatchesHardwareConversionExhaustively) {
  // F16C's conversions are the independent reference (round to nearest even).
  for (uint32_t h = 0; h < 65536; ++h) {
    float ref = _cvtsh_ss(static_cast<unsigned short>(h));
    float got = Half::to_float(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::memcmp(&ref, &got, 4), 0) << "half bits " << h;
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    uint16_t ref = _cvtss_sh(f, 0);
    uint16_t got = Half::from_float(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00, 0x7c00);
      ASSERT_NE(got & 0x3ff, 0);
    } else {
      ASSERT_EQ(got, ref) << "float bits " << u;
    }
  }
}
#endif

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16::from_float(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(BFloat16::from_float(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(BFloat16::from_float(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16::to_float(BFloat16::from_float(NAN))));
  EXPECT_EQ(BFloat16::to_float(BFloat16::from_float(-2.5f)), -2.5f);
}

TEST(Scalar, KindsAndDefaultTypes) {
  EXPECT_TRUE(Scalar(3).is_integral());
  EXPECT_TRUE(Scalar(2.5).is_floating());
  EXPECT_TRUE(Scalar(true).is_bool());
  EXPECT_EQ(Scalar(3).dtype(), kInt64);
  EXPECT_EQ(Scalar(2.5).dtype(), kFloat32);
  EXPECT_EQ(Scalar(2.5).to<int32_t>(), 2);
  EXPECT_EQ(Scalar(7).to<double>(), 7.0);
}

TEST(Philox, KnownAnswerVectors) {
  // Random123's known-answer tests for philox4x32-10.
  auto a = philox4x32(0, 0, 0);
  EXPECT_EQ(a[0], 0x6627e8d5u);
  EXPECT_EQ(a[1], 0xe169c58du);
  EXPECT_EQ(a[2], 0xbc57ac4cu);
  EXPECT_EQ(a[3], 0x9b00dbd8u);
  auto b = philox4x32(~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0});
  EXPECT_EQ(b[0], 0x408f276du);
  EXPECT_EQ(b[1], 0x41c83b0eu);
  EXPECT_EQ(b[2], 0xa20bc7c6u);
  EXPECT_EQ(b[3], 0x6d5451fdu);
  auto c = philox4x32(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(c[0], 0xd16cfe09u);
  EXPECT_EQ(c[1], 0x94fdccebu);
  EXPECT_EQ(c[2], 0x5001e420u);
  EXPECT_EQ(c[3], 0x24126ea1u);
}

TEST(Philox, GeneratorStateSavesAndRestores) {
  Generator g(123);
  GeneratorState s0 = g.state();
  GeneratorState r1 = g.reserve(10);  // 10 draws -> 3 blocks
  EXPECT_EQ(r1, s0);
  EXPECT_EQ(g.state().offset, 3u);
  g.set_state(s0);
  EXPECT_EQ(g.reserve(10), r1);
  g.manual_seed(5);
  EXPECT_EQ(g.state(), (GeneratorState{5, 0}));
}

}  // namespace
}  // namespace loom
