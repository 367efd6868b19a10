// See Note [One pool for BLAS] in blas.h.
#include "blas.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>

#include "gemm_kernel.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/parallel.h"

namespace loom::blas {
namespace {

template <class T>
void call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>) {
    // loom's kernel is sized for training shapes (Note [loom sgemm]): below kMinMacs (2^20)
    // multiply-adds OpenBLAS's small-matrix path skips packing, and from kMaxMacs (2^27 = 512^3)
    // its large-square blocking is as fast or faster, so both ends stay with OpenBLAS.
    const int64_t macs = m * n * k;
    if (detail::use_loom_sgemm() && macs >= detail::kMinMacs && macs < detail::kMaxMacs) {
      detail::sgemm_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, M, N, K, alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }
}

template <class T>
void gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    LOOM_CHECK(v <= INT_MAX, "[gemm] matrix dimension or stride ", v,
               " exceeds what 32-bit BLAS accepts (", INT_MAX, ")");
  }
  if (m == 0 || n == 0) return;
  const int threads = in_parallel_region() ? 1 : get_num_threads();
  // Below ~2 MFLOP per thread the split costs more than it saves.
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || flops < 2e6 * threads || k == 0) {
    call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the larger output dimension into `threads` blocks aligned to 16 (a micro-kernel's width).
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t block = std::max<int64_t>(16, (extent / threads + 15) / 16 * 16);
  parallel_for(0, (extent + block - 1) / block, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t lo = blk * block, len = std::min(block, extent - lo);
      if (split_rows) {
        // Rows [lo, lo+len) of op(a) and of c.
        const T* a_blk = ta ? a + lo : a + lo * lda;
        call(ta, tb, len, n, k, alpha, a_blk, lda, b, ldb, beta, c + lo * ldc, ldc);
      } else {
        // Columns [lo, lo+len) of op(b) and of c.
        const T* b_blk = tb ? b + lo * ldb : b + lo;
        call(ta, tb, m, len, k, alpha, a, lda, b_blk, ldb, beta, c + lo, ldc);
      }
    }
  });
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace loom::blas

namespace loom {

namespace {
int log2_of(int64_t x) {
  int l = 0;
  while ((int64_t{1} << (l + 1)) <= x) ++l;
  return l;
}
}  // namespace

GemmInfo gemm_info() {
  using namespace blas::detail;
  GemmInfo g;
  g.loom_kernel = use_loom_sgemm();
  g.tile_rows = kMR;
  g.tile_cols = kNR;
  g.min_macs = kMinMacs;
  g.max_macs = kMaxMacs;
  g.reason = sgemm_unused_reason();
  return g;
}

std::string gemm_backend() {
  const GemmInfo g = gemm_info();
  if (!g.loom_kernel) {
    return "OpenBLAS sgemm (loom's " + std::to_string(g.tile_rows) + "x" +
           std::to_string(g.tile_cols) + " AVX-512 sgemm is off: " + g.reason + ")";
  }
  return "loom's AVX-512 sgemm, " + std::to_string(g.tile_rows) + "x" +
         std::to_string(g.tile_cols) + " micro-kernel (" + std::to_string(g.tile_rows) +
         " rows x " + std::to_string(g.tile_cols / 16) + " zmm of c), for products of 2^" +
         std::to_string(log2_of(g.min_macs)) + " to 2^" + std::to_string(log2_of(g.max_macs)) +
         " multiply-adds; OpenBLAS sgemm outside that range";
}

}  // namespace loom
