// CPU kernels of the nn family: layer norm and its backward (two passes per row, sums in double),
// dropout (Philox draws, Note [Dropout draws]), nll_loss and its backward, into outputs the shape
// functions sized.
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "loom/generator.h"
#include "loom/parallel.h"
#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/tensor_iterator.h"

namespace loom {
namespace {

bool has(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

// nll_loss's class count and the elements per sample's spatial dims (d1, ...), of an input that
// nll_loss_shape accepted: (C), (N, C) or (N, C, d1, ...).
std::pair<int64_t, int64_t> nll_dims(const Tensor& input) {
  const int64_t classes = input.size(input.dim() == 1 ? 0 : 1);
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  return {classes, spatial};
}

// Sum of x (or of (x - center)^2 when squared) in double. Eight independent accumulators let the
// compiler vectorise: with one, strict floating-point order makes the loop a serial chain of adds.
template <class M, class T>
double lane_sum(const T* x, int64_t n, double center, bool squared) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t j = 0;
  if (squared) {
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const double d = static_cast<double>(static_cast<M>(x[j + l])) - center;
        acc[l] += d * d;
      }
    }
  } else {
    for (; j + kLanes <= n; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(static_cast<M>(x[j + l]));
    }
  }
  double total = 0;
  for (int l = 0; l < kLanes; ++l) total += acc[l];
  for (; j < n; ++j) {
    const double d = static_cast<double>(static_cast<M>(x[j])) - center;
    total += squared ? d * d : d;
  }
  return total;
}

void native_layer_norm_loop(const std::array<Tensor, 3>& outs, const Tensor& input,
                            IntArrayRef normalized_shape, const std::optional<Tensor>& weight,
                            const std::optional<Tensor>& bias, double eps) {
  const Tensor &out = outs[0], &mean = outs[1], &rstd = outs[2];
  const int64_t cols = multiply_sizes(normalized_shape);
  const int64_t rows = mean.numel();
  const DType dt = input.dtype();
  if (rows == 0) return;

  Tensor x = contiguous(input);
  LOOM_DISPATCH_FLOAT_TYPES(dt, "native_layer_norm", [&] {
    using M = opmath_t<scalar_t>;
    // The affine parameters in the compute type, contiguous.
    Tensor w = has(weight) ? contiguous(weight->to(DTypeOf<M>::value)) : Tensor();
    Tensor b = has(bias) ? contiguous(bias->to(DTypeOf<M>::value)) : Tensor();
    const M* wp = w.defined() ? w.data_ptr<M>() : nullptr;
    const M* bp = b.defined() ? b.data_ptr<M>() : nullptr;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    scalar_t* mp = mean.data_ptr<scalar_t>();
    scalar_t* rp = rstd.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
    parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* xr = xp + r * cols;
        scalar_t* orow = op + r * cols;
        // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
        const double mu =
            cols > 0 ? lane_sum<M>(xr, cols, 0.0, false) / static_cast<double>(cols) : 0.0;
        const double var =
            cols > 0 ? lane_sum<M>(xr, cols, mu, true) / static_cast<double>(cols) : 0.0;
        const M m = static_cast<M>(mu);
        const M rs = static_cast<M>(1.0 / std::sqrt(var + eps));
        for (int64_t j = 0; j < cols; ++j) {
          M y = (static_cast<M>(xr[j]) - m) * rs;
          if (wp) y *= wp[j];
          if (bp) y += bp[j];
          orow[j] = convert<scalar_t>(y);
        }
        mp[r] = convert<scalar_t>(m);
        rp[r] = convert<scalar_t>(rs);
      }
    });
  });
}

// (sum(a), sum(a * b)) over n elements, added in double in eight lanes (as lane_sum).
template <class M>
std::pair<double, double> lane_dot_sums(const M* a, const M* b, int64_t n) {
  constexpr int kLanes = 8;
  double sa[kLanes] = {}, sab[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      sa[l] += static_cast<double>(a[j + l]);
      sab[l] += static_cast<double>(a[j + l]) * static_cast<double>(b[j + l]);
    }
  }
  double ta = 0, tab = 0;
  for (int l = 0; l < kLanes; ++l) {
    ta += sa[l];
    tab += sab[l];
  }
  for (; j < n; ++j) {
    ta += static_cast<double>(a[j]);
    tab += static_cast<double>(a[j]) * static_cast<double>(b[j]);
  }
  return {ta, tab};
}

