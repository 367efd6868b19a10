// Shape functions (src/ops/shapes.h): called directly they give the sizes, strides and dtype of the
// real CPU result; Meta dispatch runs only them (huge Meta tensors cost nothing).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/memory.h"
#include "loom/ops.h"
#include "ops/shapes.h"

namespace loom {
namespace {

// The shape function's answer matches what the CPU kernel produced.
void expect_matches(const TensorMeta& m, const Tensor& real) {
  EXPECT_EQ(m.sizes.ref(), real.sizes());
  EXPECT_EQ(m.output_strides().ref(), real.strides());
  EXPECT_EQ(m.dtype, real.dtype());
}

Tensor meta(IntArrayRef sizes, DType dt = kFloat32) {
  return empty(sizes, TensorOptions(dt).with_device(kMeta));
}

TEST(ShapeFn, BinaryBroadcastsAndPromotes) {
  const BinaryTraits add_op{"add"}, div_op{"div", true}, lt_op{"lt", false, true};
  struct Case {
    Tensor a, b;
  };
  const Case cases[] = {
      {ones({4, 1, 3}), ones({5, 3})},
      {ones({2, 3}, TensorOptions(kInt32)), ones({3}, TensorOptions(kFloat64))},
      {ones({2, 3}, TensorOptions(kInt64)), ones({}, TensorOptions(kFloat32))},  // 0-dim float wins
      {ones({2, 3}, TensorOptions(kFloat16)), ones({}, TensorOptions(kFloat64))},  // dim wins
      {ones({3}, TensorOptions(kUInt8)), wrap_scalar(2.5)},  // a wrapped number: default float
      {ones({0, 3}), ones({1, 3})},
  };
  for (const Case& c : cases) {
    expect_matches(binary_shape(add_op, c.a, c.b, 1), add(c.a, c.b));
    expect_matches(binary_shape(div_op, c.a, c.b, 1), div(c.a, c.b));
    expect_matches(binary_shape(lt_op, c.a, c.b, 1), lt(c.a, c.b));
  }
  const Tensor cond = gt(ones({2, 1}), 0.0);
  expect_matches(where_shape(cond, ones({3}, TensorOptions(kInt32)), ones({2, 3})),
                 where(cond, ones({3}, TensorOptions(kInt32)), ones({2, 3})));
}

TEST(ShapeFn, BinaryErrorsAreTheKernels) {
  const BinaryTraits add_op{"add"}, sub_op{"sub", false, false, true};
  EXPECT_THROW(binary_shape(add_op, ones({2, 3}), ones({4}), 1), ValueError);
  EXPECT_THROW(add(ones({2, 3}), ones({4})), ValueError);
  const Tensor b = ones({2}, TensorOptions(kBool));
  EXPECT_THROW(binary_shape(sub_op, b, b, 1), TypeError);
  EXPECT_THROW(
      binary_shape(add_op, ones({2}, TensorOptions(kInt64)), ones({2}, TensorOptions(kInt64)), 0.5),
      TypeError);
}

TEST(ShapeFn, TakesOnlyMetadata) {
  // A TensorMetaRef made from plain sizes, with no tensor behind it at all.
  const std::vector<int64_t> a_sizes = {8, 1, 6};
  const std::vector<int64_t> b_sizes = {7, 1};
  const DimVector a_strides = contiguous_strides(a_sizes), b_strides = contiguous_strides(b_sizes);
  const TensorMetaRef a(a_sizes, a_strides.ref(), kInt32), b(b_sizes, b_strides.ref(), kFloat16);
  const TensorMeta m = binary_shape(BinaryTraits{"mul"}, a, b, 1);
  EXPECT_EQ(m.sizes.ref(), IntArrayRef({8, 7, 6}));
  EXPECT_EQ(m.dtype, kFloat16);
}

TEST(ShapeFn, LinalgAndSoftmax) {
  const Tensor a = ones({3, 4}), b = ones({4, 5}), c = ones({2, 3, 4}), d = ones({2, 4, 5});
  expect_matches(mm_shape(a, b), mm(a, b));
  expect_matches(bmm_shape(c, d), bmm(c, d));
  expect_matches(addmm_shape(ones({5}), a, b, 1, 1), addmm(ones({5}), a, b));
  expect_matches(dot_shape(ones({4}), ones({4})), dot(ones({4}), ones({4})));
  EXPECT_THROW(mm_shape(a, a), ValueError);
  expect_matches(softmax_shape<false>(c, 1, std::nullopt), softmax(c, 1));
  expect_matches(softmax_shape<true>(c, -1, kFloat64), log_softmax(c, -1, kFloat64));
  EXPECT_THROW(softmax_shape<false>(ones({2}, TensorOptions(kInt64)), 0, std::nullopt), TypeError);
}

TEST(ShapeFn, ReductionsWithKeepdim) {
  const Tensor x = ones({2, 3, 4}), xi = ones({2, 3}, TensorOptions(kInt32));
  for (bool keepdim : {false, true}) {
    const std::vector<int64_t> d1 = {1};
    const std::vector<int64_t> d02 = {0, -1};
    expect_matches(sum_shape(x, IntArrayRef(d1), keepdim, std::nullopt),
                   sum(x, IntArrayRef(d1), keepdim));
    expect_matches(sum_shape(x, IntArrayRef(d02), keepdim, std::nullopt),
                   sum(x, IntArrayRef(d02), keepdim));
    expect_matches(sum_shape(xi, std::nullopt, keepdim, std::nullopt),
                   sum(xi, std::nullopt, keepdim));
    expect_matches(sum_shape(xi, std::nullopt, keepdim, kFloat64),
                   sum(xi, std::nullopt, keepdim, kFloat64));
    expect_matches(mean_shape(x, IntArrayRef(d1), keepdim, std::nullopt),
                   mean(x, IntArrayRef(d1), keepdim));
    expect_matches(amax_shape(x, IntArrayRef(d02), keepdim), amax(x, IntArrayRef(d02), keepdim));
    expect_matches(arg_extreme_shape<true>(x, 2, keepdim), argmax(x, 2, keepdim));
    expect_matches(var_shape<false>(x, IntArrayRef(d1), 1, keepdim),
                   var(x, IntArrayRef(d1), 1, keepdim));
    expect_matches(logsumexp_shape(xi, IntArrayRef(d1), keepdim),
                   logsumexp(xi, IntArrayRef(d1), keepdim));
    expect_matches(all_any_shape<true>(xi, std::nullopt, keepdim), all(xi, std::nullopt, keepdim));
    const auto [values, indices] = max(x, 1, keepdim);
    const std::array<TensorMeta, 2> m = extreme_dim_shape<true>(x, 1, keepdim);
    expect_matches(m[0], values);
    expect_matches(m[1], indices);
  }
  EXPECT_THROW(amax_shape(ones({2, 0}), IntArrayRef({1}), false), IndexError);
  EXPECT_THROW(mean_shape(xi, std::nullopt, false, std::nullopt), TypeError);
}

TEST(ShapeFn, ConvAndPoolOutputSizes) {
  const Tensor x = ones({2, 4, 9, 11}), w = ones({6, 2, 3, 3}), b = ones({6});
  const std::vector<int64_t> s2 = {2, 1};
  const std::vector<int64_t> p1 = {1, 0};
  const std::vector<int64_t> d2 = {2, 2};
  const std::vector<int64_t> one = {1, 1};
  const std::vector<int64_t> zero = {0, 0};
  expect_matches(conv2d_shape(x, w, std::optional<Tensor>(b), s2, p1, one, 2),
                 conv2d(x, w, b, s2, p1, one, 2));
  expect_matches(conv2d_shape(x.select(0, 0), ones({3, 4, 2, 2}), std::nullopt, one, zero, d2, 1),
                 conv2d(x.select(0, 0), ones({3, 4, 2, 2}), std::nullopt, one, zero, d2, 1));
  const std::vector<int64_t> k3 = {3, 3};
  const std::vector<int64_t> k2 = {2, 2};
  for (bool ceil_mode : {false, true}) {
    const auto [out, ind] = max_pool2d_with_indices(x, k3, k2, one, one, ceil_mode);
    const std::array<TensorMeta, 2> m =
        max_pool2d_with_indices_shape(x, k3, k2, one, one, ceil_mode);
    expect_matches(m[0], out);
    expect_matches(m[1], ind);
    expect_matches(avg_pool2d_shape(x, k3, k2, one, ceil_mode, true, std::nullopt),
                   avg_pool2d(x, k3, k2, one, ceil_mode, true));
  }
  EXPECT_THROW(conv2d_shape(x, ones({6, 3, 3, 3}), std::nullopt, one, zero, one, 1), ValueError);
}

TEST(ShapeFn, IndexNnFactoryAndJoin) {
  const Tensor x = ones({4, 5}), idx = zeros({3}, TensorOptions(kInt64));
  expect_matches(index_select_shape(x, 1, idx), index_select(x, 1, idx));
  expect_matches(gather_shape(x, 0, zeros({2, 5}, TensorOptions(kInt64))),
                 gather(x, 0, zeros({2, 5}, TensorOptions(kInt64))));
  expect_matches(embedding_shape(x, zeros({2, 3}, TensorOptions(kInt64)), -1),
                 embedding(x, zeros({2, 3}, TensorOptions(kInt64))));
  const std::vector<int64_t> last = {5};
  const auto [y, mu, rstd] =
      native_layer_norm(ones({2, 3, 5}), last, std::nullopt, std::nullopt, 1e-5);
  const std::array<TensorMeta, 3> ln =
      native_layer_norm_shape(ones({2, 3, 5}), last, std::nullopt, std::nullopt, 1e-5);
  expect_matches(ln[0], y);
  expect_matches(ln[1], mu);
  expect_matches(ln[2], rstd);
  const Tensor logp = log_softmax(ones({4, 3}), 1), target = zeros({4}, TensorOptions(kInt64));
  expect_matches(nll_loss_shape(logp, target, std::nullopt, 1, -100), nll_loss(logp, target));
  expect_matches(arange_shape(0, 10, 3, std::nullopt, std::nullopt), arange(0, 10, 3));
  const std::vector<Tensor> parts = {ones({2, 3}), ones({4, 3}, TensorOptions(kFloat64))};
  expect_matches(cat_shape(TensorList(parts), 0), cat(parts, 0));
  // one_hot's class count comes from the data unless given (Note [Data-dependent sizes]).
  EXPECT_EQ(one_hot_shape(idx, 7).sizes.ref(), IntArrayRef({3, 7}));
  EXPECT_THROW(one_hot_shape(idx, -1), ValueError);
}

// The unary operators' Meta kernels (a table of dtype rules in unary.cpp) and their CPU functors
// (cpu/unary_kernels.cpp) agree: same result dtype, or the same error, for every input dtype.
TEST(ShapeFn, UnaryMetaMatchesCpu) {
  using Fn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"neg", [](const Tensor& t) { return neg(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"log1p", [](const Tensor& t) { return log1p(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"sin", [](const Tensor& t) { return sin(t); }},
      {"cos", [](const Tensor& t) { return cos(t); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"erf", [](const Tensor& t) { return erf(t); }},
      {"sign", [](const Tensor& t) { return sign(t); }},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }},
      {"logical_not", [](const Tensor& t) { return logical_not(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
  };
  for (const auto& [name, fn] : ops) {
    for (DType dt : {kBool, kInt32, kInt64, kFloat16, kFloat32, kFloat64}) {
      SCOPED_TRACE(std::string(name) + " on " + std::string(dtype_name(dt)));
      const Tensor cpu_in = ones({2, 3}, TensorOptions(dt));
      const Tensor meta_in = meta({2, 3}, dt);
      bool cpu_threw = false, meta_threw = false;
      Tensor cpu_out, meta_out;
      try {
        cpu_out = fn(cpu_in);
      } catch (const TypeError&) {
        cpu_threw = true;
      }
      try {
        meta_out = fn(meta_in);
      } catch (const TypeError&) {
        meta_threw = true;
      }
      ASSERT_EQ(cpu_threw, meta_threw);
      if (!cpu_threw) {
        EXPECT_EQ(meta_out.dtype(), cpu_out.dtype());
        EXPECT_EQ(meta_out.sizes(), cpu_out.sizes());
      }
    }
  }
}

// Counts the CPU allocator's non-empty allocations while installed.
class CountingAllocator : public Allocator {
 public:
  explicit CountingAllocator(Allocator* inner) : inner_(inner) {}
  DataPtr allocate(size_t nbytes) override {
    if (nbytes > 0) ++count;
    return inner_->allocate(nbytes);
  }
  DeleterFn raw_deleter() const override { return inner_->raw_deleter(); }
  int count = 0;

 private:
  Allocator* inner_;
};

TEST(ShapeFn, MetaRunsOnlyTheShapeFunction) {
  // 2^40 elements per operand: a kernel that touched data or allocated would not return at once.
  const int64_t big = int64_t{1} << 20;
  Allocator* cpu = get_allocator(DeviceType::CPU);
  CountingAllocator counting(cpu);
  set_allocator(DeviceType::CPU, &counting);
  const auto start = std::chrono::steady_clock::now();
  const Tensor x = meta({big, big}), y = meta({big, 1}), w = meta({big, big});
  EXPECT_EQ(add(x, y).sizes(), IntArrayRef({big, big}));
  EXPECT_EQ(lt(x, y).dtype(), kBool);
  EXPECT_EQ(where(lt(x, y), x, y).sizes(), IntArrayRef({big, big}));
  EXPECT_EQ(mul_(x, y).sizes(), IntArrayRef({big, big}));
  EXPECT_EQ(exp(x).dtype(), kFloat32);
  EXPECT_EQ(pow(x, 2.0).sizes(), x.sizes());
  EXPECT_EQ(clamp(x, 0.0, 1.0).sizes(), x.sizes());
  EXPECT_EQ(gelu(x).sizes(), x.sizes());
  EXPECT_EQ(sigmoid_backward(x, x).sizes(), x.sizes());
  EXPECT_EQ(mm(x, w).sizes(), IntArrayRef({big, big}));
  EXPECT_EQ(bmm(meta({big, big, 4}), meta({big, 4, big})).sizes(), IntArrayRef({big, big, big}));
  EXPECT_EQ(softmax(x, 1).sizes(), x.sizes());
  EXPECT_EQ(_softmax_backward_data(x, x, 1, kFloat64).dtype(), kFloat64);
  const std::vector<int64_t> dim1 = {1};
  EXPECT_EQ(sum(x, IntArrayRef(dim1), true).sizes(), IntArrayRef({big, 1}));
  EXPECT_EQ(max_pool2d(meta({1, 4, big, big}), {2, 2}).sizes(),
            IntArrayRef({1, 4, big / 2, big / 2}));
  EXPECT_EQ(conv2d(meta({1, 4, big, big}), meta({8, 4, 3, 3})).sizes(),
            IntArrayRef({1, 8, big - 2, big - 2}));
  EXPECT_EQ(cat({x, x}, 0).sizes(), IntArrayRef({2 * big, big}));
  EXPECT_EQ(std::get<1>(max(x, 0, true)).dtype(), kInt64);
  EXPECT_EQ(argmax(x, 1).sizes(), IntArrayRef({big}));
  EXPECT_EQ(index_select(x, 1, meta({3}, kInt64)).sizes(), IntArrayRef({big, 3}));
  EXPECT_EQ(gather(x, 0, meta({2, big}, kInt64)).sizes(), IntArrayRef({2, big}));
  EXPECT_EQ(embedding(x, meta({4, 3}, kInt64)).sizes(), IntArrayRef({4, 3, big}));
  EXPECT_EQ(scatter_add(x, 0, meta({2, big}, kInt64), x).sizes(), x.sizes());
  EXPECT_EQ(masked_fill(x, lt(x, y), 0.0).sizes(), x.sizes());
  EXPECT_EQ(layer_norm(x, {big}).sizes(), x.sizes());
  EXPECT_EQ(std::get<1>(native_dropout(x, 0.5, true)).dtype(), kBool);
  EXPECT_EQ(nll_loss(x, meta({big}, kInt64)).dim(), 0);
  EXPECT_EQ(clone(x).sizes(), x.sizes());
  EXPECT_EQ(x.to(kFloat64).dtype(), kFloat64);
  EXPECT_EQ(arange(0, big, 1, TensorOptions(kInt64).with_device(kMeta)).sizes(),
            IntArrayRef({big}));
  EXPECT_EQ(zeros({big, big}, TensorOptions(kFloat32).with_device(kMeta)).sizes(), x.sizes());
  EXPECT_EQ(rand({big, big}, TensorOptions(kFloat32).with_device(kMeta)).sizes(), x.sizes());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(counting.count, 0) << "a Meta call allocated CPU memory";
  set_allocator(DeviceType::CPU, cpu);
}

}  // namespace
}  // namespace loom
