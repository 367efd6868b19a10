// The reduction engine (internal to the ops layer): runs a reducer over some dims of a tensor.
//
// A reducer describes one reduction (sum, max, argmax, var, ...) over a run of elements; the engine
// decides how to walk memory, how to split the work across the intra-op pool and where the results
// go. Reductions over the same shape give bit-identical results whatever the number of threads: the
// way work is split depends only on the shape (see Note [Reduction geometry]).
//
// Note [Reduction geometry]
// The input is seen as kept dims x reduced dims. Both groups drop size-1 dims, may be reordered by
// stride (not for reducers that return indices, whose flat index must follow the logical order) and
// coalesce dims that are contiguous in memory. Then one of two loops runs:
//  * Inner: the innermost reduced dim has stride 1. Each output reduces rows of contiguous elements
//    with the reducer's vectorised `reduce_contig` (several accumulators, cascade for float sums);
//    rows of up to kShortRow elements take a plain loop instead. This is sum over the last dim of
//    [N, C], and sum of everything.
//  * Outer: the innermost kept dim has stride 1. Rows of B contiguous outputs are accumulated
//    element-wise into a buffer, vectorised over B (`accumulate_rows`). This is sum over dim 0 of
//    [N, C] (column sums, e.g. bias gradients).
// Anything else (e.g. a non-contiguous slice) is first copied into a contiguous tensor laid out as
// [kept..., reduced...], which makes it Inner. When there are few outputs and many elements, one
// reduction is split into fixed-size chunks whose partial results are combined in order.
//
// A reducer R is a small object (it may hold parameters such as var's correction) providing:
//   in_t, acc_t; kIndexed (its step also takes the element's flat index in the reduced dims);
//   acc_t init(); acc_t step(acc_t, value[, int64_t index]) with value = load(in_t);
//   acc_t combine(acc_t a, acc_t b) (a covers earlier elements than b);
//   void store(void* const* outs, int64_t offset, acc_t, int64_t count) writing the result(s) of
//   one output element (count = elements reduced).
// Optionally it replaces the loops: acc_t reduce_contig(const in_t*, int64_t n, int64_t index0) and
//   void accumulate_rows(acc_t* acc, const in_t* x, int64_t rows, int64_t row_stride, int64_t
//   width, int64_t index0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "loom/error.h"
#include "loom/parallel.h"
#include "loom/tensor.h"
#include "structured.h"

namespace loom::reduce {

// ---- dims and shapes ----

// Which dims of self are reduced; `dim` nullopt or empty reduces all. Negative dims wrap; an
// out-of-range dim is an IndexError and a repeated dim a ValueError, both naming op and shape.
std::vector<bool> make_mask(const char* op, TensorMetaRef self, std::optional<IntArrayRef> dim);
// The mask of one dim (for ops that reduce a single dim).
std::vector<bool> make_mask_one(const char* op, TensorMetaRef self, int64_t dim);
DimVector reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim);
// sum and prod accumulate integers (and bool) in int64; dtype= casts the input first and names
// the result's dtype.
inline DType sum_acc_dtype(DType in) {
  return is_integral(in, true) ? kInt64 : in;
}
// Number of elements that each output reduces.
int64_t reduced_count(IntArrayRef sizes, const std::vector<bool>& mask);

struct Geometry {
  enum class Kind { Inner, Outer, NeedsCopy };
  Kind kind = Kind::Inner;
  // Kept dims, coalesced, outermost first: sizes, input strides, output strides (elements).
  DimVector kept_sizes, kept_in_strides, kept_out_strides;
  // Reduced dims, coalesced, outermost first: sizes and input strides (elements). Never empty.
  DimVector red_sizes, red_strides;
  int64_t num_outputs = 1;
  int64_t reduce_size = 1;
};

// The geometry of reducing `in` over `mask` into a contiguous output; see Note [Reduction
// geometry].
Geometry make_geometry(const Tensor& in, const std::vector<bool>& mask, bool logical_order);
// A contiguous copy of `in` laid out as [kept dims..., reduced dims...], each group in logical
// order; `mask` is updated to match.
Tensor kept_then_reduced(const Tensor& in, std::vector<bool>& mask);

// ---- element loads ----

// IEEE half bits to float without a call (so that loops over half tensors vectorise).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) {
    bits = 0x7f800000u | ((em & 0x3ffu) << 13);  // inf / nan
  } else {
    float f;
    const uint32_t shifted = em << 13;
    std::memcpy(&f, &shifted, 4);
    f *= 0x1p112f;  // rebias the exponent; exact for normals and subnormals
    std::memcpy(&bits, &f, 4);
  }
  bits |= sign;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// The value a reducer computes on: float for the 16-bit float types, the element itself otherwise.
