// Runs every OpCase registered by the family test files.
#include <gtest/gtest.h>

#include <random>

#include "ops/op_table.h"

namespace loom::testing {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

Tensor noncontiguous_copy(const Tensor& t) {
  if (t.dim() == 0 || t.numel() == 0) return t.clone();
  // Allocate twice the last dimension and take every other element.
  std::vector<int64_t> big = t.sizes().vec();
  big.back() *= 2;
  Tensor storage = zeros(big, t.dtype());
  Tensor view = storage.slice(-1, 0, std::nullopt, 2);
  view.copy_(t);
  return view;
}

OpCase unary_case(const std::string& name, std::function<Tensor(const Tensor&)> op,
                  std::function<double(double)> ref, double lo, double hi,
                  std::vector<int64_t> shape) {
  OpCase c;
  c.name = name;
  c.shapes = {shape};
  c.lo = lo;
  c.hi = hi;
  c.run = [op](const std::vector<Tensor>& in) { return one(op(in[0])); };
  c.ref = [ref](const std::vector<Ref>& in) { return one(ref_map(in[0], ref)); };
  return c;
}

OpCase binary_case(const std::string& name, std::function<Tensor(const Tensor&, const Tensor&)> op,
                   std::function<double(double, double)> ref, std::vector<int64_t> a,
                   std::vector<int64_t> b, double lo, double hi) {
  OpCase c;
  c.name = name;
  c.shapes = {a, b};
  c.lo = lo;
  c.hi = hi;
  c.run = [op](const std::vector<Tensor>& in) { return one(op(in[0], in[1])); };
  c.ref = [ref](const std::vector<Ref>& in) { return one(ref_map2(in[0], in[1], ref)); };
  return c;
}

std::vector<Tensor> random_inputs(const OpCase& c, DType dt, uint32_t seed) {
  if (c.make_inputs) return c.make_inputs(dt);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(c.lo, c.hi);
  std::vector<Tensor> out;
  for (const auto& shape : c.shapes) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) {
      x = dist(rng);
      if (c.integer_values || !is_floating(dt)) x = std::round(x);
      if (dt == kBool) x = x > 0 ? 1 : 0;
    }
    out.push_back(from_vector<double>(v, shape).to(dt));
  }
  return out;
}

void compare(const OpCase& c, const std::vector<Tensor>& got, const std::vector<Ref>& want,
             DType dt, const std::string& variant) {
  ASSERT_EQ(got.size(), want.size()) << c.name << " " << variant << ": number of outputs";
  double rtol = c.rtol, atol = c.atol;
  if (dt == kFloat64) {
    rtol = std::min(rtol, 1e-9);
    atol = std::min(atol, 1e-10);
  } else if (dt == kFloat16 || dt == kBFloat16) {
    rtol = c.rtol_half;
    atol = c.atol_half;
  }
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].sizes().vec(), want[o].shape)
        << c.name << " [" << dtype_name(dt) << ", " << variant << "] output " << o << " shape";
    std::vector<double> g = to_vector<double>(got[o]);
    bool exact =
        std::find(c.exact_outputs.begin(), c.exact_outputs.end(), o) != c.exact_outputs.end();
    for (size_t i = 0; i < g.size(); ++i) {
      double w = want[o].v[i];
      if (std::isnan(w) && std::isnan(g[i])) continue;
      if (std::isinf(w) && g[i] == w) continue;
      double tol = exact ? 0.0 : atol + rtol * std::abs(w);
      ASSERT_LE(std::abs(g[i] - w), tol)
          << c.name << " [" << dtype_name(dt) << ", " << variant << "] output " << o << " element "
          << i << ": got " << g[i] << " want " << w;
    }
  }
}

namespace {

class OpTable : public ::testing::TestWithParam<size_t> {};

TEST_P(OpTable, MatchesReference) {
  const OpCase& c = op_cases()[GetParam()];
  uint32_t seed = 1234;
  for (DType dt : c.dtypes) {
    SCOPED_TRACE(c.name + " dtype=" + dtype_name(dt));
    std::vector<Tensor> in = random_inputs(c, dt, seed++);
    std::vector<Ref> refs;
    for (const Tensor& t : in) refs.push_back(Ref::of(t));
    std::vector<Ref> want = c.ref(refs);
    std::vector<Tensor> got = c.run(in);
    compare(c, got, want, dt, "contiguous");
    if (c.noncontiguous) {
      std::vector<Tensor> nc;
      for (const Tensor& t : in)
        nc.push_back(t.dim() > 0 && t.numel() > 0 ? noncontiguous_copy(t) : t);
      compare(c, c.run(nc), want, dt, "non-contiguous");
    }
    if (c.meta) {
      std::vector<Tensor> meta_in;
      for (const Tensor& t : in)
        meta_in.push_back(empty(t.sizes(), TensorOptions(t.dtype()).with_device(kMeta)));
      std::vector<Tensor> meta_out = c.run(meta_in);
      ASSERT_EQ(meta_out.size(), got.size());
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(meta_out[o].is_meta())
            << c.name << " meta output " << o << " is on " << meta_out[o].device();
        EXPECT_EQ(meta_out[o].sizes().vec(), got[o].sizes().vec()) << c.name << " meta shape";
        EXPECT_EQ(meta_out[o].dtype(), got[o].dtype()) << c.name << " meta dtype";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, OpTable, ::testing::Range<size_t>(0, op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = op_cases()[info.param].name;
                           for (auto& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace loom::testing