// Note [Layer norm backward]
// With xhat = (x - mean) * rstd and gw = grad_out * weight (grad_out without weight), per row:
//   grad_input = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
// and over all rows: grad_weight = sum(grad_out * xhat), grad_bias = sum(grad_out). Rows are cut
// into at most kLnBlocks blocks (a count that depends on the shape only, so results do not depend
// on the thread count); each block writes its rows' grad_input and its partial column sums in one
// pass, and the partials are added in block order.
constexpr int64_t kLnBlocks = 64;

void native_layer_norm_backward_loop(const std::array<Tensor, 3>& grads, const Tensor& grad_out,
                                     const Tensor& input, IntArrayRef normalized_shape,
                                     const Tensor& mean, const Tensor& rstd,
                                     const std::optional<Tensor>& weight,
                                     const std::optional<Tensor>& bias, bool input_mask,
                                     bool weight_mask, bool bias_mask) {
  constexpr const char* op = "native_layer_norm_backward";
  const Tensor &gi = grads[0], &gw = grads[1], &gb = grads[2];
  const int64_t cols = multiply_sizes(normalized_shape);
  const int64_t rows = mean.numel();
  const DType dt = input.dtype();

  const Tensor x = contiguous(input), g = contiguous(grad_out);
  const Tensor mu_t = contiguous(mean).to(kFloat64), rs_t = contiguous(rstd).to(kFloat64);
  const double* mu = mu_t.data_ptr<double>();
  const double* rs = rs_t.data_ptr<double>();
  const bool sums = weight_mask || bias_mask;
  const int64_t blocks = std::min(rows, kLnBlocks);
  const int64_t rows_per_block = blocks > 0 ? (rows + blocks - 1) / blocks : 0;
  // Partial column sums per block: [blocks][2][cols] (grad_weight's, then grad_bias's).
  std::vector<double> partial(sums ? static_cast<size_t>(blocks * 2 * cols) : 0, 0.0);
  LOOM_DISPATCH_FLOAT_TYPES(dt, op, [&] {
    using M = opmath_t<scalar_t>;
    const Tensor w = has(weight) ? contiguous(weight->to(DTypeOf<M>::value)) : Tensor();
    const M* wp = w.defined() ? w.data_ptr<M>() : nullptr;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* gip = gi.defined() ? gi.data_ptr<scalar_t>() : nullptr;
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      // One row's xhat, grad_out and grad_out * weight in the compute type; simple loops over
      // them vectorise.
      std::vector<M> buf(static_cast<size_t>(3 * cols));
      M* __restrict xh = buf.data();
      M* __restrict gv = xh + cols;
      M* __restrict gw = gv + cols;
      for (int64_t blk = b0; blk < b1; ++blk) {
        double* __restrict pw = sums ? partial.data() + blk * 2 * cols : nullptr;
        const int64_t r1 = std::min(rows, (blk + 1) * rows_per_block);
        for (int64_t r = blk * rows_per_block; r < r1; ++r) {
          const scalar_t* __restrict xr = xp + r * cols;
          const scalar_t* __restrict gr = gp + r * cols;
          const M m = static_cast<M>(mu[r]), rsm = static_cast<M>(rs[r]);
          for (int64_t j = 0; j < cols; ++j) xh[j] = (static_cast<M>(xr[j]) - m) * rsm;
          for (int64_t j = 0; j < cols; ++j) gv[j] = static_cast<M>(gr[j]);
          if (pw) {
            for (int64_t j = 0; j < cols; ++j) pw[j] += static_cast<double>(gv[j] * xh[j]);
            for (int64_t j = 0; j < cols; ++j) pw[cols + j] += static_cast<double>(gv[j]);
          }
          if (!gip) continue;
          const M* gwr = gv;
          if (wp) {
            for (int64_t j = 0; j < cols; ++j) gw[j] = gv[j] * wp[j];
            gwr = gw;
          }
          const auto [s1, s2] = lane_dot_sums(gwr, xh, cols);
          const M m1 = static_cast<M>(s1 / static_cast<double>(cols));
          const M m2 = static_cast<M>(s2 / static_cast<double>(cols));
          scalar_t* __restrict out = gip + r * cols;
          for (int64_t j = 0; j < cols; ++j) {
            out[j] = convert<scalar_t>(rsm * (gwr[j] - m1 - xh[j] * m2));
          }
        }
      }
    });
  });
  auto write_sums = [&](const Tensor& out, int64_t which) {
    if (!out.defined()) return;
    std::vector<double> total(static_cast<size_t>(cols), 0.0);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const double* p = partial.data() + (blk * 2 + which) * cols;
      for (int64_t j = 0; j < cols; ++j) total[static_cast<size_t>(j)] += p[j];
    }
    out.copy_(from_vector<double>(total, out.sizes()));
  };
  write_sums(gw, 0);
  write_sums(gb, 1);
}