template <class T>
inline auto load(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return half_to_float(x.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16::to_float(x.bits);
  } else {
    return x;
  }
}

// exp(x) for float, written so that loops over it vectorise (Cephes' polynomial, within 2 ulp of
// expf). Underflows to 0 below about -103.9, overflows to inf above about 88.7, nan stays nan.
inline float exp_f32(float x) {
  const bool is_nan = x != x;
  const float c = std::min(std::max(is_nan ? 0.0f : x, -104.0f), 89.0f);
  const float fx = std::nearbyint(c * 1.44269504088896341f);  // (floor would not vectorise)
  float r = c - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  // 2^n as two factors so that n in [-150, 128] never leaves the exponent range of either.
  const int32_t n = static_cast<int32_t>(fx);
  const int32_t n1 = n / 2, n2 = n - n1;
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(n2 + 127)
                                                                  << 23;
  float p1, p2;
  std::memcpy(&p1, &b1, 4);
  std::memcpy(&p2, &b2, 4);
  const float result = y * p1 * p2;
  return is_nan ? x : result;
}

// Put before the inner `for (j < kLanes)` loop of a multi-accumulator reduction: GCC would fully
// unroll it and then fail to vectorise the pieces (for selects such as a NaN-propagating max); kept
// as a loop, the loop vectoriser turns the lanes into SIMD registers.
#define LOOM_LANE_LOOP _Pragma("GCC unroll 1")

// ---- the loops ----

namespace detail {

template <class R>
using acc_of = typename R::acc_t;

// Reduces n contiguous elements whose flat indices start at index0.
template <class R>
inline acc_of<R> reduce_contig(const R& r, const typename R::in_t* x, int64_t n, int64_t index0) {
  if constexpr (requires { r.reduce_contig(x, n, index0); }) {
    return r.reduce_contig(x, n, index0);
  } else if constexpr (R::kIndexed) {
    acc_of<R> a = r.init();
    for (int64_t i = 0; i < n; ++i) a = r.step(a, load(x[i]), index0 + i);
    return a;
  } else {
    // Independent accumulators so that the compiler can vectorise and overlap latencies.
    constexpr int kLanes = 32;
    acc_of<R> lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) lanes[j] = r.init();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      LOOM_LANE_LOOP for (int j = 0; j < kLanes; ++j) lanes[j] = r.step(lanes[j], load(x[i + j]));
    }
    for (int j = 0; i + j < n; ++j) lanes[j] = r.step(lanes[j], load(x[i + j]));
    for (int w = kLanes / 2; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j) lanes[j] = r.combine(lanes[j], lanes[j + w]);
    }
    return lanes[0];
  }
}

// acc[b] folds in x[k * row_stride + b] for k < rows, b < width; row k has flat index index0 + k.
template <class R>
inline void accumulate_rows(const R& r, acc_of<R>* acc, const typename R::in_t* x, int64_t rows,
                            int64_t row_stride, int64_t width, int64_t index0) {
  if constexpr (requires { r.accumulate_rows(acc, x, rows, row_stride, width, index0); }) {
    r.accumulate_rows(acc, x, rows, row_stride, width, index0);
  } else {
    for (int64_t k = 0; k < rows; ++k) {
      const typename R::in_t* q = x + k * row_stride;
      if constexpr (R::kIndexed) {
        for (int64_t b = 0; b < width; ++b) acc[b] = r.step(acc[b], load(q[b]), index0 + k);
      } else {
        for (int64_t b = 0; b < width; ++b) acc[b] = r.step(acc[b], load(q[b]));
      }
    }
  }
}

