// conv2d, max_pool2d(_with_indices) and avg_pool2d against direct float64 loops (no im2col), plus
// error tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op_table.h"

namespace loom::testing {
namespace {

struct Conv2dArgs {
  std::vector<int64_t> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

// Direct convolution: out[n, o, y, x] = bias[o] + sum over the group's channels and taps.
Ref ref_conv2d(const Ref& input, const Ref& w, const Ref* bias, const Conv2dArgs& a) {
  const bool batched = input.dim() == 4;
  Ref x = input;
  if (!batched) x.shape.insert(x.shape.begin(), 1);
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3];
  const int64_t Og = O / a.groups;
  const int64_t Ho = (H + 2 * a.padding[0] - a.dilation[0] * (KH - 1) - 1) / a.stride[0] + 1;
  const int64_t Wo = (W + 2 * a.padding[1] - a.dilation[1] * (KW - 1) - 1) / a.stride[1] + 1;
  Ref out = Ref::filled({N, O, Ho, Wo}, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < Ho; ++y)
        for (int64_t xo = 0; xo < Wo; ++xo) {
          double s = bias ? bias->v[static_cast<size_t>(o)] : 0.0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t ih = y * a.stride[0] - a.padding[0] + i * a.dilation[0];
                const int64_t iw = xo * a.stride[1] - a.padding[1] + j * a.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += x.v[static_cast<size_t>(((n * C + g * Cg + c) * H + ih) * W + iw)] *
                     w.v[static_cast<size_t>(((o * Cg + c) * KH + i) * KW + j)];
              }
          out.v[static_cast<size_t>(((n * O + o) * Ho + y) * Wo + xo)] = s;
        }
  if (!batched) out.shape.erase(out.shape.begin());
  return out;
}

OpCase conv_case(const std::string& name, std::vector<std::vector<int64_t>> shapes, Conv2dArgs a) {
  OpCase c;
  c.name = name;
  c.shapes = std::move(shapes);
  c.atol = 1e-5;
  c.run = [a](const std::vector<Tensor>& in) {
    std::optional<Tensor> bias;
    if (in.size() > 2) bias = in[2];
    return one(conv2d(in[0], in[1], bias, a.stride, a.padding, a.dilation, a.groups));
  };
  c.ref = [a](const std::vector<Ref>& in) {
    return one(ref_conv2d(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, a));
  };
  return c;
}

struct PoolArgs {
  std::vector<int64_t> kernel, stride, padding = {0, 0}, dilation = {1, 1};
  bool ceil_mode = false, count_include_pad = true;
};

// PyTorch's output size: floor or ceil of the window count, dropping a last window that would
// start inside the right padding.
int64_t ref_pool_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Returns {values, flat indices} for max, {values} for avg.
std::vector<Ref> ref_pool(const Ref& input, const PoolArgs& a, bool is_max) {
  const bool batched = input.dim() == 4;
  Ref x = input;
  if (!batched) x.shape.insert(x.shape.begin(), 1);
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const std::vector<int64_t> st = a.stride.empty() ? a.kernel : a.stride;
  const int64_t Ho = ref_pool_size(H, a.kernel[0], st[0], a.padding[0], a.dilation[0], a.ceil_mode);
  const int64_t Wo = ref_pool_size(W, a.kernel[1], st[1], a.padding[1], a.dilation[1], a.ceil_mode);
  Ref out = Ref::filled({N, C, Ho, Wo}, 0), ind = Ref::filled({N, C, Ho, Wo}, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < Ho; ++y)
        for (int64_t xo = 0; xo < Wo; ++xo) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t best_i = -1, valid = 0, in_padded = 0;
          for (int64_t i = 0; i < a.kernel[0]; ++i)
            for (int64_t j = 0; j < a.kernel[1]; ++j) {
              const int64_t ih = y * st[0] - a.padding[0] + i * a.dilation[0];
              const int64_t iw = xo * st[1] - a.padding[1] + j * a.dilation[1];
              if (ih < H + a.padding[0] && iw < W + a.padding[1]) ++in_padded;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = x.at({n, c, ih, iw});
              ++valid;
              sum += v;
              if (best_i < 0 || v > best || std::isnan(v)) {
                best = v;
                best_i = ih * W + iw;
              }
            }
          if (is_max) {
            out.at({n, c, y, xo}) = best;
            ind.at({n, c, y, xo}) = static_cast<double>(best_i);
          } else {
            out.at({n, c, y, xo}) =
                sum / static_cast<double>(a.count_include_pad ? in_padded : valid);
          }
        }
  if (!batched) {
    out.shape.erase(out.shape.begin());
    ind.shape.erase(ind.shape.begin());
  }
  if (is_max) return {out, ind};
  return {out};
}

