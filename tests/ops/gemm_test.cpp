// float32 matrix products through the public mm/addmm against a float64 loop, over the shapes where
// a blocked kernel goes wrong: every transpose pair, padded leading dimensions, edges of the 12 x
// 32 tile and of the 192-long K blocks, alpha/beta, K = 0, and the split across two threads.
// Whichever kernel this machine runs (see gemm_backend()) is the one under test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "loom/generator.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "loom/tensor.h"

namespace loom {
namespace {

// A [rows, cols] operand stored either row-major with row stride cols + pad, or (trans) as the
// transpose of a [cols, rows + pad] row-major matrix: the two layouts gemm takes without a copy.
struct Operand {
  Tensor base, view;
  bool trans;
  double at(int64_t i, int64_t j) const {
    const float* p = base.data_ptr<float>();
    const int64_t ld = base.size(1);
    return trans ? p[j * ld + i] : p[i * ld + j];
  }
};

Operand make(int64_t rows, int64_t cols, bool trans, int64_t pad, Generator& gen) {
  Operand o;
  o.trans = trans;
  if (trans) {
    o.base = rand({cols, rows + pad}, {}, gen) - 0.5;
    o.view = o.base.narrow(1, 0, rows).t();
  } else {
    o.base = rand({rows, cols + pad}, {}, gen) - 0.5;
    o.view = o.base.narrow(1, 0, cols);
  }
  return o;
}

// beta * c0 + alpha * a @ b, checked element by element against float64 with a tolerance scaled by
// sum_k |a_ik b_kj| (float32 rounding of the partial sums).
void check_product(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t pad, double alpha,
                   double beta, uint64_t seed) {
  SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
               " pad=" + std::to_string(pad) + " alpha=" + std::to_string(alpha) +
               " beta=" + std::to_string(beta));
  Generator gen(seed);
  const Operand a = make(m, k, ta, pad, gen), b = make(k, n, tb, pad, gen);
  const Tensor c0 = rand({m, n}, {}, gen);
  const Tensor got =
      (alpha == 1 && beta == 0) ? mm(a.view, b.view) : addmm(c0, a.view, b.view, beta, alpha);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{m, n}));
  const Tensor g = got.contiguous();
  const float* gp = g.data_ptr<float>();
  const float* cp = c0.data_ptr<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double v = a.at(i, p) * b.at(p, j);
        s += v;
        mag += std::fabs(v);
      }
      const double want = beta * cp[i * n + j] + alpha * s;
      const double tol = 1e-5 * (std::fabs(alpha) * mag + std::fabs(beta)) + 1e-6;
      if (!(std::fabs(gp[i * n + j] - want) <= tol) && bad++ < 3) {
        ADD_FAILURE() << "c[" << i << ", " << j << "] = " << gp[i * n + j] << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Gemm, BackendIsNamed) {
  const std::string name = gemm_backend();
  const GemmInfo info = gemm_info();
  if (info.loom_kernel) {
    EXPECT_EQ(name.rfind("loom's AVX-512 sgemm, 8x48 micro-kernel", 0), 0u) << name;
    EXPECT_TRUE(info.reason.empty());
  } else {
    EXPECT_EQ(name.rfind("OpenBLAS sgemm (", 0), 0u) << name;  // and says why
    EXPECT_FALSE(info.reason.empty());
  }
}

TEST(Gemm, EveryTransposeAtTileEdges) {
  // 8 x 48 tiles: one short of, exactly, and one past a tile and each of its 16-wide vectors; K
  // around the 16-wide packing step. Shapes stay small, so OpenBLAS (below 2^20 multiply-adds)
  // checks its own path here; the larger cases below run loom's kernel.
  const int64_t ms[] = {1, 7, 8, 9, 17};
  const int64_t ns[] = {1, 15, 16, 17, 33, 47, 48, 49, 97};
  const int64_t ks[] = {1, 15, 16, 17, 40};
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) check_product(m, n, k, ta, tb, (m + n + k) % 3, 1, 0, seed++);
}

TEST(Gemm, KBlocksAndLargeTiles) {
  // K split into equal blocks of at most 192: 257 -> 2 x 129, 784 -> 5 x 157; later blocks
  // accumulate onto the first. Every tile edge again, at sizes that run loom's kernel.
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_product(70, 65, 257, ta, tb, 1, 1, 0, seed++);
      check_product(128, 96, 784, ta, tb, 0, 1, 0, seed++);
      check_product(400, 40, 128, ta, tb, 2, 1, 0, seed++);  // more rows than one 384-row block
      for (int64_t m : {97, 103})
        for (int64_t n : {95, 97, 113}) check_product(m, n, 200, ta, tb, 1, 1, 0, seed++);
    }
}

// Sizes of 2^20 multiply-adds or more run loom's kernel where the CPU has AVX-512.
TEST(Gemm, AlphaAndBeta) {
  uint64_t seed = 200;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_product(60, 47, 400, ta, tb, 0, 0.5, 1, seed++);  // beta = 1 over three K blocks
      check_product(41, 57, 450, ta, tb, 1, -2, 0.25, seed++);
      check_product(41, 57, 450, ta, tb, 1, 1, -1, seed++);
      check_product(128, 128, 128, ta, tb, 0, 0, 0.5, seed++);  // alpha = 0: c = beta c only
    }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  check_product(5, 7, 0, false, false, 0, 1, 0, 300);
  check_product(5, 7, 0, true, true, 0, 2, 0.5, 301);
}

TEST(Gemm, BetaZeroNeverReadsC) {
  // torch.addmm: with beta == 0, NaN and inf in self are ignored.
  Generator gen(7);
  const Tensor a = rand({20, 30}, {}, gen), b = rand({30, 40}, {}, gen);
  const Tensor nan_c = full({20, 40}, std::numeric_limits<double>::quiet_NaN());
  const Tensor got = addmm(nan_c, a, b, 0, 1);
  const Tensor want = mm(a, b);
  EXPECT_TRUE(allclose(got, want, 0, 0));
}

TEST(Gemm, SplitAcrossTwoThreads) {
  // Large enough for blas.cpp to split rows (m >= n) or columns (n > m) over the pool; each block
  // packs its own operands.
  const int before = get_num_threads();
  set_num_threads(2);
  check_product(256, 100, 200, false, true, 0, 1, 0, 400);
  check_product(60, 512, 130, true, false, 3, 1, 0, 401);
  set_num_threads(before);
}

}  // namespace
}  // namespace loom
