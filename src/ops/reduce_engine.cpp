// The reduction engine: dims, geometry and the hand-vectorised float32 sum kernels.
#include "reduce_engine.h"

#include <numeric>

#include "loom/ops.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics trip false "may be used uninitialized" warnings (GCC PR105593); the
// warnings are reported at lines of the intrinsics header, so silence them there only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace loom::reduce {

std::vector<bool> make_mask(const char* op, TensorMetaRef self, std::optional<IntArrayRef> dim) {
  const int64_t nd = self.dim();
  std::vector<bool> mask(static_cast<size_t>(nd), false);
  if (!dim || dim->empty()) {
    mask.assign(static_cast<size_t>(nd), true);
    return mask;
  }
  for (int64_t d : *dim) {
    const int64_t w = wrap_dim(d, nd, op);
    if (nd == 0) continue;  // a 0-dim tensor accepts dim 0 / -1 and has nothing to reduce
    LOOM_CHECK(!mask[static_cast<size_t>(w)], "[", op, "] dim ", w,
               " appears multiple times in the list of dims ", *dim, " (input shape ", self.sizes,
               ")");
    mask[static_cast<size_t>(w)] = true;
  }
  return mask;
}

std::vector<bool> make_mask_one(const char* op, TensorMetaRef self, int64_t dim) {
  const int64_t nd = self.dim();
  const int64_t w = wrap_dim(dim, nd, op);
  std::vector<bool> mask(static_cast<size_t>(nd), false);
  if (nd > 0) mask[static_cast<size_t>(w)] = true;
  return mask;
}

DimVector reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim) {
  DimVector out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d]) {
      out.push_back(sizes[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

int64_t reduced_count(IntArrayRef sizes, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (mask[d]) n *= sizes[d];
  }
  return n;
}

namespace {

struct Dim {
  int64_t size, in_stride, out_stride;
};

// Sorts by input stride, largest first (stable, so equal strides keep their logical order).
void sort_by_stride(std::vector<Dim>& dims) {
  std::stable_sort(dims.begin(), dims.end(),
                   [](const Dim& a, const Dim& b) { return a.in_stride > b.in_stride; });
}

// Merges neighbours that are one block of memory (in the input and, for kept dims, the output).
std::vector<Dim> coalesce(const std::vector<Dim>& dims, bool check_out) {
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty()) {
      Dim& prev = out.back();
      const bool in_ok = prev.in_stride == d.size * d.in_stride;
      const bool out_ok = !check_out || prev.out_stride == d.size * d.out_stride;
      if (in_ok && out_ok) {
        prev.size *= d.size;
        prev.in_stride = d.in_stride;
        prev.out_stride = d.out_stride;
        continue;
      }
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace

Geometry make_geometry(const Tensor& in, const std::vector<bool>& mask, bool logical_order) {
  const IntArrayRef sizes = in.sizes(), strides = in.strides();
  // Output strides: the output is contiguous over the kept dims in logical order.
  std::vector<int64_t> out_strides(sizes.size(), 0);
  int64_t running = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (!mask[static_cast<size_t>(d)]) {
      out_strides[static_cast<size_t>(d)] = running;
      running *= sizes[static_cast<size_t>(d)];
    }
  }
  std::vector<Dim> kept, red;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    (mask[d] ? red : kept).push_back(Dim{sizes[d], strides[d], out_strides[d]});
  }
  if (!logical_order) {
    sort_by_stride(kept);
    sort_by_stride(red);
  }
  kept = coalesce(kept, true);
  red = coalesce(red, false);
  Geometry g;
  for (const Dim& d : kept) {
    g.kept_sizes.push_back(d.size);
    g.kept_in_strides.push_back(d.in_stride);
    g.kept_out_strides.push_back(d.out_stride);
    g.num_outputs *= d.size;
  }
  for (const Dim& d : red) {
    g.red_sizes.push_back(d.size);
    g.red_strides.push_back(d.in_stride);
    g.reduce_size *= d.size;
  }
  const bool kept_inner = !kept.empty() && kept.back().in_stride == 1;
  if (red.empty()) {
    g.red_sizes.push_back(1);
    g.red_strides.push_back(1);
    g.kind = kept_inner ? Geometry::Kind::Outer : Geometry::Kind::Inner;
  } else if (red.back().in_stride == 1) {
    g.kind = Geometry::Kind::Inner;
  } else if (kept_inner) {
    g.kind = Geometry::Kind::Outer;
  } else {
    g.kind = Geometry::Kind::NeedsCopy;
  }
  return g;
}

Tensor kept_then_reduced(const Tensor& in, std::vector<bool>& mask) {
  std::vector<int64_t> order;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (!mask[d]) order.push_back(static_cast<int64_t>(d));
  }
  const size_t nkept = order.size();
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) order.push_back(static_cast<int64_t>(d));
  }
  for (size_t d = 0; d < mask.size(); ++d) mask[d] = d >= nkept;
  return loom::permute(in, order).contiguous();
}