// Note [Dropout draws]
// A training call with p > 0 reserves numel 32-bit draws from the generator; element i is kept when
// draw i, as a uniform float in [0, 1), is below 1 - p. So the mask depends only on (seed, offset,
// numel), not on the number of threads, and the call advances the generator by ceil(numel / 4).

void native_dropout_loop(const std::array<Tensor, 2>& outs, const Tensor& input, double p,
                         bool train, const std::optional<Generator>& gen) {
  const Tensor &out = outs[0], &mask = outs[1];
  const DType dt = input.dtype();
  const int64_t n = input.numel();
  if (n == 0) return;
  bool* mp = mask.data_ptr<bool>();
  if (!train || p == 0.0) {
    copy_(out, input);
    std::memset(mp, 1, static_cast<size_t>(n));
    return;
  }
  const GeneratorState st = (gen ? *gen : default_generator()).reserve(static_cast<uint64_t>(n));
  if (p == 1.0) {
    fill_(out, 0);
    std::memset(mp, 0, static_cast<size_t>(n));
    return;
  }
  Tensor x = contiguous(input);
  const float keep = static_cast<float>(1.0 - p);
  LOOM_DISPATCH_FLOAT_TYPES(dt, "native_dropout", [&] {
    using M = opmath_t<scalar_t>;
    const M scale = static_cast<M>(1.0 / (1.0 - p));
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t blocks = (n + 3) / 4;  // one Philox block gives the draws of 4 elements
    parallel_for(0, blocks, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) {
        const auto draws = philox4x32(st.offset + static_cast<uint64_t>(blk), 0, st.seed);
        const int64_t i0 = blk * 4, i1 = std::min(n, i0 + 4);
        for (int64_t i = i0; i < i1; ++i) {
          const bool k = uint32_to_unit_float(draws[static_cast<size_t>(i - i0)]) < keep;
          mp[i] = k;
          op[i] = k ? convert<scalar_t>(static_cast<M>(xp[i]) * scale) : scalar_t(0);
        }
      }
    });
  });
  return;
}

Tensor native_dropout_backward_kernel(const Tensor& grad_output, const Tensor& mask, double scale) {
  constexpr const char* op = "native_dropout_backward";
  native_dropout_backward_shape(grad_output, mask, scale);
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.outputs = {Tensor()};
  cfg.inputs = {grad_output, mask};
  cfg.input_skips_promotion = {false, true};
  TensorIterator it(std::move(cfg));
  LOOM_DISPATCH_FLOAT_TYPES(grad_output.dtype(), op, [&] {
    using M = opmath_t<scalar_t>;
    const M s = static_cast<M>(scale);
    // g * mask * scale, as PyTorch (so a NaN gradient stays NaN where the mask is false).
    it.for_each([s](char** d, const int64_t* st, int64_t n) {
      binary_loop<scalar_t, scalar_t, bool>(d, st, n, [s](scalar_t g, bool m) {
        return convert<scalar_t>(static_cast<M>(g) * (m ? s : M(0)));
      });
    });
  });
  it.finish();
  return it.output(0);
}

// The targets as int64, each checked to be a class or ignore_index.
Tensor checked_targets(const char* op, const Tensor& target, int64_t classes,
                       int64_t ignore_index) {
  Tensor t = contiguous(target.to(kInt64));
  const int64_t* tp = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t c = tp[i];
    if (c == ignore_index) continue;
    LOOM_CHECK_INDEX(c >= 0 && c < classes, "[", op, "] target ", c, " is out of bounds for ",
                     classes, " classes (valid targets are 0..", classes - 1,
                     " or ignore_index=", ignore_index, ")");
  }
  return t;
}