OpCase max_pool_case(const std::string& name, std::vector<int64_t> shape, PoolArgs a,
                     bool with_indices = true) {
  OpCase c;
  c.name = name;
  c.shapes = {std::move(shape)};
  c.run = [a, with_indices](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    if (!with_indices) {
      return {max_pool2d(in[0], a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode)};
    }
    auto [v, i] =
        max_pool2d_with_indices(in[0], a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode);
    return {v, i};
  };
  c.ref = [a, with_indices](const std::vector<Ref>& in) {
    std::vector<Ref> r = ref_pool(in[0], a, true);
    if (!with_indices) r.pop_back();
    return r;
  };
  c.exact_outputs = {1};
  return c;
}

OpCase avg_pool_case(const std::string& name, std::vector<int64_t> shape, PoolArgs a) {
  OpCase c;
  c.name = name;
  c.shapes = {std::move(shape)};
  c.run = [a](const std::vector<Tensor>& in) {
    return one(avg_pool2d(in[0], a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad));
  };
  c.ref = [a](const std::vector<Ref>& in) { return ref_pool(in[0], a, false); };
  return c;
}

OpCase with_dtypes(OpCase c, std::vector<DType> dtypes, bool integer_values = false) {
  c.dtypes = std::move(dtypes);
  c.integer_values = integer_values;
  return c;
}

