// Binary pointwise operators: table entries plus promotion, in-place, out= and error tests.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_table.h"

namespace loom::testing {
namespace {

OpCase with_dtypes(OpCase c, std::vector<DType> dtypes) {
  c.dtypes = std::move(dtypes);
  return c;
}

const RegisterOpCases kBinaryCases({
    binary_case(
        "add/broadcast", [](const Tensor& a, const Tensor& b) { return add(a, b); },
        [](double x, double y) { return x + y; }),
    binary_case(
        "add/alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
        [](double x, double y) { return x + 2.5 * y; }, {3, 4}, {3, 4}),
    binary_case(
        "add/scalar", [](const Tensor& a, const Tensor&) { return add(a, 1.5); },
        [](double x, double) { return x + 1.5; }, {2, 3}, {1}),
    binary_case(
        "sub/broadcast", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
        [](double x, double y) { return x - y; }),
    binary_case(
        "mul/broadcast", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
        [](double x, double y) { return x * y; }),
    binary_case(
        "div/broadcast", [](const Tensor& a, const Tensor& b) { return div(a, b); },
        [](double x, double y) { return x / y; }, {4, 1, 3}, {5, 3}, 0.5, 2.0),
    binary_case(
        "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
        [](double x, double y) { return std::max(x, y); }),
    binary_case(
        "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
        [](double x, double y) { return std::min(x, y); }),
    binary_case(
        "eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
        [](double x, double y) { return double(x == y); }, {4, 1, 3}, {5, 3}, -2, 2),
    binary_case(
        "lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
        [](double x, double y) { return double(x < y); }),
    binary_case(
        "ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
        [](double x, double y) { return double(x >= y); }),
    binary_case(
        "logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); },
        [](double x, double y) { return double((x != 0) != (y != 0)); }),
    binary_case(
        "add/zero_size", [](const Tensor& a, const Tensor& b) { return add(a, b); },
        [](double x, double y) { return x + y; }, {0, 3}, {1, 3}),
    binary_case(
        "ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
        [](double x, double y) { return double(x != y); }),
    binary_case(
        "le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
        [](double x, double y) { return double(x <= y); }),
    binary_case(
        "gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
        [](double x, double y) { return double(x > y); }),
    binary_case(
        "logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
        [](double x, double y) { return double((x != 0) && (y != 0)); }),
    binary_case(
        "logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
        [](double x, double y) { return double((x != 0) || (y != 0)); }),
    binary_case(
        "where/broadcast", [](const Tensor& a, const Tensor& b) { return where(gt(a, 0.5), a, b); },
        [](double x, double y) { return x > 0.5 ? x : y; }),
    with_dtypes(binary_case(
                    "add/int_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 3); },
                    [](double x, double y) { return x + 3 * y; }),
                {kInt32, kInt64, kInt16}),
    with_dtypes(binary_case(
                    "mul/int", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
                    [](double x, double y) { return x * y; }),
                {kInt32, kInt64, kInt8}),
    with_dtypes(binary_case(
                    "maximum/reduced_float",
                    [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
                    [](double x, double y) { return std::max(x, y); }),
                {kFloat16, kBFloat16}),
    with_dtypes(binary_case(
                    "sub/reduced_float", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
                    [](double x, double y) { return x - y; }),
                {kFloat16, kBFloat16}),
});

TEST(Binary, WhereBroadcasts) {
  Tensor c = from_vector<bool>({true, false, true}, {3});
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = where(c, a, 0.0);
  EXPECT_EQ(to_vector<float>(r), (std::vector<float>{1, 0, 3, 4, 0, 6}));
}

TEST(Binary, PromotionFollowsPyTorch) {
  Tensor i = from_vector<int32_t>({1, 2}, {2});
  Tensor f = from_vector<float>({1, 2}, {2});
  Tensor d0 = scalar_tensor(1.0, kFloat64);  // 0-dim float64 does not widen a float32 tensor
  EXPECT_EQ(add(i, f).dtype(), kFloat32);
  EXPECT_EQ(add(f, d0).dtype(), kFloat32);
  EXPECT_EQ(add(i, d0).dtype(), kFloat64);   // higher category from a 0-dim tensor wins
  EXPECT_EQ(add(i, 2).dtype(), kInt32);      // int scalar keeps int32
  EXPECT_EQ(add(i, 2.5).dtype(), kFloat32);  // float scalar gives the default dtype
  EXPECT_EQ(div(i, i).dtype(), kFloat32);    // true division
  EXPECT_EQ(mul(from_vector<uint8_t>({1}, {1}), from_vector<int8_t>({1}, {1})).dtype(), kInt16);
  EXPECT_EQ(lt(i, f).dtype(), kBool);
}

TEST(Binary, InPlaceAndOut) {
  Tensor a = from_vector<float>({1, 2, 3}, {3});
  uint32_t v0 = a.version();
  add_(a, from_vector<float>({1, 1, 1}, {3}));
  EXPECT_EQ(to_vector<float>(a), (std::vector<float>{2, 3, 4}));
  EXPECT_GT(a.version(), v0);
  Tensor out = empty({1});
  add_out(out, a, a);
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(to_vector<float>(out), (std::vector<float>{4, 6, 8}));
  // The result of int + float cannot be written into an int tensor in place.
  Tensor i = from_vector<int64_t>({1, 2, 3}, {3});
  EXPECT_THROW(add_(i, 0.5), TypeError);
  // In place cannot change the shape of self.
  EXPECT_THROW(add_(from_vector<float>({1}, {1}), a), ValueError);
}

TEST(Binary, BroadcastErrorNamesShapes) {
  try {
    add(zeros({2, 3}), zeros({4}));
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[add]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
}

TEST(Binary, LargeFloatOperandsUseStreamingPathCorrectly) {
  // Above the streaming threshold, with an odd length and an unaligned out= view.
  const int64_t n = (int64_t{1} << 20) + 77;
  Tensor a = rand({n}), b = rand({n});
  std::vector<float> va = to_vector<float>(a), vb = to_vector<float>(b);
  Tensor r = add(a, b, 0.5);
  Tensor big = zeros({n + 3});
  Tensor out = big.narrow(0, 3, n);  // 12 bytes past a 64-byte boundary
  sub_out(out, a, b);
  Tensor m = a.clone();
  mul_(m, b);
  std::vector<float> vr = to_vector<float>(r), vo = to_vector<float>(out), vm = to_vector<float>(m);
  for (int64_t i = 0; i < n; i += 997) {
    ASSERT_EQ(vr[static_cast<size_t>(i)],
              va[static_cast<size_t>(i)] + 0.5f * vb[static_cast<size_t>(i)]);
    ASSERT_EQ(vo[static_cast<size_t>(i)], va[static_cast<size_t>(i)] - vb[static_cast<size_t>(i)]);
    ASSERT_EQ(vm[static_cast<size_t>(i)], va[static_cast<size_t>(i)] * vb[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(vo[static_cast<size_t>(n - 1)],
            va[static_cast<size_t>(n - 1)] - vb[static_cast<size_t>(n - 1)]);
  EXPECT_EQ(to_vector<float>(big.narrow(0, 0, 3)), (std::vector<float>{0, 0, 0}));
}

TEST(Binary, BoolSubtractionIsRejected) {
  Tensor b = from_vector<bool>({true}, {1});
  EXPECT_THROW(sub(b, b), TypeError);
}

}  // namespace
}  // namespace loom::testing

namespace loom {
namespace {
// Two wrapped numbers (e.g. the base of pow(2.5, t) compared with 0.0 in its derivative) take the
// default dtype; the same-dtype fast path once read them with the wrong element size.
TEST(BinaryWrapped, TwoWrappedNumbers) {
  Tensor s = add(wrap_scalar(1.5), wrap_scalar(2.25));
  EXPECT_EQ(s.item<double>(), 3.75);
  EXPECT_FALSE(eq(wrap_scalar(2.5), wrap_scalar(0.0)).item<bool>());
  EXPECT_TRUE(eq(wrap_scalar(2.5), wrap_scalar(2.5)).item<bool>());
}
}  // namespace
}  // namespace loom
