// Linear algebra: mm, bmm, matmul, addmm, linear and dot against naive float64 references, plus
// error tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op_table.h"

namespace loom::testing {
namespace {

Ref ref_t(const Ref& a) {
  const int64_t r = a.shape[0], c = a.shape[1];
  Ref out = Ref::filled({c, r}, 0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out.at({j, i}) = a.at({i, j});
  return out;
}

// Columns [start, start + len) of a 2-D array.
Ref ref_cols(const Ref& a, int64_t start, int64_t len) {
  Ref out = Ref::filled({a.shape[0], len}, 0);
  for (int64_t i = 0; i < a.shape[0]; ++i)
    for (int64_t j = 0; j < len; ++j) out.at({i, j}) = a.at({i, start + j});
  return out;
}

// Swaps the last two dims of a 3-D array.
Ref ref_mT(const Ref& a) {
  Ref out = Ref::filled({a.shape[0], a.shape[2], a.shape[1]}, 0);
  for (int64_t b = 0; b < a.shape[0]; ++b)
    for (int64_t i = 0; i < a.shape[1]; ++i)
      for (int64_t j = 0; j < a.shape[2]; ++j) out.at({b, j, i}) = a.at({b, i, j});
  return out;
}

// torch.matmul from its definition: vectors become a row / column that is dropped at the end, the
// leading dims broadcast.
Ref ref_matmul(const Ref& a0, const Ref& b0) {
  Ref a = a0, b = b0;
  if (a.dim() == 1) a.shape = {1, a.shape[0]};
  if (b.dim() == 1) b.shape = {b.shape[0], 1};
  const int64_t n = a.shape[a.shape.size() - 2], k = a.shape.back(), m = b.shape.back();
  std::vector<int64_t> ba(a.shape.begin(), a.shape.end() - 2),
      bb(b.shape.begin(), b.shape.end() - 2);
  std::vector<int64_t> batch = ref_broadcast_shape(ba, bb);
  std::vector<int64_t> full = batch;
  full.push_back(n);
  full.push_back(m);
  Ref r = Ref::filled(full, 0);
  for (int64_t idx = 0; idx < r.numel(); ++idx) {
    std::vector<int64_t> c = r.coords(idx);
    const int64_t i = c[c.size() - 2], j = c.back();
    double s = 0;
    for (int64_t p = 0; p < k; ++p) {
      std::vector<int64_t> ca = c, cb = c;
      ca[ca.size() - 1] = p;
      cb[cb.size() - 2] = p;
      ca[ca.size() - 2] = i;
      cb[cb.size() - 1] = j;
      s += ref_broadcast_at(a, ca) * ref_broadcast_at(b, cb);
    }
    r.v[static_cast<size_t>(idx)] = s;
  }
  std::vector<int64_t> shape = batch;
  if (a0.dim() > 1) shape.push_back(n);
  if (b0.dim() > 1) shape.push_back(m);
  r.shape = shape;
  return r;
}

// beta * self + alpha * a @ b, self broadcast.
Ref ref_addmm(const Ref& self, const Ref& a, const Ref& b, double beta, double alpha) {
  Ref p = ref_mm(a, b);
  return ref_map2(self, p, [=](double s, double x) { return beta * s + alpha * x; });
}

OpCase mat_case(const std::string& name, std::vector<std::vector<int64_t>> shapes,
                std::function<Tensor(const std::vector<Tensor>&)> run,
                std::function<Ref(const std::vector<Ref>&)> ref) {
  OpCase c;
  c.name = name;
  c.shapes = std::move(shapes);
  c.run = [run](const std::vector<Tensor>& in) { return one(run(in)); };
  c.ref = [ref](const std::vector<Ref>& in) { return one(ref(in)); };
  c.atol = 1e-5;
  return c;
}

OpCase with_dtypes(OpCase c, std::vector<DType> dtypes, bool integer_values = false) {
  c.dtypes = std::move(dtypes);
  c.integer_values = integer_values;
  return c;
}

OpCase with_atol(OpCase c, double atol) {
  c.atol = atol;
  return c;
}

Tensor mm2(const std::vector<Tensor>& in) {
  return mm(in[0], in[1]);
}
Ref ref_mm2(const std::vector<Ref>& in) {
  return ref_mm(in[0], in[1]);
}
Tensor matmul2(const std::vector<Tensor>& in) {
  return matmul(in[0], in[1]);
}
Ref ref_matmul2(const std::vector<Ref>& in) {
  return ref_matmul(in[0], in[1]);
}

const RegisterOpCases kLinalgCases({
    mat_case("mm/basic", {{3, 4}, {4, 5}}, mm2, ref_mm2),
    // Transposed operands go to gemm as Trans without a copy.
    mat_case(
        "mm/transposed", {{4, 3}, {5, 4}}, [](const auto& in) { return mm(in[0].t(), in[1].t()); },
        [](const auto& in) { return ref_mm(ref_t(in[0]), ref_t(in[1])); }),
    // A column slice of a wider matrix: leading dimension > number of columns.
    mat_case(
        "mm/column_slice", {{3, 8}, {4, 5}},
        [](const auto& in) { return mm(in[0].narrow(1, 2, 4), in[1]); },
        [](const auto& in) { return ref_mm(ref_cols(in[0], 2, 4), in[1]); }),
    // Rows with stride 0 cannot be handed to BLAS and are made contiguous.
    mat_case(
        "mm/expanded_rows", {{1, 4}, {4, 5}},
        [](const auto& in) {
          return mm(in[0].expand({3, 4}), in[1]);
        },
        [](const auto& in) {
          Ref a = Ref::filled({3, 4}, 0);
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 4; ++j) a.at({i, j}) = in[0].at({0, j});
          return ref_mm(a, in[1]);
        }),
    with_atol(mat_case("mm/large", {{65, 130}, {130, 67}}, mm2, ref_mm2), 1e-4),
    with_dtypes(mat_case("mm/int", {{5, 7}, {7, 3}}, mm2, ref_mm2), {kInt32, kInt64, kInt16}, true),
    with_dtypes(mat_case("mm/reduced_float", {{4, 6}, {6, 5}}, mm2, ref_mm2),
                {kFloat16, kBFloat16}),
    mat_case("mm/zero_inner", {{3, 0}, {0, 4}}, mm2, ref_mm2),
    mat_case("mm/zero_rows", {{0, 3}, {3, 4}}, mm2, ref_mm2),
    mat_case(
        "bmm/basic", {{2, 3, 4}, {2, 4, 5}}, [](const auto& in) { return bmm(in[0], in[1]); },
        [](const auto& in) { return ref_matmul(in[0], in[1]); }),
    mat_case(
        "bmm/transposed", {{3, 4, 2}, {3, 5, 4}},
        [](const auto& in) { return bmm(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
        [](const auto& in) { return ref_matmul(ref_mT(in[0]), ref_mT(in[1])); }),
    with_dtypes(mat_case(
                    "bmm/int", {{3, 4, 2}, {3, 2, 5}},
                    [](const auto& in) { return bmm(in[0], in[1]); },
                    [](const auto& in) { return ref_matmul(in[0], in[1]); }),
                {kInt64, kInt8}, true),
    with_dtypes(mat_case(
                    "bmm/reduced_float", {{2, 3, 4}, {2, 4, 5}},
                    [](const auto& in) { return bmm(in[0], in[1]); },
                    [](const auto& in) { return ref_matmul(in[0], in[1]); }),
                {kBFloat16}),
    mat_case(
        "bmm/zero_batch", {{0, 3, 4}, {0, 4, 5}}, [](const auto& in) { return bmm(in[0], in[1]); },
        [](const auto& in) { return ref_matmul(in[0], in[1]); }),
    mat_case("matmul/dot", {{5}, {5}}, matmul2, ref_matmul2),
    mat_case("matmul/matrix_vector", {{3, 5}, {5}}, matmul2, ref_matmul2),
    mat_case("matmul/vector_matrix", {{5}, {5, 4}}, matmul2, ref_matmul2),
    mat_case("matmul/matrix_matrix", {{3, 5}, {5, 4}}, matmul2, ref_matmul2),
    mat_case("matmul/batch_matrix", {{2, 3, 5}, {5, 4}}, matmul2, ref_matmul2),
    mat_case("matmul/batch_vector", {{2, 3, 5}, {5}}, matmul2, ref_matmul2),
    mat_case("matmul/matrix_batch", {{3, 5}, {2, 5, 4}}, matmul2, ref_matmul2),
    mat_case("matmul/vector_batch", {{5}, {2, 5, 4}}, matmul2, ref_matmul2),
    mat_case("matmul/broadcast_batch", {{2, 1, 3, 4}, {3, 4, 5}}, matmul2, ref_matmul2),
    mat_case("matmul/broadcast_both", {{2, 1, 3, 4}, {1, 3, 4, 2}}, matmul2, ref_matmul2),
    mat_case("matmul/zero_batch", {{0, 3, 4}, {4, 2}}, matmul2, ref_matmul2),
    mat_case(
        "addmm/broadcast_row", {{5}, {3, 4}, {4, 5}},
        [](const auto& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); },
        [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 0.5, 2.0); }),
    mat_case(
        "addmm/broadcast_column", {{3, 1}, {3, 4}, {4, 5}},
        [](const auto& in) { return addmm(in[0], in[1], in[2]); },
        [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 1.0, 1.0); }),
    mat_case(
        "addmm/full_transposed", {{3, 5}, {4, 3}, {4, 5}},
        [](const auto& in) { return addmm(in[0], in[1].t(), in[2], -1.5, 0.25); },
        [](const auto& in) { return ref_addmm(in[0], ref_t(in[1]), in[2], -1.5, 0.25); }),
    with_dtypes(mat_case(
                    "addmm/int", {{5}, {3, 4}, {4, 5}},
                    [](const auto& in) { return addmm(in[0], in[1], in[2], 2, 3); },
                    [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 2, 3); }),
                {kInt64}, true),
    with_dtypes(mat_case(
                    "addmm/reduced_float", {{5}, {3, 4}, {4, 5}},
                    [](const auto& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); },
                    [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 0.5, 2.0); }),
                {kFloat16, kBFloat16}),
    mat_case(
        "addmm/zero_inner", {{3, 4}, {3, 0}, {0, 4}},
        [](const auto& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); },
        [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 0.5, 2.0); }),
    mat_case(
        "linear/batched_bias", {{2, 3, 4}, {5, 4}, {5}},
        [](const auto& in) { return linear(in[0], in[1], in[2]); },
        [](const auto& in) {
          Ref r = ref_matmul(in[0], ref_t(in[1]));
          return ref_map2(r, in[2], [](double x, double b) { return x + b; });
        }),
    mat_case(
        "linear/matrix_bias", {{3, 4}, {5, 4}, {5}},
        [](const auto& in) { return linear(in[0], in[1], in[2]); },
        [](const auto& in) {
          return ref_map2(ref_mm(in[0], ref_t(in[1])), in[2],
                          [](double x, double b) { return x + b; });
        }),
    mat_case(
        "linear/no_bias", {{2, 3, 4}, {5, 4}}, [](const auto& in) { return linear(in[0], in[1]); },
        [](const auto& in) { return ref_matmul(in[0], ref_t(in[1])); }),
    mat_case(
        "linear/vector_input", {{4}, {5, 4}, {5}},
        [](const auto& in) { return linear(in[0], in[1], in[2]); },
        [](const auto& in) {
          return ref_map2(ref_matmul(in[0], ref_t(in[1])), in[2],
                          [](double x, double b) { return x + b; });
        }),
    // Row-vector biases: fused into the product on CUDA (cuBLASLt's bias epilogue).
    with_dtypes(mat_case(
                    "linear/reduced_float", {{6, 8}, {5, 8}, {5}},
                    [](const auto& in) { return linear(in[0], in[1], in[2]); },
                    [](const auto& in) {
                      return ref_map2(ref_mm(in[0], ref_t(in[1])), in[2],
                                      [](double x, double b) { return x + b; });
                    }),
                {kFloat16, kBFloat16}),
    mat_case(
        "linear/wide", {{17, 70}, {33, 70}, {33}},
        [](const auto& in) { return linear(in[0], in[1], in[2]); },
        [](const auto& in) {
          return ref_map2(ref_mm(in[0], ref_t(in[1])), in[2],
                          [](double x, double b) { return x + b; });
        }),
    mat_case(
        "addmm/scalar_self", {{}, {3, 4}, {4, 5}},
        [](const auto& in) { return addmm(in[0], in[1], in[2], 1.0, 0.5); },
        [](const auto& in) { return ref_addmm(in[0], in[1], in[2], 1.0, 0.5); }),
    mat_case(
        "dot/basic", {{7}, {7}}, [](const auto& in) { return dot(in[0], in[1]); }, ref_matmul2),
    with_dtypes(mat_case(
                    "dot/int", {{6}, {6}}, [](const auto& in) { return dot(in[0], in[1]); },
                    ref_matmul2),
                {kInt32, kInt64}, true),
    with_dtypes(mat_case(
                    "dot/reduced_float", {{6}, {6}},
                    [](const auto& in) { return dot(in[0], in[1]); }, ref_matmul2),
                {kFloat16, kBFloat16}),
});

