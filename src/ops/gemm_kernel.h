// loom's own single-precision matrix product for CPUs with AVX-512 (internal to the ops layer).
//
// Note [loom sgemm]: on the training shapes loom cares about (M = batch 128, N and K a few
// hundred) a product costs its FMAs plus packing, and the FMAs are near the ceiling for both
// OpenBLAS and this kernel (the bench VM retires one 512-bit FMA per cycle, ~108 GFLOP/s; both
// micro-kernels reach ~90 % of it). What is left to win is the packing and the edges, so the
// blocking is sized for these shapes rather than for large squares. Measured against OpenBLAS
// 0.3.21's SkylakeX sgemm on the MLP step's shapes, this is 5-12 % faster per product. It is the
// classic Goto/BLIS structure:
//
//   for each block of KC rows of op(b) (K split into equal blocks of at most 256):
//     pack op(b)[kc, n] into panels of 32 columns, [k][32] each (zero-padded at the edge)
//     for each block of MC rows of op(a):
//       pack alpha * op(a)[mc, kc] into panels of 12 rows, [k][12] each
//       for each 32-column panel of b:        (its kc x 32 floats stay in L1)
//         for each 12-row panel of a:         (streamed from L2)
//           micro-kernel: 12 x 32 tile of c in 24 zmm accumulators, one FMA per
//           (row, half-panel) per k; c is read only when beta != 0 or for the 2nd+ K block.
//
// Transposed operands are transposed while packing (16x16 register transposes), so all four
// (ta, tb) cases run the same micro-kernel. Edges: rows by a kernel compiled for 1..12 rows,
// columns by AVX-512 write masks. One call is single-threaded; blas.cpp splits large products
// across loom's pool exactly as it does for OpenBLAS (Note [One pool for BLAS]). Scratch is a
// per-thread buffer reused across calls, so a call allocates only when a larger shape first comes.
//
// The path is chosen once per process: AVX-512F present (cpuid) and LOOM_GEMM not "blas". Products
// under 2^20 multiply-adds stay with OpenBLAS, whose small-matrix kernels skip packing.
#pragma once

#include <cstdint>

namespace loom::blas::detail {

// True when this CPU can run sgemm_avx512 and LOOM_GEMM does not ask for OpenBLAS.
bool use_loom_sgemm();
// What runs f32 products, for `loom info`.
const char* sgemm_name();

// Same contract as loom::blas::gemm for float (row-major, beta == 0 never reads c); m, n > 0.
void sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace loom::blas::detail