// Note [Accurate float sums]
// A single float accumulator loses about log2(n) bits on long sums (16M values of 0.1 come out 1%
// off). The kernels below add blocks of 256 elements into 4 x 16 float lanes (so each lane adds
// 4 values) and flush every block into double accumulators; the result is within about an ulp of
// the exact sum (PyTorch's cascade is ~1e-6 off on that input) while staying memory bound.
#if defined(__AVX512F__)

namespace {

// Adds the 16 floats of v into two vectors of 8 doubles. (Through memory and with the maskz forms:
// the plain register forms trip GCC 12's false uninitialized-variable warnings.)
inline void add_to_double(__m512d& d0, __m512d& d1, __m512 v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
  d0 = _mm512_add_pd(d0, _mm512_maskz_cvtps_pd(0xff, _mm256_load_ps(f)));
  d1 = _mm512_add_pd(d1, _mm512_maskz_cvtps_pd(0xff, _mm256_load_ps(f + 8)));
}

template <bool kSquare>
inline __m512 load_term(const float* p) {
  __m512 v = _mm512_loadu_ps(p);
  if constexpr (kSquare) v = _mm512_mul_ps(v, v);
  return v;
}

template <bool kSquare>
double sum_contig_impl(const float* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = i; j < i + kBlock; j += 64) {
      a0 = _mm512_add_ps(a0, load_term<kSquare>(x + j));
      a1 = _mm512_add_ps(a1, load_term<kSquare>(x + j + 16));
      a2 = _mm512_add_ps(a2, load_term<kSquare>(x + j + 32));
      a3 = _mm512_add_ps(a3, load_term<kSquare>(x + j + 48));
    }
    add_to_double(d0, d1, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
  // The tail (< 256 elements) in vectors of 16 and then a masked vector.
  __m512 a = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) a = _mm512_add_ps(a, load_term<kSquare>(x + i));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    if constexpr (kSquare) v = _mm512_mul_ps(v, v);
    a = _mm512_add_ps(a, v);
  }
  add_to_double(d0, d1, a);
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(d0, d1));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

double sum_contig_f32(const float* x, int64_t n) {
  return sum_contig_impl<false>(x, n);
}
double sum_squares_contig_f32(const float* x, int64_t n) {
  return sum_contig_impl<true>(x, n);
}

namespace {

template <bool kMax>
float extreme_contig_impl(const float* x, int64_t n) {
  const __m512 init = _mm512_set1_ps(kMax ? -INFINITY : INFINITY);
  __m512 m0 = init, m1 = init, m2 = init, m3 = init;
  __mmask16 nan = 0;
  auto fold = [&](__m512& m, __m512 v) {
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = kMax ? _mm512_max_ps(m, v) : _mm512_min_ps(m, v);
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    fold(m0, _mm512_loadu_ps(x + i));
    fold(m1, _mm512_loadu_ps(x + i + 16));
    fold(m2, _mm512_loadu_ps(x + i + 32));
    fold(m3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) fold(m0, _mm512_loadu_ps(x + i));
  if (i < n) {
    fold(m0, _mm512_mask_loadu_ps(init, static_cast<__mmask16>((1u << (n - i)) - 1u), x + i));
  }
  if (nan) return NAN;
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, kMax ? _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3))
                              : _mm512_min_ps(_mm512_min_ps(m0, m1), _mm512_min_ps(m2, m3)));
  float r = lanes[0];
  for (int j = 1; j < 16; ++j) r = kMax ? std::max(r, lanes[j]) : std::min(r, lanes[j]);
  return r;
}

// 16 exps: Cephes' polynomial as exp_f32, with vscalefps doing the 2^n (it handles overflow to inf
// and underflow to 0 itself).
inline __m512 exp16(__m512 x) {
  const __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512 result = _mm512_scalef_ps(y, n);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), result, x);
}

}  // namespace

float max_contig_f32(const float* x, int64_t n) {
  return extreme_contig_impl<true>(x, n);
}
float min_contig_f32(const float* x, int64_t n) {
  return extreme_contig_impl<false>(x, n);
}