// Targets are checked against the classes here, as they are data.
void nll_loss_loop(const Tensor& out, const Tensor& input, const Tensor& target,
                   const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index) {
  const DType dt = input.dtype();
  const auto [classes, spatial] = nll_dims(input);

  Tensor t = checked_targets("nll_loss", target, classes, ignore_index);
  const int64_t* tp = t.data_ptr<int64_t>();
  const int64_t count = t.numel();
  std::vector<double> w(static_cast<size_t>(classes), 1.0);
  if (has(weight)) w = to_vector<double>(*weight);
  // Sample i = n * S + s reads input[n, target[i], s] at (n * C + target[i]) * S + s.
  Tensor x = contiguous(input);
  LOOM_DISPATCH_FLOAT_TYPES(dt, "nll_loss", [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    auto loss_at = [&](int64_t i, double& wsum) -> double {
      const int64_t c = tp[i];
      if (c == ignore_index) return 0.0;
      const int64_t n = i / spatial, s = i % spatial;
      const double wc = w[static_cast<size_t>(c)];
      wsum += wc;
      return -wc * static_cast<double>(static_cast<M>(xp[(n * classes + c) * spatial + s]));
    };
    scalar_t* op = out.data_ptr<scalar_t>();
    if (reduction == 0) {
      parallel_for(0, count, 16384, [&](int64_t begin, int64_t end) {
        double unused = 0;
        for (int64_t i = begin; i < end; ++i) op[i] = convert<scalar_t>(loss_at(i, unused));
      });
      return;
    }
    double total = 0, wsum = 0;
    for (int64_t i = 0; i < count; ++i) total += loss_at(i, wsum);
    // Mean over zero total weight (empty batch, or every target ignored) is 0/0 = NaN, as PyTorch.
    op[0] = convert<scalar_t>(reduction == 2 ? total : total / wsum);
  });
}

// The gradient of nll_loss with respect to input: -weight[t] * g at input[n, t, s] for each
// sample's target t (0 elsewhere and for ignored samples), g the sample's grad_output, or the
// scalar grad_output (divided by the summed weight of the non-ignored targets for Mean).
void nll_loss_backward_loop(const Tensor& gi, const Tensor& grad_output, const Tensor& input,
                            const Tensor& target, const std::optional<Tensor>& weight,
                            int64_t reduction, int64_t ignore_index) {
  constexpr const char* op = "nll_loss_backward";
  const DType dt = input.dtype();
  std::memset(gi.data_ptr(), 0, gi.nbytes());
  const auto [classes, spatial] = nll_dims(input);
  Tensor t = checked_targets(op, target, classes, ignore_index);
  const int64_t* tp = t.data_ptr<int64_t>();
  const int64_t count = t.numel();
  std::vector<double> w(static_cast<size_t>(classes), 1.0);
  if (has(weight)) w = to_vector<double>(*weight);
  const Tensor go = contiguous(grad_output);
  LOOM_DISPATCH_FLOAT_TYPES(dt, op, [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* gop = go.data_ptr<scalar_t>();
    double g = reduction == 0 ? 0.0 : static_cast<double>(static_cast<M>(gop[0]));
    if (reduction == 1) {
      double wsum = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (tp[i] != ignore_index) wsum += w[static_cast<size_t>(tp[i])];
      }
      g /= wsum;  // zero total weight gives inf/NaN where a weight-0 target is, as PyTorch
    }
    scalar_t* gp = gi.data_ptr<scalar_t>();
    parallel_for(0, count, 16384, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t c = tp[i];
        if (c == ignore_index) continue;
        const double gv = reduction == 0 ? static_cast<double>(static_cast<M>(gop[i])) : g;
        const int64_t n = i / spatial, s = i % spatial;
        gp[(n * classes + c) * spatial + s] = convert<scalar_t>(-w[static_cast<size_t>(c)] * gv);
      }
    });
  });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&native_layer_norm_shape, &native_layer_norm_loop>::register_cpu(m,
                                                                              "native_layer_norm");
  Structured<&native_layer_norm_backward_shape, &native_layer_norm_backward_loop>::register_cpu(
      m, "native_layer_norm_backward");
  Structured<&native_dropout_shape, &native_dropout_loop>::register_cpu(m, "native_dropout");
  Structured<&nll_loss_shape, &nll_loss_loop>::register_cpu(m, "nll_loss");
  Structured<&nll_loss_backward_shape, &nll_loss_backward_loop>::register_cpu(m,
                                                                              "nll_loss_backward");
  m.impl("native_dropout_backward", native_dropout_backward_kernel);
}

}  // namespace loom
