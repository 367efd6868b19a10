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
//   for each block of KC rows of op(b) (K split into equal blocks of at most 192):
//     pack op(b)[kc, n] into panels of 48 columns, [k][48] each (zero-padded at the edge)
//     for each block of MC rows of op(a):
//       pack alpha * op(a)[mc, kc] into panels of 8 rows, [k][8] each
//       for each 48-column panel of b:        (its kc x 48 floats mostly stay in L1)
//         for each 8-row panel of a:          (streamed from L2, prefetched 16 k ahead)
//           micro-kernel: 8 x 48 tile of c in 24 zmm accumulators, 8 broadcasts and 3 loads
//           per 24 FMAs; c is read only when beta != 0 or for the 2nd+ K block.
//
// 8 x 48 beat 12 x 32 (12 broadcasts per 24 FMAs) by 4-8 % on these shapes, and 8 divides the
// batch sizes and widths that training uses, so rows rarely need an edge tile.
//
// Transposed operands are transposed while packing (16x16 register transposes), so all four
// (ta, tb) cases run the same micro-kernel. Edges: a kernel is compiled for each of 1..8 rows and
// 1..3 vectors, and the last vector's columns are masked. One call is single-threaded; blas.cpp
// splits large products across loom's pool exactly as it does for OpenBLAS (Note [One pool for
// BLAS]). Scratch is a per-thread buffer reused across calls, so a call allocates only when a
// larger shape first comes.
//
// The path is chosen once per process: AVX-512F present (cpuid) and LOOM_GEMM not "blas". Per call,
// products under 2^20 multiply-adds stay with OpenBLAS (its small-matrix kernels skip packing), and
// so do those of 2^27 or more: at 1024^3 OpenBLAS's blocking for large squares was 6-30 % faster.
#pragma once

#include <cstdint>

namespace loom::blas::detail {

// The blocking of Note [loom sgemm]; `loom info` reports the tile shape from these.
constexpr int64_t kMR = 8;       // rows of c per micro-kernel tile
constexpr int64_t kNR = 48;      // columns of c per tile: three zmm
constexpr int64_t kMaxKC = 192;  // depth of a packed block
constexpr int64_t kMaxMC = 384;  // rows of a per block: 384 x 192 floats = 288 KiB in L2
// Products with fewer multiply-adds than kMinMacs, or kMaxMacs or more, stay with OpenBLAS.
constexpr int64_t kMinMacs = int64_t{1} << 20;
constexpr int64_t kMaxMacs = int64_t{1} << 27;

// True when this CPU can run sgemm_avx512 and LOOM_GEMM does not ask for OpenBLAS.
bool use_loom_sgemm();
// Why use_loom_sgemm() is false ("" when it is true).
const char* sgemm_unused_reason();

// Same contract as loom::blas::gemm for float (row-major, beta == 0 never reads c); m, n > 0.
void sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace loom::blas::detail
