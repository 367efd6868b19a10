// See Note [loom sgemm] in gemm_kernel.h. Every function that uses AVX-512 carries the target
// attribute, so this file builds (and the rest of loom runs) on CPUs without it.
#include "gemm_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "loom/config.h"

// GCC 12's avx512fintrin.h builds the "undefined" pass-through vector of unmasked shuffles by
// initialising it from itself, which -Wuninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace loom::blas::detail {
namespace {

#define LOOM_AVX512 __attribute__((target("avx512f,fma")))

const config::ChoiceSetting kGemm(
    "LOOM_GEMM", "loom", {"loom", "blas"},
    "float32 matrix products: loom (its AVX-512 sgemm where the CPU has "
    "AVX-512F, else OpenBLAS) or blas (OpenBLAS always)");

__mmask16 mask_of(int64_t n) {  // the low min(n, 16) lanes
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// Per-thread packing buffers, 64-byte aligned, grown on demand and kept for the next call.
struct Scratch {
  float* data = nullptr;
  int64_t floats = 0;
  ~Scratch() { std::free(data); }
  float* get(int64_t n) {
    if (n > floats) {
      std::free(data);
      data = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>((n + 15) / 16 * 64)));
      if (data == nullptr) throw std::bad_alloc();
      floats = (n + 15) / 16 * 16;
    }
    return data;
  }
};
thread_local Scratch t_apack, t_bpack;

LOOM_AVX512 inline __m512 lo64(__m512 x, __m512 y) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
}
LOOM_AVX512 inline __m512 hi64(__m512 x, __m512 y) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
}

// out[j] (for j < 16) = column j of the 16x16 block whose rows are r[0..15].
LOOM_AVX512 __attribute__((always_inline)) inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g..4g+3 of column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = lo64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = hi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = lo64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = hi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);  // lanes 0,1 of each
    const __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);  // lanes 2,3 of each
    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);       // column c      (lane 0)
    r[4 + c] = _mm512_shuffle_f32x4(x0, y0, 0xDD);   // column 4 + c  (lane 1)
    r[8 + c] = _mm512_shuffle_f32x4(x1, y1, 0x88);   // column 8 + c  (lane 2)
    r[12 + c] = _mm512_shuffle_f32x4(x1, y1, 0xDD);  // column 12 + c (lane 3)
  }
}

// Packs `rows` (<= 16) rows of a row-major matrix, each `kc` long starting at src (row stride ld),
// transposed into dst[k * dst_ld + r] for r < rows (dst_ld = panel width; other lanes untouched
// beyond `width`, which is zero-filled for r >= rows). Used for op(a) when a is not transposed and
// for op(b) when b is transposed: both store the packed dimension along rows.
LOOM_AVX512 void pack_transposed(const float* src, int64_t ld, int64_t rows, int64_t kc,
                                 float scale, float* dst, int64_t dst_ld, int64_t width) {
  const __m512 s = _mm512_set1_ps(scale);
  const __mmask16 store_mask = mask_of(width);
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t kn = std::min<int64_t>(16, kc - k0);
    const __mmask16 km = mask_of(kn);
    __m512 r[16];
    for (int64_t i = 0; i < 16; ++i) {
      // The rows are far apart (ld floats): fetch each one's next-but-three line ahead of use.
      if (i < rows)
        _mm_prefetch(reinterpret_cast<const char*>(src + i * ld + k0 + 64), _MM_HINT_T0);
      r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld + k0) : _mm512_setzero_ps();
      if (scale != 1.0f) r[i] = _mm512_mul_ps(r[i], s);
    }
    transpose16(r);
    for (int64_t kk = 0; kk < kn; ++kk)
      _mm512_mask_storeu_ps(dst + (k0 + kk) * dst_ld, store_mask, r[kk]);
  }
}

// Packs `cols` (<= width) contiguous floats from each of kc rows (stride ld) into dst[k * width +
// c], zero-filling c >= cols. Used for op(a) when a is transposed and op(b) when b is not.
LOOM_AVX512 void pack_rows(const float* src, int64_t ld, int64_t cols, int64_t kc, float scale,
                           float* dst, int64_t width) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = src + k * ld;
    // Rows are ld floats apart, often a multiple of 4 KiB that the hardware prefetcher will not
    // follow: ask for the row eight ahead.
    if (k + 8 < kc) {
      _mm_prefetch(reinterpret_cast<const char*>(row + 8 * ld), _MM_HINT_T0);
      if (cols > 16) _mm_prefetch(reinterpret_cast<const char*>(row + 8 * ld + 16), _MM_HINT_T0);
    }
    for (int64_t c0 = 0; c0 < width; c0 += 16) {
      const __mmask16 lm = c0 < cols ? mask_of(cols - c0) : static_cast<__mmask16>(0);
      const __mmask16 sm = mask_of(width - c0);
      __m512 v = _mm512_maskz_loadu_ps(lm, row + c0);
      if (scale != 1.0f) v = _mm512_mul_ps(v, s);
      _mm512_mask_storeu_ps(dst + k * width + c0, sm, v);
    }
  }
}

