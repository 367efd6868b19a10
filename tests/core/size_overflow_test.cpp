// Size arithmetic (Note [checked sizes] in loom/tensor.h): element counts and byte sizes that
// overflow, and negative sizes, are ValueErrors naming the operator and the sizes, for every
// factory and on every device (Meta allocates nothing, so only the check stands between it and a
// tensor whose numel wrapped), and for views and broadcasts.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "loom/ops.h"
#include "test_errors.h"

namespace loom {
namespace {

using loom::testing::error_of;

constexpr int64_t kMax = INT64_MAX;
constexpr int64_t k2p40 = int64_t{1} << 40;
constexpr int64_t k2p62 = int64_t{1} << 62;

struct Factory {
  const char* name;  // what the message must start with, as "[name]"
  std::function<Tensor(IntArrayRef, TensorOptions)> make;
};

std::vector<Factory> factories() {
  return {
      {"empty", [](IntArrayRef s, TensorOptions o) { return empty(s, o); }},
      {"zeros", [](IntArrayRef s, TensorOptions o) { return zeros(s, o); }},
      {"ones", [](IntArrayRef s, TensorOptions o) { return ones(s, o); }},
      {"full", [](IntArrayRef s, TensorOptions o) { return full(s, 1.5, o); }},
      {"rand", [](IntArrayRef s, TensorOptions o) { return rand(s, o); }},
      {"randn", [](IntArrayRef s, TensorOptions o) { return randn(s, o); }},
      {"randint", [](IntArrayRef s, TensorOptions o) { return randint(0, 5, s, o); }},
      {"empty_strided",
       [](IntArrayRef s, TensorOptions o) { return empty_strided(s, contiguous_strides(s), o); }},
  };
}

struct SizeCase {
  const char* what;
  std::vector<int64_t> sizes;
  const char* fragment;  // expected in the message
};

std::vector<SizeCase> bad_sizes() {
  return {
      {"INT64_MAX x 4", {kMax, 4}, "more elements than int64 can count"},
      {"2^40 x 2^40", {k2p40, k2p40}, "more elements than int64 can count"},
      {"2^62 float32 elements (2^64 bytes)", {k2p62}, "more than the largest allocation"},
      {"2^60 x 2 x 2 float32", {int64_t{1} << 60, 2, 2}, "more than the largest allocation"},
      {"negative", {2, -3}, "sizes must be non-negative"},
  };
}

TEST(SizeOverflow, EveryFactoryRejectsSizesWhoseCountOrBytesOverflowOnEveryDevice) {
  for (const Factory& f : factories()) {
    for (const SizeCase& c : bad_sizes()) {
      for (Device dev : {Device(kCPU), Device(kMeta)}) {
        SCOPED_TRACE(std::string(f.name) + " " + c.what + " on " + dev.str());
        const std::string msg = error_of<ValueError>(
            [&] { (void)f.make(c.sizes, TensorOptions(kFloat32).with_device(dev)); });
        EXPECT_EQ(msg.rfind(std::string("[") + f.name + "]", 0), 0u) << msg;
        EXPECT_CONTAINS(msg, c.fragment);
      }
    }
  }
}

TEST(SizeOverflow, TheMessageNamesTheSizesAndTheDtype) {
  EXPECT_EQ(error_of<ValueError>([] {
              (void)empty({kMax, 4});
            }),
            "[empty] sizes [9223372036854775807, 4] have more elements than int64 can count (the "
            "product of the sizes overflows)");
  EXPECT_CONTAINS(
      error_of<ValueError>([] { (void)randn({k2p62}, kFloat32); }),
      "[randn] sizes [4611686018427387904] of float32 need 4611686018427387904 x 4 bytes");
}

TEST(SizeOverflow, LargeButCountableSizesStillWork) {
  // Meta tensors have no memory: the sizes are all there is, and these are fine.
  Tensor m = empty({k2p40, 1024}, TensorOptions(kFloat32).with_device(kMeta));
  EXPECT_EQ(m.numel(), k2p40 * 1024);
  EXPECT_EQ(m.nbytes(), static_cast<size_t>(k2p40) * 1024 * 4);
  // A zero anywhere makes the product 0, however large the rest.
  EXPECT_EQ(empty({0, kMax, kMax}).numel(), 0);
  // On the CPU a request this size is refused by the allocator, as an OutOfMemoryError.
  EXPECT_THROW((void)empty({k2p40, 1024}), OutOfMemoryError);
}

TEST(SizeOverflow, OtherFactoriesCountTheirElementsToo) {
  EXPECT_CONTAINS(error_of<ValueError>([] { (void)eye(int64_t{1} << 32); }), "[eye]");
  EXPECT_CONTAINS(error_of<ValueError>([] { (void)linspace(0, 1, k2p62); }), "[linspace]");
  EXPECT_CONTAINS(error_of<ValueError>([] { (void)arange(0, 1e30, 1); }), "[arange]");
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    (void)empty_strided({k2p40, 2}, {k2p62, 1});  // reaches 2^102 elements
                  }),
                  "[empty_strided]");
}

TEST(SizeOverflow, ViewsAndBroadcastsCheckTheirSizes) {
  Tensor one = zeros({1, 1});
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    (void)one.expand({k2p40, k2p40});
                  }),
                  "[expand] sizes [1099511627776, 1099511627776] have more elements");
  // 2^62 x 4 wraps to 0 elements: viewing an empty tensor with it must not pass for a match.
  Tensor none = zeros({0});
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    (void)none.view({k2p62, 4});
                  }),
                  "[view] shape [4611686018427387904, 4] has more elements than int64 can count");
  EXPECT_CONTAINS(error_of<ValueError>([&] { (void)none.reshape({k2p62, 4}); }), "[reshape]");
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    (void)as_strided(one, {k2p40, k2p40}, {0, 0});
                  }),
                  "[as_strided]");
  // A broadcast of two countable Meta shapes whose result is not countable.
  const TensorOptions meta = TensorOptions(kFloat32).with_device(kMeta);
  Tensor a = empty({k2p40, 1}, meta), b = empty({1, k2p40}, meta);
  EXPECT_CONTAINS(error_of<ValueError>([&] { (void)add(a, b); }), "[add]");
  EXPECT_EQ(add(a, empty({1, 1}, meta)).numel(), k2p40);
}

TEST(SizeOverflow, CheckedHelpersAgreeWithTheirDefinition) {
  EXPECT_EQ(checked_numel({3, 4, 5}, "t"), 60);
  EXPECT_EQ(checked_numel({}, "t"), 1);
  EXPECT_EQ(checked_nbytes({3, 4}, kFloat64, "t"), 96u);
  EXPECT_EQ(checked_numel({int64_t{1} << 31, int64_t{1} << 31}, "t"), int64_t{1} << 62);
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    (void)checked_numel({int64_t{1} << 32, int64_t{1} << 31}, "t");
                  }),
                  "[t] sizes");
  EXPECT_EQ(checked_nbytes({int64_t{1} << 60, 4}, kUInt8, "t"), size_t{1} << 62);
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    (void)checked_nbytes({int64_t{1} << 60, 4}, kInt16, "t");
                  }),
                  "more than the largest allocation");
}

}  // namespace
}  // namespace loom