double sum_exp_f32(const float* x, int64_t n, float m, float* out) {
  constexpr int64_t kBlock = 256;
  const __m512 mv = _mm512_set1_ps(m);
  __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  auto term = [&](int64_t j) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv));
    if (out) _mm512_storeu_ps(out + j, e);
    return e;
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = i; j < i + kBlock; j += 64) {
      a0 = _mm512_add_ps(a0, term(j));
      a1 = _mm512_add_ps(a1, term(j + 16));
      a2 = _mm512_add_ps(a2, term(j + 32));
      a3 = _mm512_add_ps(a3, term(j + 48));
    }
    add_to_double(d0, d1, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
  __m512 a = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) a = _mm512_add_ps(a, term(i));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(v, mv)));
    if (out) _mm512_mask_storeu_ps(out + i, k, e);
    a = _mm512_add_ps(a, e);
  }
  add_to_double(d0, d1, a);
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(d0, d1));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

#else  // portable version of the same blocking

namespace {

template <bool kSquare>
double sum_contig_impl(const float* x, int64_t n) {
  constexpr int kLanes = 64;
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + 256);
    float lanes[kLanes] = {};
    for (; i + kLanes <= end; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] += kSquare ? x[i + j] * x[i + j] : x[i + j];
    }
    for (int j = 0; i < end; ++i, ++j) lanes[j] += kSquare ? x[i] * x[i] : x[i];
    double s = 0;
    for (int j = 0; j < kLanes; ++j) s += lanes[j];
    total += s;
  }
  return total;
}

}  // namespace

double sum_contig_f32(const float* x, int64_t n) {
  return sum_contig_impl<false>(x, n);
}
double sum_squares_contig_f32(const float* x, int64_t n) {
  return sum_contig_impl<true>(x, n);
}

namespace {

template <bool kMax>
float extreme_contig_impl(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float lanes[kLanes];
  bool nan[kLanes] = {};
  for (auto& l : lanes) l = kMax ? -INFINITY : INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      nan[j] |= v != v;
      lanes[j] = (kMax ? v > lanes[j] : v < lanes[j]) ? v : lanes[j];
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const float v = x[i + j];
    nan[j] |= v != v;
    lanes[j] = (kMax ? v > lanes[j] : v < lanes[j]) ? v : lanes[j];
  }
  float r = lanes[0];
  for (int j = 0; j < kLanes; ++j) {
    if (nan[j]) return NAN;
    r = kMax ? std::max(r, lanes[j]) : std::min(r, lanes[j]);
  }
  return r;
}

}  // namespace

float max_contig_f32(const float* x, int64_t n) {
  return extreme_contig_impl<true>(x, n);
}
float min_contig_f32(const float* x, int64_t n) {
  return extreme_contig_impl<false>(x, n);
}

double sum_exp_f32(const float* x, int64_t n, float m, float* out) {
  constexpr int64_t kBlock = 256;
  float buf[kBlock];
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t len = std::min(kBlock, n - b0);
    float* __restrict dst = out ? out + b0 : buf;
    const float* __restrict src = x + b0;
    for (int64_t i = 0; i < len; ++i) dst[i] = exp_f32(src[i] - m);
    float lanes[16] = {};
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
      LOOM_LANE_LOOP for (int j = 0; j < 16; ++j) lanes[j] += dst[i + j];
    }
    for (int j = 0; i + j < len; ++j) lanes[j] += dst[i + j];
    for (float l : lanes) total += static_cast<double>(l);
  }
  return total;
}

#endif

// Column sums: rows are added in float, four at a time, into a float block that is flushed into
// the double accumulators every 16 rows (see Note [Accurate float sums]).
void sum_rows_f32(double* acc, const float* x, int64_t rows, int64_t row_stride, int64_t width) {
  constexpr int64_t kRowBlock = 16;
  constexpr int64_t kMaxWidth = 512;
  float block[kMaxWidth];
  for (int64_t w0 = 0; w0 < width; w0 += kMaxWidth) {
    const int64_t w = std::min(kMaxWidth, width - w0);
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int64_t r1 = std::min(rows, r0 + kRowBlock);
      for (int64_t b = 0; b < w; ++b) block[b] = 0.0f;
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4) {
        const float* __restrict q0 = x + r * row_stride + w0;
        const float* __restrict q1 = q0 + row_stride;
        const float* __restrict q2 = q1 + row_stride;
        const float* __restrict q3 = q2 + row_stride;
        for (int64_t b = 0; b < w; ++b) block[b] += (q0[b] + q1[b]) + (q2[b] + q3[b]);
      }
      for (; r < r1; ++r) {
        const float* __restrict q = x + r * row_stride + w0;
        for (int64_t b = 0; b < w; ++b) block[b] += q[b];
      }
      double* __restrict a = acc + w0;
      for (int64_t b = 0; b < w; ++b) a[b] += static_cast<double>(block[b]);
    }
  }
}

}  // namespace loom::reduce