// c[R rows, 16 V columns, the last 16 masked by `last`] (=|+=) ap[k][0..R) x bp[k][0..16 V), k <
// kc. ap rows are kMR apart and bp rows kNR; beta == 0 writes without reading c.
template <int R, int V>
LOOM_AVX512 void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                              __mmask16 last, float beta) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
    // The tile's rows are ldc apart (often a multiple of 4 KiB): start fetching them now so that
    // they are in L1 when the k loop ends, whether or not they are read.
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * V - 1), _MM_HINT_T0);
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    // a streams from L2: fetch 16 k ahead (one line covers two k). b is mostly in L1 already.
    if (k % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(ap + 16 * kMR), _MM_HINT_T0);
    __m512 b[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) b[v] = _mm512_load_ps(bp + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r]);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
    ap += kMR;
    bp += kNR;
  }
  const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      const __mmask16 mk = v == V - 1 ? last : static_cast<__mmask16>(0xFFFF);
      __m512 x = acc[r][v];
      if (beta != 0.0f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, cr + 16 * v), x);
      _mm512_mask_storeu_ps(cr + 16 * v, mk, x);
    }
  }
}

using KernelFn = void (*)(int64_t, const float*, const float*, float*, int64_t, __mmask16, float);
template <int R>
constexpr std::array<KernelFn, 3> kernels_for_rows() {
  return {micro_kernel<R, 1>, micro_kernel<R, 2>, micro_kernel<R, 3>};
}
// [rows - 1][vectors - 1]
constexpr std::array<std::array<KernelFn, 3>, kMR> kKernels = {
    kernels_for_rows<1>(), kernels_for_rows<2>(), kernels_for_rows<3>(), kernels_for_rows<4>(),
    kernels_for_rows<5>(), kernels_for_rows<6>(), kernels_for_rows<7>(), kernels_for_rows<8>()};

// c = beta * c for an empty inner dimension (beta == 0 writes zeros, never reading c).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

// Chosen once per process (Note [loom sgemm]).
const char* sgemm_unused_reason() {
  static const char* const reason = kGemm.get() == "blas" ? "LOOM_GEMM=blas"
                                    : __builtin_cpu_supports("avx512f") == 0
                                        ? "this CPU has no AVX-512F"
                                        : "";
  return reason;
}

bool use_loom_sgemm() {
  static const bool use = *sgemm_unused_reason() == '\0';
  return use;
}

void sgemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  // K in equal blocks of at most kMaxKC (784 -> 5 x 157, not 4 x 192 + 16).
  const int64_t kblocks = (k + kMaxKC - 1) / kMaxKC;
  const int64_t kc_max = (k + kblocks - 1) / kblocks;
  const int64_t n_panels = (n + kNR - 1) / kNR;
  const int64_t mc_max = std::min<int64_t>((m + kMR - 1) / kMR * kMR, kMaxMC);
  float* bpack = t_bpack.get(n_panels * kNR * kc_max);
  float* apack = t_apack.get(mc_max * kc_max);

  for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - p0);
    const float blk_beta = p0 == 0 ? beta : 1.0f;
    // Pack op(b)[p0 : p0 + kc, all n] as n_panels panels of kc x kNR.
    for (int64_t jp = 0; jp < n_panels; ++jp) {
      const int64_t j0 = jp * kNR, cols = std::min(kNR, n - j0);
      float* dst = bpack + jp * kNR * kc;
      if (tb) {  // b stored [n, k]: row j0 + c holds op(b)[:, j0 + c]
        for (int64_t h = 0; h < kNR; h += 16) {
          const int64_t rows = std::max<int64_t>(0, std::min<int64_t>(16, cols - h));
          pack_transposed(b + (j0 + h) * ldb + p0, ldb, rows, kc, 1.0f, dst + h, kNR, 16);
        }
      } else {  // b stored [k, n]
        pack_rows(b + p0 * ldb + j0, ldb, cols, kc, 1.0f, dst, kNR);
      }
    }
    for (int64_t i0 = 0; i0 < m; i0 += mc_max) {
      const int64_t mc = std::min(mc_max, m - i0);
      const int64_t m_panels = (mc + kMR - 1) / kMR;
      // Pack alpha * op(a)[i0 : i0 + mc, p0 : p0 + kc] as m_panels panels of kc x kMR.
      for (int64_t ip = 0; ip < m_panels; ++ip) {
        const int64_t r0 = i0 + ip * kMR, rows = std::min(kMR, m - r0);
        float* dst = apack + ip * kMR * kc;
        if (ta) {  // a stored [k, m]
          pack_rows(a + p0 * lda + r0, lda, rows, kc, alpha, dst, kMR);
        } else {  // a stored [m, k]
          pack_transposed(a + r0 * lda + p0, lda, rows, kc, alpha, dst, kMR, kMR);
        }
      }
      for (int64_t jp = 0; jp < n_panels; ++jp) {
        const int64_t j0 = jp * kNR, cols = std::min(kNR, n - j0);
        const int64_t vectors = (cols + 15) / 16;
        const __mmask16 last = mask_of(cols - 16 * (vectors - 1));
        const float* bp = bpack + jp * kNR * kc;
        for (int64_t ip = 0; ip < m_panels; ++ip) {
          const int64_t r0 = i0 + ip * kMR, rows = std::min(kMR, m - r0);
          kKernels[rows - 1][vectors - 1](kc, apack + ip * kMR * kc, bp, c + r0 * ldc + j0, ldc,
                                          last, blk_beta);
        }
      }
    }
  }
}

}  // namespace loom::blas::detail
