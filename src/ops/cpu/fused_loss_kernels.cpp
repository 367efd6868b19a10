// CPU kernels of the fused cross-entropy (Note [Fused cross-entropy] in fused_loss.cpp): one pass
// per row in the forward (running max and sum of exponentials, in float for float and 16-bit
// logits, in double for double), one pass per row in the backward, rows split across the pool.
#include <cmath>
#include <limits>
#include <vector>

#include "loom/parallel.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"

namespace loom {
namespace {

constexpr int64_t kChunk = 256;  // elements whose maximum is found before their exponentials

// The first row whose target is neither a class nor ignore_index: IndexError naming it.
void check_targets(const char* op, const int64_t* t, int64_t n, int64_t classes, int64_t ignore) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = t[i];
    if (c == ignore || (c >= 0 && c < classes)) continue;
    LOOM_THROW(IndexError, "[", op, "] target ", c, " of row ", i, " is out of bounds for ",
               classes, " classes (valid targets are 0..", classes - 1, " or ignore_index=", ignore,
               ")");
  }
}

// Row statistics of one pass: log-sum-exp and the sum of the logits. Each chunk's maximum is found
// first so that its exponentials need no rescale; the running sum is rescaled only when a chunk
// raises the maximum.
template <class T, class A>
void row_stats(const T* x, int64_t v, A* lse, A* sum_x) {
  A m = -std::numeric_limits<A>::infinity(), s = 0, sx = 0;
  for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
    const int64_t c1 = std::min(v, c0 + kChunk);
    A cm = -std::numeric_limits<A>::infinity();
    for (int64_t c = c0; c < c1; ++c) cm = std::max(cm, convert<A>(x[c]));
    if (cm > m) {
      if (s != A(0)) s *= std::exp(m - cm);
      m = cm;
    }
    A cs = 0, cx = 0;
    if (std::isinf(m) && m < A(0)) {  // every logit so far is -inf: exp(x - m) would be NaN
      for (int64_t c = c0; c < c1; ++c) cx += convert<A>(x[c]);
    } else {
      for (int64_t c = c0; c < c1; ++c) {
        const A xc = convert<A>(x[c]);
        cs += std::exp(xc - m);
        cx += xc;
      }
    }
    s += cs;
    sx += cx;
  }
  *lse = m + std::log(s);
  *sum_x = sx;
}

void fused_cross_entropy_loop(const std::array<Tensor, 2>& outs, const Tensor& logits,
                              const Tensor& target, int64_t ignore_index, double smoothing) {
  constexpr const char* op = "_fused_cross_entropy";
  const int64_t n = logits.size(0), v = logits.size(1);
  const Tensor x = logits.contiguous(), t = target.contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  check_targets(op, tp, n, v, ignore_index);
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), op, [&] {
    using A = opmath_t<scalar_t>;
    A* lse = outs[1].data_ptr<A>();  // float, double for float64
    const scalar_t* xp = x.data_ptr<scalar_t>();
    parallel_for(0, n, std::max<int64_t>(1, 65536 / std::max<int64_t>(v, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) {
                     const scalar_t* row = xp + i * v;
                     A l = 0, sx = 0;
                     row_stats(row, v, &l, &sx);
                     lse[i] = l;
                     const int64_t c = tp[i];
                     if (c == ignore_index) continue;
                     const double nll = static_cast<double>(l - convert<A>(row[c]));
                     double loss = (1.0 - smoothing) * nll;
                     if (smoothing > 0.0) {
                       const double smooth = static_cast<double>(v) * static_cast<double>(l) -
                                             static_cast<double>(sx);
                       loss += smoothing / static_cast<double>(v) * smooth;
                     }
                     row_loss[static_cast<size_t>(i)] = loss;
                   }
                 });
    double total = 0.0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {  // row order: the same bits for any thread count
      total += row_loss[static_cast<size_t>(i)];
      count += tp[i] != ignore_index ? 1 : 0;
    }
    // 16-bit logits give a float32 loss (Note [Fused cross-entropy]).
    outs[0].data_ptr<A>()[0] = static_cast<A>(total / static_cast<double>(count));
  });
}

void fused_cross_entropy_backward_loop(const Tensor& gi, const Tensor& grad, const Tensor& logits,
                                       const Tensor& target, const Tensor& lse,
                                       int64_t ignore_index, double smoothing) {
  constexpr const char* op = "_fused_cross_entropy_backward";
  const int64_t n = logits.size(0), v = logits.size(1);
  const Tensor x = logits.contiguous(), t = target.contiguous(), l = lse.contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  check_targets(op, tp, n, v, ignore_index);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += tp[i] != ignore_index ? 1 : 0;
  LOOM_DISPATCH_FLOAT_TYPES(x.dtype(), op, [&] {
    using A = opmath_t<scalar_t>;
    const A* lp = l.data_ptr<A>();
    const double g = grad.to(kFloat64).contiguous().data_ptr<double>()[0];
    const A scale = static_cast<A>(g / static_cast<double>(count));
    const A on_target = static_cast<A>(1.0 - smoothing);
    const A uniform = static_cast<A>(smoothing / static_cast<double>(v));
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* gp = gi.data_ptr<scalar_t>();
    parallel_for(0, n, std::max<int64_t>(1, 65536 / std::max<int64_t>(v, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) {
                     scalar_t* out = gp + i * v;
                     const int64_t c = tp[i];
                     if (c == ignore_index) {
                       for (int64_t k = 0; k < v; ++k) out[k] = convert<scalar_t>(A(0));
                       continue;
                     }
                     const scalar_t* row = xp + i * v;
                     const A li = static_cast<A>(lp[i]);
                     for (int64_t k = 0; k < v; ++k) {
                       const A p = std::exp(convert<A>(row[k]) - li);
                       out[k] = convert<scalar_t>((p - uniform) * scale);
                     }
                     const A p = std::exp(convert<A>(row[c]) - li);
                     out[c] = convert<scalar_t>((p - on_target - uniform) * scale);
                   }
                 });
  });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&fused_cross_entropy_shape, &fused_cross_entropy_loop>::register_cpu(
      m, "_fused_cross_entropy");
  Structured<&fused_cross_entropy_backward_shape, &fused_cross_entropy_backward_loop>::register_cpu(
      m, "_fused_cross_entropy_backward");
}

}  // namespace loom
