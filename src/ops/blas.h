// Matrix products through OpenBLAS, parallelised by loom's own pool (internal to the ops layer).
//
// Note [One pool for BLAS]: OpenBLAS runs single-threaded (set_num_threads keeps it at 1) and a
// large product is split into blocks of output rows or columns, one sgemm/dgemm per block, run by
// loom's intra-op pool. So there is only one set of compute threads: nothing spins on a core that
// the next elementwise op needs (OpenBLAS's idle workers busy-wait after each call, which made
// elementwise ops between GEMMs up to 3x slower at 2 threads), and BLAS may be called from inside a
// parallel region (it then runs serially on that thread).
#pragma once

#include <cstdint>

namespace loom::blas {

// c[m, n] = alpha * op(a)[m, k] @ op(b)[k, n] + beta * c, row-major; op transposes a stored operand
// when ta / tb is set (lda / ldb are the stored operands' row lengths). beta == 0 never reads c.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace loom::blas