TEST(Linalg, MmShapeMismatchNamesBothShapes) {
  std::string m = error_of<ValueError>([] { mm(zeros({2, 3}), zeros({4, 5})); });
  EXPECT_CONTAINS(m, "[mm] mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
}

TEST(Linalg, MmRejectsMixedDtypes) {
  std::string m = error_of<TypeError>([] { mm(zeros({2, 3}), zeros({3, 2}, kFloat64)); });
  EXPECT_CONTAINS(m, "[mm]");
  EXPECT_CONTAINS(m, "float32");
  EXPECT_CONTAINS(m, "float64");
  EXPECT_THROW(addmm(zeros({2}, kFloat64), zeros({2, 3}), zeros({3, 2})), TypeError);
  EXPECT_THROW(mm(zeros({2, 2}, kBool), zeros({2, 2}, kBool)), TypeError);
}

TEST(Linalg, MmRejectsWrongRankAndDevice) {
  std::string m = error_of<ValueError>([] { mm(zeros({2, 3, 4}), zeros({4, 5})); });
  EXPECT_CONTAINS(m, "[mm]");
  EXPECT_CONTAINS(m, "[2, 3, 4]");
  EXPECT_THROW(mm(zeros({2, 3}), empty({3, 2}, TensorOptions(kFloat32).with_device(kMeta))),
               ValueError);
}

TEST(Linalg, BmmErrorsNameShapes) {
  std::string m = error_of<ValueError>([] { bmm(zeros({2, 3, 4}), zeros({3, 4, 5})); });
  EXPECT_CONTAINS(m, "[bmm]");
  EXPECT_CONTAINS(m, "[2, 3, 4]");
  EXPECT_CONTAINS(m, "[3, 4, 5]");
  m = error_of<ValueError>([] { bmm(zeros({2, 3, 4}), zeros({2, 5, 5})); });
  EXPECT_CONTAINS(m, "[2, 5, 5]");
}

TEST(Linalg, MatmulErrors) {
  std::string m = error_of<ValueError>([] { matmul(scalar_tensor(1.0), zeros({2})); });
  EXPECT_CONTAINS(m, "[matmul]");
  EXPECT_CONTAINS(m, "at least 1-D");
  m = error_of<ValueError>([] { matmul(zeros({2, 3}), zeros({4})); });
  EXPECT_CONTAINS(m, "[matmul]");
  EXPECT_CONTAINS(m, "[2, 3]");
  EXPECT_CONTAINS(m, "[4]");
  m = error_of<ValueError>([] { matmul(zeros({2, 3, 4}), zeros({5, 4, 2})); });
  EXPECT_CONTAINS(m, "[matmul]");
  EXPECT_CONTAINS(m, "[5, 4, 2]");
}

TEST(Linalg, AddmmLinearDotErrors) {
  std::string m = error_of<ValueError>([] { addmm(zeros({4}), zeros({2, 3}), zeros({3, 5})); });
  EXPECT_CONTAINS(m, "[addmm]");
  EXPECT_CONTAINS(m, "[4]");
  m = error_of<ValueError>([] { linear(zeros({2, 3}), zeros({5, 4})); });
  EXPECT_CONTAINS(m, "[linear]");
  EXPECT_CONTAINS(m, "[2, 3]");
  EXPECT_CONTAINS(m, "[5, 4]");
  m = error_of<ValueError>([] { dot(zeros({3}), zeros({4})); });
  EXPECT_CONTAINS(m, "[dot]");
  EXPECT_THROW(dot(zeros({2, 2}), zeros({4})), ValueError);
}

TEST(Linalg, IntegerAddmmRejectsFloatScalars) {
  Tensor i = zeros({2, 2}, kInt64);
  EXPECT_THROW(addmm(i, i, i, 0.5, 1), TypeError);
}

TEST(Linalg, AddmmBetaZeroIgnoresSelf) {
  Tensor self = full({2, 2}, std::numeric_limits<double>::quiet_NaN());
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor r = addmm(self, a, a, 0, 1);
  EXPECT_EQ(to_vector<float>(r), (std::vector<float>{7, 10, 15, 22}));
}

TEST(Linalg, MethodAndDtypes) {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor r = a.matmul(b);
  EXPECT_EQ(r.dtype(), kFloat64);
  EXPECT_EQ(to_vector<double>(r), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_EQ(matmul(from_vector<float>({1, 2}), from_vector<float>({3, 4})).dim(), 0);
}

// A product big enough for OpenBLAS to use its threads, with every operand layout.
TEST(Linalg, LargeProductLayouts) {
  Tensor a = randn({257, 300}, kFloat64), b = randn({300, 129}, kFloat64);
  Tensor want = mm(a.contiguous(), b.contiguous());
  Ref ra = Ref::of(a), rb = Ref::of(b);
  Ref r = ref_mm(ra, rb);
  std::vector<double> got = to_vector<double>(want);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], r.v[i], 1e-9);
  EXPECT_TRUE(allclose(mm(a.t().contiguous().t(), b), want, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(mm(a, b.t().contiguous().t()), want, 1e-12, 1e-12));
  Tensor af = a.to(kFloat32), bf = b.to(kFloat32);
  EXPECT_TRUE(allclose(mm(af, bf).to(kFloat64), want, 1e-4, 1e-3));
  EXPECT_TRUE(allclose(linear(af, bf.t()).to(kFloat64), want, 1e-4, 1e-3));
}

}  // namespace
}  // namespace loom::testing