const RegisterOpCases kConvCases({
    conv_case("conv2d/basic_bias", {{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, {}),
    conv_case("conv2d/stride_padding", {{2, 3, 8, 7}, {4, 3, 3, 2}}, {{2, 1}, {1, 2}, {1, 1}, 1}),
    conv_case("conv2d/dilation", {{1, 2, 9, 9}, {3, 2, 3, 2}, {3}}, {{1, 2}, {1, 0}, {2, 3}, 1}),
    conv_case("conv2d/groups", {{2, 4, 6, 6}, {6, 2, 3, 3}, {6}}, {{1, 1}, {1, 1}, {1, 1}, 2}),
    conv_case("conv2d/depthwise", {{2, 3, 5, 5}, {6, 1, 3, 3}}, {{2, 2}, {1, 1}, {1, 1}, 3}),
    // One image with a 1x1 kernel reads the input directly (no im2col).
    conv_case("conv2d/pointwise_single_image", {{1, 5, 4, 6}, {3, 5, 1, 1}, {3}}, {}),
    conv_case("conv2d/pointwise_batch", {{3, 5, 4, 6}, {3, 5, 1, 1}}, {}),
    conv_case("conv2d/single_image", {{1, 3, 6, 6}, {2, 3, 3, 3}, {2}},
              {{1, 1}, {1, 1}, {1, 1}, 1}),
    conv_case("conv2d/unbatched", {{3, 6, 5}, {4, 3, 2, 2}, {4}}, {}),
    conv_case("conv2d/wide_kernel", {{2, 4, 30, 30}, {3, 4, 5, 5}, {3}},
              {{1, 1}, {2, 2}, {1, 1}, 1}),
    conv_case("conv2d/kernel_equals_input", {{2, 2, 3, 3}, {4, 2, 3, 3}}, {}),
    conv_case("conv2d/zero_batch", {{0, 3, 5, 5}, {4, 3, 3, 3}, {4}}, {}),
    with_dtypes(conv_case("conv2d/reduced_float", {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}},
                          {{1, 1}, {1, 1}, {1, 1}, 1}),
                {kFloat16, kBFloat16}),
    max_pool_case("max_pool2d/basic", {2, 3, 6, 6}, {{2, 2}, {}}),
    max_pool_case("max_pool2d/stride_padding", {2, 2, 7, 7}, {{3, 3}, {2, 2}, {1, 1}}),
    max_pool_case("max_pool2d/ceil_mode", {1, 2, 6, 7}, {{3, 2}, {2, 2}, {1, 0}, {1, 1}, true}),
    max_pool_case("max_pool2d/dilation", {1, 2, 9, 8}, {{3, 2}, {1, 2}, {1, 1}, {2, 2}, true}),
    max_pool_case("max_pool2d/unbatched", {3, 5, 5}, {{2, 2}, {1, 1}}),
    max_pool_case("max_pool2d/zero_batch", {0, 2, 4, 4}, {{2, 2}, {}}),
    max_pool_case("max_pool2d/values_only", {2, 2, 7, 7}, {{3, 3}, {2, 2}, {1, 1}}, false),
    // Integer inputs have ties: the first maximum in scan order wins.
    with_dtypes(max_pool_case("max_pool2d/int_ties", {2, 2, 6, 6}, {{3, 3}, {1, 1}, {1, 1}}),
                {kInt64, kInt32}, true),
    with_dtypes(max_pool_case("max_pool2d/reduced_float", {1, 2, 6, 6}, {{2, 2}, {}}),
                {kFloat16, kBFloat16}),
    avg_pool_case("avg_pool2d/basic", {2, 3, 6, 6}, {{2, 2}, {}}),
    avg_pool_case("avg_pool2d/padding_included", {2, 2, 7, 7}, {{3, 3}, {2, 2}, {1, 1}}),
    avg_pool_case("avg_pool2d/padding_excluded", {2, 2, 7, 7},
                  {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false}),
    avg_pool_case("avg_pool2d/ceil_included", {1, 2, 6, 7}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}),
    avg_pool_case("avg_pool2d/ceil_excluded", {1, 2, 6, 7},
                  {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false}),
    avg_pool_case("avg_pool2d/unbatched", {3, 5, 4}, {{2, 3}, {1, 1}}),
    avg_pool_case("avg_pool2d/zero_batch", {0, 2, 4, 4}, {{2, 2}, {}}),
    with_dtypes(avg_pool_case("avg_pool2d/reduced_float", {1, 2, 6, 6}, {{2, 2}, {}}),
                {kFloat16, kBFloat16}),
});

TEST(Conv2d, WeightMustBe4D) {
  std::string m = error_of<ValueError>([] { conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3})); });
  EXPECT_CONTAINS(m, "[conv2d] expected weight to have 4 dimensions, got 3");
}

TEST(Conv2d, ChannelMismatchNamesGroupsAndShapes) {
  std::string m = error_of<ValueError>([] {
    conv2d(zeros({2, 3, 6, 6}), zeros({6, 2, 3, 3}), std::nullopt, 1, 0, 1, 2);
  });
  EXPECT_CONTAINS(m, "[conv2d]");
  EXPECT_CONTAINS(m, "groups=2");
  EXPECT_CONTAINS(m, "[6, 2, 3, 3]");
  EXPECT_CONTAINS(m, "[2, 3, 6, 6]");
  EXPECT_CONTAINS(m, "4 channels");
  m = error_of<ValueError>([] {
    conv2d(zeros({2, 4, 6, 6}), zeros({5, 2, 3, 3}), std::nullopt, 1, 0, 1, 2);
  });
  EXPECT_CONTAINS(m, "divisible by groups");
}

TEST(Conv2d, KernelLargerThanPaddedInput) {
  std::string m = error_of<ValueError>([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 5})); });
  EXPECT_CONTAINS(m, "[conv2d]");
  EXPECT_CONTAINS(m, "(4 x 4)");
  EXPECT_CONTAINS(m, "(5 x 5)");
  // Padding makes it fit.
  EXPECT_EQ(conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 5, 5}), std::nullopt, 1, 1).sizes().vec(),
            (std::vector<int64_t>{1, 1, 2, 2}));
}