// Offset (elements) of flat position `i` within the dims [0, ndim) of sizes/strides.
inline int64_t offset_of(int64_t i, const int64_t* sizes, const int64_t* strides, int64_t ndim) {
  int64_t off = 0;
  for (int64_t d = ndim - 1; d >= 0 && i > 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// A heap array (std::vector<bool> would not do for bool accumulators).
template <class T>
struct Buffer {
  explicit Buffer(int64_t n) : p(new T[static_cast<size_t>(n)]) {}
  T* data() { return p.get(); }
  T& operator[](int64_t i) { return p[static_cast<size_t>(i)]; }
  std::unique_ptr<T[]> p;
};

constexpr int64_t kChunk = 1 << 16;  // elements per task when one reduction is split
constexpr int64_t kTile = 512;       // outputs per task in the Outer loop
constexpr int64_t kShortRow = 16;    // Inner rows up to this long take a plain loop

// Reduces the flat range [f0, f1) of the reduced dims for the output whose input starts at p.
template <class R>
acc_of<R> inner_range(const R& r, const Geometry& g, const typename R::in_t* p, int64_t f0,
                      int64_t f1) {
  const int64_t nred = static_cast<int64_t>(g.red_sizes.size());
  const int64_t len = g.red_sizes[g.red_sizes.size() - 1];
  acc_of<R> acc = r.init();
  int64_t row = f0 / len, pos = f0 % len;
  while (f0 < f1) {
    const int64_t n = std::min(len - pos, f1 - f0);
    const int64_t off = offset_of(row, g.red_sizes.data(), g.red_strides.data(), nred - 1);
    acc = r.combine(acc, reduce_contig(r, p + off + pos, n, f0));
    f0 += n;
    ++row;
    pos = 0;
  }
  return acc;
}

template <class R>
void run_inner(const R& r, const Geometry& g, const typename R::in_t* base, void* const* outs) {
  const int64_t m_total = g.num_outputs, n = g.reduce_size;
  const int64_t nkept = static_cast<int64_t>(g.kept_sizes.size());
  auto in_off = [&](int64_t m) {
    return offset_of(m, g.kept_sizes.data(), g.kept_in_strides.data(), nkept);
  };
  auto out_off = [&](int64_t m) {
    return offset_of(m, g.kept_sizes.data(), g.kept_out_strides.data(), nkept);
  };
  if (m_total == 1 || (m_total < 8 && n >= 2 * kChunk)) {
    // Few long reductions: split each into fixed chunks, combine the partials in order.
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    Buffer<acc_of<R>> parts(chunks);
    for (int64_t m = 0; m < m_total; ++m) {
      const typename R::in_t* p = base + in_off(m);
      parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          parts[static_cast<size_t>(c)] =
              inner_range(r, g, p, c * kChunk, std::min(n, (c + 1) * kChunk));
        }
      });
      acc_of<R> acc = parts[0];
      for (int64_t c = 1; c < chunks; ++c) acc = r.combine(acc, parts[static_cast<size_t>(c)]);
      r.store(outs, out_off(m), acc, n);
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1));
  if (g.red_sizes.size() == 1 && n <= kShortRow && nkept == 1) {
    // Many short rows (e.g. the 10 classes of [N, 10]): a plain loop, no per-row setup.
    const int64_t in_stride = g.kept_in_strides[0], out_stride = g.kept_out_strides[0];
    parallel_for(0, m_total, grain, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const typename R::in_t* p = base + m * in_stride;
        acc_of<R> acc = r.init();
        for (int64_t k = 0; k < n; ++k) {
          if constexpr (R::kIndexed) {
            acc = r.step(acc, load(p[k]), k);
          } else {
            acc = r.step(acc, load(p[k]));
          }
        }
        r.store(outs, m * out_stride, acc, n);
      }
    });
    return;
  }
  parallel_for(0, m_total, grain, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      r.store(outs, out_off(m), inner_range(r, g, base + in_off(m), 0, n), n);
    }
  });
}