TEST(Conv2d, OtherArgumentErrors) {
  EXPECT_THROW(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), zeros({3})), ValueError);
  EXPECT_THROW(conv2d(zeros({3, 5}), zeros({4, 3, 3, 3})), ValueError);
  EXPECT_THROW(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), std::nullopt, 0), ValueError);
  EXPECT_THROW(conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), std::nullopt, 1, -1), ValueError);
  std::string m = error_of<TypeError>([] {
    conv2d(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}, kFloat64));
  });
  EXPECT_CONTAINS(m, "float32");
  EXPECT_CONTAINS(m, "float64");
  EXPECT_THROW(conv2d(zeros({1, 3, 5, 5}, kInt64), zeros({4, 3, 3, 3}, kInt64)), TypeError);
}

void expect_conv_matches_reference(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                                   const Conv2dArgs& a) {
  Tensor x = randn(xs, kFloat64), w = randn(ws, kFloat64), b = randn({ws[0]}, kFloat64);
  Tensor got = conv2d(x, w, b, a.stride, a.padding, a.dilation, a.groups);
  Ref bias = Ref::of(b);
  Ref want = ref_conv2d(Ref::of(x), Ref::of(w), &bias, a);
  ASSERT_EQ(got.sizes().vec(), want.shape);
  std::vector<double> g = to_vector<double>(got);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want.v[i], 1e-10) << i;
}

// The images of a batch share gemms in chunks bounded by the scratch budget; 37 images of this
// size make a full chunk and a shorter last one.
TEST(Conv2d, BatchSplitIntoChunks) {
  expect_conv_matches_reference({37, 4, 60, 60}, {2, 4, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1});
}

// Images whose columns alone exceed the budget get one gemm each, written straight into the output.
TEST(Conv2d, LargeImagesGetOneGemmEach) {
  expect_conv_matches_reference({2, 1, 700, 700}, {2, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1});
}

TEST(Pool2d, Errors) {
  std::string m = error_of<ValueError>([] { max_pool2d(zeros({1, 1, 1, 1}), {2, 2}); });
  EXPECT_CONTAINS(m, "[max_pool2d]");
  EXPECT_CONTAINS(m, "too small");
  m = error_of<ValueError>([] { max_pool2d(zeros({1, 1, 6, 6}), {2, 2}, {}, {2, 2}); });
  EXPECT_CONTAINS(m, "half");
  EXPECT_THROW(avg_pool2d(zeros({1, 1, 6, 6}), {3, 3}, {}, {2, 2}), ValueError);
  EXPECT_THROW(max_pool2d(zeros({1, 1, 6, 6}), {0, 2}), ValueError);
  EXPECT_THROW(max_pool2d(zeros({6, 6}), {2, 2}), ValueError);
  EXPECT_THROW(avg_pool2d(zeros({1, 0, 6, 6}), {2, 2}), ValueError);
  EXPECT_THROW(max_pool2d(zeros({1, 1, 4, 4}, kBool), {2, 2}), TypeError);
}

TEST(Pool2d, MaxPropagatesNaNAndIndicesAreInt64) {
  Tensor x = from_vector<float>({1, std::numeric_limits<float>::quiet_NaN(), 3, 4}, {1, 1, 2, 2});
  auto [v, i] = max_pool2d_with_indices(x, {2, 2});
  EXPECT_TRUE(std::isnan(to_vector<float>(v)[0]));
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(to_vector<int64_t>(i), (std::vector<int64_t>{1}));
}

TEST(Pool2d, SingleValueArguments) {
  // kernel_size {2} means 2x2, like PyTorch's int or 1-tuple.
  Tensor x = arange(16, kFloat32).view({1, 1, 4, 4});
  EXPECT_EQ(to_vector<float>(max_pool2d(x, {2})), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(to_vector<float>(avg_pool2d(x, {2})), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
}

}  // namespace
}  // namespace loom::testing