template <class R>
void run_outer(const R& r, const Geometry& g, const typename R::in_t* base, void* const* outs) {
  using acc_t = acc_of<R>;
  const int64_t nkept = static_cast<int64_t>(g.kept_sizes.size());
  const int64_t width = g.kept_sizes[static_cast<size_t>(nkept - 1)];
  const int64_t out_stride = g.kept_out_strides[static_cast<size_t>(nkept - 1)];
  const int64_t outer = g.num_outputs / width;
  const int64_t tiles = (width + kTile - 1) / kTile;
  const int64_t tasks = outer * tiles;
  const int64_t n = g.reduce_size;
  const int64_t nred = static_cast<int64_t>(g.red_sizes.size());
  const int64_t run = g.red_sizes[static_cast<size_t>(nred - 1)];  // rows with one stride
  const int64_t run_stride = g.red_strides[static_cast<size_t>(nred - 1)];
  // Split the rows too when there are too few tasks to share out and the rows are many.
  const int64_t tile_w = std::min(width, kTile);
  int64_t row_chunk = n;
  if (tasks < 8 && n * tile_w >= 2 * kChunk) row_chunk = std::max<int64_t>(1, kChunk / tile_w);
  const int64_t row_chunks = (n + row_chunk - 1) / row_chunk;

  auto accumulate = [&](acc_t* acc, const typename R::in_t* p, int64_t w, int64_t r0, int64_t r1) {
    for (int64_t b = 0; b < w; ++b) acc[b] = r.init();
    while (r0 < r1) {
      const int64_t pos = r0 % run;
      const int64_t rows = std::min(run - pos, r1 - r0);
      const int64_t off = offset_of(r0 / run, g.red_sizes.data(), g.red_strides.data(), nred - 1);
      accumulate_rows(r, acc, p + off + pos * run_stride, rows, run_stride, w, r0);
      r0 += rows;
    }
  };
  auto task_input = [&](int64_t task) {
    const int64_t o = task / tiles, t = task % tiles;
    return base + offset_of(o, g.kept_sizes.data(), g.kept_in_strides.data(), nkept - 1) +
           t * kTile;
  };
  auto task_output = [&](int64_t task) {
    const int64_t o = task / tiles, t = task % tiles;
    return offset_of(o, g.kept_sizes.data(), g.kept_out_strides.data(), nkept - 1) +
           t * kTile * out_stride;
  };
  auto task_width = [&](int64_t task) { return std::min(kTile, width - (task % tiles) * kTile); };

  if (row_chunks == 1) {
    parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      Buffer<acc_t> acc(tile_w);
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t w = task_width(task);
        accumulate(acc.data(), task_input(task), w, 0, n);
        const int64_t o = task_output(task);
        for (int64_t b = 0; b < w; ++b) r.store(outs, o + b * out_stride, acc[b], n);
      }
    });
    return;
  }
  Buffer<acc_t> parts(tasks * row_chunks * tile_w);
  parallel_for(0, tasks * row_chunks, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t task = j / row_chunks, c = j % row_chunks;
      accumulate(parts.data() + j * tile_w, task_input(task), task_width(task), c * row_chunk,
                 std::min(n, (c + 1) * row_chunk));
    }
  });
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t w = task_width(task), o = task_output(task);
    acc_t* first = parts.data() + task * row_chunks * tile_w;
    for (int64_t c = 1; c < row_chunks; ++c) {
      const acc_t* next = first + c * tile_w;
      for (int64_t b = 0; b < w; ++b) first[b] = r.combine(first[b], next[b]);
    }
    for (int64_t b = 0; b < w; ++b) r.store(outs, o + b * out_stride, first[b], n);
  }
}

}  // namespace detail

// Reduces `input` (dtype R::in_t, CPU) over `mask` into out0 (and out1 for reducers with two
// results), which are contiguous, shaped like the kept dims, and already allocated.
template <class R>
void run(const R& r, const Tensor& input, std::vector<bool> mask, const Tensor& out0,
         const Tensor& out1 = Tensor()) {
  void* outs[2] = {out0.data_ptr(), out1.defined() ? out1.data_ptr() : nullptr};
  const int64_t m_total = out0.numel();
  if (m_total == 0) return;
  if (reduced_count(input.sizes(), mask) == 0) {
    for (int64_t m = 0; m < m_total; ++m) r.store(outs, m, r.init(), 0);
    return;
  }
  Tensor in = input;
  Geometry g = make_geometry(in, mask, R::kIndexed);
  if (g.kind == Geometry::Kind::NeedsCopy) {
    in = kept_then_reduced(input, mask);
    g = make_geometry(in, mask, R::kIndexed);
  }
  const auto* base = static_cast<const typename R::in_t*>(in.data_ptr());
  if (g.kind == Geometry::Kind::Outer) {
    detail::run_outer(r, g, base, outs);
  } else {
    detail::run_inner(r, g, base, outs);
  }
}

// ---- vectorised float32 kernels (reduce_engine.cpp) ----

// Sum of n contiguous floats, accumulated in float blocks that are flushed into double.
double sum_contig_f32(const float* x, int64_t n);
// Sum of squares, the same way.
double sum_squares_contig_f32(const float* x, int64_t n);
// acc[b] += sum over r < rows of x[r * row_stride + b], for b < width.
void sum_rows_f32(double* acc, const float* x, int64_t rows, int64_t row_stride, int64_t width);
// Max / min of n contiguous floats (n >= 1), NaN if any element is NaN.
float max_contig_f32(const float* x, int64_t n);
float min_contig_f32(const float* x, int64_t n);
// Sum of exp(x[i] - m) (float blocks flushed into double); also writes the exps to `out` unless it
// is null.
double sum_exp_f32(const float* x, int64_t n, float m, float* out);

}  // namespace loom::reduce
