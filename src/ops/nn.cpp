// Neural-network operators: layer norm, dropout and the classification losses (nll_loss,
// cross_entropy). Kernels compute 16-bit floats in float and accumulate sums in double.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "loom/parallel.h"
#include "loops.h"
#include "op_call.h"
#include "shapes.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

bool has(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined();
}

// ---- layer norm ----

std::string star_shape(IntArrayRef shape) {
  std::ostringstream os;
  os << "[*";
  for (int64_t s : shape) os << ", " << s;
  os << "]";
  return os.str();
}

void check_affine(const char* op, const char* arg, const OptionalTensorMetaRef& t,
                  TensorMetaRef input, IntArrayRef normalized_shape) {
  if (!t.has_value()) return;
  LOOM_CHECK(t->sizes == normalized_shape, "[", op, "] expected ", arg, " of shape ",
             normalized_shape, " (normalized_shape) but got ", t->sizes);
  LOOM_CHECK(t->device == input.device, "[", op, "] expected ", arg, " on ", input.device,
             " (like input) but it is on ", t->device);
}

// The number of normalized elements per row, after checking input against normalized_shape.
int64_t check_normalized_shape(const char* op, TensorMetaRef input, IntArrayRef normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  LOOM_CHECK(k >= 1, "[", op, "] normalized_shape must have at least one dimension");
  const int64_t axis = input.dim() - k;
  LOOM_CHECK(axis >= 0 && input.sizes.slice(static_cast<size_t>(axis)) == normalized_shape, "[",
             op, "] given normalized_shape=", normalized_shape, ", expected input with shape ",
             star_shape(normalized_shape), " but got input of shape ", input.sizes);
  return multiply_sizes(normalized_shape);
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

// (output, mean, rstd). mean and rstd keep the normalized dims as size 1, as PyTorch's CPU kernel:
// input [2, 3, 4] with normalized_shape [4] gives mean of shape [2, 3, 1].
}  // namespace

std::array<TensorMeta, 3> native_layer_norm_shape(TensorMetaRef input, IntArrayRef normalized_shape,
                                                  const OptionalTensorMetaRef& weight,
                                                  const OptionalTensorMetaRef& bias, double eps) {
  check_normalized_shape("native_layer_norm", input, normalized_shape);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const int64_t axis = input.dim() - k;
  check_affine("native_layer_norm", "weight", weight, input, normalized_shape);
  check_affine("native_layer_norm", "bias", bias, input, normalized_shape);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[native_layer_norm] expected a floating input but got ", dt);
  DimVector stat_shape;
  for (int64_t d = 0; d < axis; ++d) stat_shape.push_back(input.size(d));
  for (int64_t d = 0; d < k; ++d) stat_shape.push_back(1);
  return {TensorMeta(input.sizes, dt), TensorMeta(stat_shape, dt), TensorMeta(stat_shape, dt)};
}

namespace {

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

}  // namespace

std::array<TensorMeta, 3> native_layer_norm_backward_shape(
    TensorMetaRef grad_out, TensorMetaRef input, IntArrayRef normalized_shape, TensorMetaRef mean,
    TensorMetaRef rstd, const OptionalTensorMetaRef& weight, const OptionalTensorMetaRef& bias,
    bool input_mask, bool weight_mask, bool bias_mask) {
  constexpr const char* op = "native_layer_norm_backward";
  check_normalized_shape(op, input, normalized_shape);
  check_affine(op, "weight", weight, input, normalized_shape);
  check_affine(op, "bias", bias, input, normalized_shape);
  LOOM_CHECK(grad_out.sizes == input.sizes, "[", op, "] expected grad_out of shape ",
             input.sizes, " (the shape of input) but got ", grad_out.sizes);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt) && grad_out.dtype == dt, "[", op,
                  "] expected grad_out and input of one floating dtype but got ", grad_out.dtype,
                  " and ", dt);
  const int64_t rows =
      multiply_sizes(input.sizes.slice(0, input.sizes.size() - normalized_shape.size()));
  for (const TensorMetaRef* t : {&mean, &rstd}) {
    LOOM_CHECK(t->numel() == rows, "[", op, "] expected ", t == &mean ? "mean" : "rstd", " with ",
               rows, " elements (one per normalized row of input ", input.sizes, ") but got ",
               t->sizes);
    LOOM_CHECK_TYPE(t->dtype == dt, "[", op, "] expected ", t == &mean ? "mean" : "rstd",
                    " of dtype ", dt, " (like input) but got ", t->dtype);
  }
  return {input_mask ? TensorMeta(input.sizes, dt) : undefined_meta(),
          weight_mask ? TensorMeta(normalized_shape, weight.has_value() ? weight->dtype : dt)
                      : undefined_meta(),
          bias_mask ? TensorMeta(normalized_shape, bias.has_value() ? bias->dtype : dt)
                    : undefined_meta()};
}

namespace {

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

Tensor layer_norm_kernel(const Tensor& input, IntArrayRef normalized_shape,
                         const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                         double eps) {
  return std::get<0>(native_layer_norm(input, normalized_shape, weight, bias, eps));
}

// ---- dropout ----

void check_dropout_p(const char* op, double p) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "[", op,
             "] dropout probability has to be between 0 and 1, "
             "but got ",
             p);
}

// Note [Dropout draws]
// A training call with p > 0 reserves numel 32-bit draws from the generator; element i is kept when
// draw i, as a uniform float in [0, 1), is below 1 - p. So the mask depends only on (seed, offset,
// numel), not on the number of threads, and the call advances the generator by ceil(numel / 4).
}  // namespace

// The generator is the loop's business: the shape function neither reads nor advances it.
std::array<TensorMeta, 2> native_dropout_shape(TensorMetaRef input, double p, bool train,
                                               const std::optional<Generator>& gen) {
  check_dropout_p("native_dropout", p);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[native_dropout] expected a floating input but got ", dt);
  return {TensorMeta(input.sizes, dt), TensorMeta(input.sizes, kBool)};
}

namespace {

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

}  // namespace

TensorMeta native_dropout_backward_shape(TensorMetaRef grad_output, TensorMetaRef mask,
                                         double scale) {
  constexpr const char* op = "native_dropout_backward";
  LOOM_CHECK(mask.sizes == grad_output.sizes, "[", op, "] expected mask of shape ",
             grad_output.sizes, " (the shape of grad_output) but got ", mask.sizes);
  LOOM_CHECK_TYPE(is_floating(grad_output.dtype), "[", op,
                  "] expected a floating grad_output but got ", grad_output.dtype);
  LOOM_CHECK_TYPE(mask.dtype == kBool, "[", op, "] expected a bool mask but got ", mask.dtype);
  const TensorMetaRef in[2] = {grad_output, mask};
  common_device(op, in, 2);
  return TensorMeta(grad_output.sizes, grad_output.dtype);
}

namespace {

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

Tensor dropout_kernel(const Tensor& input, double p, bool train,
                      const std::optional<Generator>& gen) {
  check_defined(input, "dropout", "input");
  check_dropout_p("dropout", p);
  if (!train || p == 0.0) return input;
  return std::get<0>(native_dropout(input, p, train, gen));
}

// ---- losses ----

void check_reduction(const char* op, int64_t reduction) {
  LOOM_CHECK(reduction >= 0 && reduction <= 2, "[", op,
             "] reduction must be 0 (none), 1 (mean) "
             "or 2 (sum) but got ",
             reduction);
}

void check_class_weight(const char* op, const OptionalTensorMetaRef& weight, TensorMetaRef input,
                        int64_t classes) {
  if (!weight.has_value()) return;
  LOOM_CHECK(weight->dim() == 1 && weight->numel() == classes, "[", op,
             "] expected weight to be "
             "a 1-D tensor with one element per class (",
             classes, ") but got shape ", weight->sizes);
  LOOM_CHECK(weight->device == input.device, "[", op, "] expected weight on ", input.device,
             " (like input) but it is on ", weight->device);
}

// input (C), (N, C) or (N, C, d1, ...): log-probabilities; target the class of each sample.
// Mean divides by the summed weights of the targets that are not ignored (PyTorch's weighted mean).
// The shapes of an nll_loss call, after checking its arguments.
struct NllShape {
  int64_t classes = 0;
  int64_t spatial = 1;  // elements of d1, ...: sample i = n * spatial + s
  DimVector target_shape;
};

NllShape check_nll(const char* op, TensorMetaRef input, TensorMetaRef target,
                   const OptionalTensorMetaRef& weight, int64_t reduction) {
  check_reduction(op, reduction);
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[", op,
                  "] expected floating input (log-probabilities) but "
                  "got ",
                  dt);
  LOOM_CHECK_TYPE(target.dtype == kInt64 || target.dtype == kUInt8, "[", op,
                  "] expected "
                  "target to hold class indices of dtype int64 but got ",
                  target.dtype);
  LOOM_CHECK(input.dim() >= 1, "[", op,
             "] expected input of shape (C), (N, C) or "
             "(N, C, d1, ...) but got a 0-dim tensor");
  LOOM_CHECK(target.device == input.device, "[", op, "] expected target on ", input.device,
             " (like input) but it is on ", target.device);
  NllShape shape;
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  shape.classes = input.size(class_dim);
  shape.target_shape = DimVector(input.sizes);
  shape.target_shape.erase(static_cast<size_t>(class_dim));
  LOOM_CHECK(target.sizes == shape.target_shape.ref(), "[", op, "] expected target of shape ",
             shape.target_shape.ref(), " for input of shape ", input.sizes, " but got ",
             target.sizes);
  check_class_weight(op, weight, input, shape.classes);
  for (int64_t d = 2; d < input.dim(); ++d) shape.spatial *= input.size(d);
  return shape;
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

}  // namespace

TensorMeta nll_loss_shape(TensorMetaRef input, TensorMetaRef target,
                          const OptionalTensorMetaRef& weight, int64_t reduction,
                          int64_t ignore_index) {
  const NllShape shape = check_nll("nll_loss", input, target, weight, reduction);
  return TensorMeta(reduction == 0 ? shape.target_shape.ref() : IntArrayRef(), input.dtype);
}

namespace {

// Targets are checked against the classes here, as they are data.
void nll_loss_loop(const Tensor& out, const Tensor& input, const Tensor& target,
                   const std::optional<Tensor>& weight, int64_t reduction, int64_t ignore_index) {
  const NllShape shape = check_nll("nll_loss", input, target, weight, reduction);
  const DType dt = input.dtype();
  const int64_t classes = shape.classes, spatial = shape.spatial;

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
}  // namespace

TensorMeta nll_loss_backward_shape(TensorMetaRef grad_output, TensorMetaRef input,
                                   TensorMetaRef target, const OptionalTensorMetaRef& weight,
                                   int64_t reduction, int64_t ignore_index) {
  constexpr const char* op = "nll_loss_backward";
  const NllShape shape = check_nll(op, input, target, weight, reduction);
  if (reduction == 0) {
    LOOM_CHECK(grad_output.sizes == shape.target_shape.ref(), "[", op,
               "] expected grad_output of shape ", shape.target_shape.ref(),
               " (the loss per sample, reduction none) but got ", grad_output.sizes);
  } else {
    LOOM_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1, "[", op,
               "] expected a single-element grad_output (a reduced loss) but got shape ",
               grad_output.sizes);
  }
  const DType dt = input.dtype;
  LOOM_CHECK_TYPE(grad_output.dtype == dt, "[", op, "] expected grad_output of dtype ", dt,
                  " (like input) but got ", grad_output.dtype);
  return TensorMeta(input.sizes, dt);
}

namespace {

void nll_loss_backward_loop(const Tensor& gi, const Tensor& grad_output, const Tensor& input,
                            const Tensor& target, const std::optional<Tensor>& weight,
                            int64_t reduction, int64_t ignore_index) {
  constexpr const char* op = "nll_loss_backward";
  const NllShape shape = check_nll(op, input, target, weight, reduction);
  const DType dt = input.dtype();
  std::memset(gi.data_ptr(), 0, gi.nbytes());
  const int64_t classes = shape.classes, spatial = shape.spatial;
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

// input: logits (C), (N, C) or (N, C, d1, ...). target: class indices (the shape of input without
// the class dim) or class probabilities (the shape of input). Decomposes into log_softmax, nll_loss
// and pointwise ops/sums, following PyTorch's cross_entropy_loss (LossNLL.cpp) term by term.
Tensor cross_entropy_kernel(const Tensor& input, const Tensor& target,
                            const std::optional<Tensor>& weight, int64_t reduction,
                            int64_t ignore_index, double label_smoothing) {
  check_defined(input, "cross_entropy", "input");
  check_defined(target, "cross_entropy", "target");
  check_reduction("cross_entropy", reduction);
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "[cross_entropy] label_smoothing "
             "must be between 0.0 and 1.0 but got ",
             label_smoothing);
  LOOM_CHECK(input.dim() >= 1,
             "[cross_entropy] expected input of shape (C), (N, C) or "
             "(N, C, d1, ...) but got a 0-dim tensor");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  check_class_weight("cross_entropy", weight, input, classes);
  // The weight shaped to broadcast along the class dim.
  Tensor w;
  if (has(weight)) {
    DimVector ws(static_cast<size_t>(input.dim()), 1);
    ws[static_cast<size_t>(class_dim)] = classes;
    w = reshape(*weight, ws);
  }
  const Tensor logp = log_softmax(input, class_dim, input.dtype());

  if (target.sizes() == input.sizes()) {  // class probabilities
    LOOM_CHECK_TYPE(is_floating(target.dtype()),
                    "[cross_entropy] a target of the input's shape "
                    "holds class probabilities and must be floating, but got ",
                    target.dtype());
    LOOM_CHECK(ignore_index < 0,
               "[cross_entropy] ignore_index is not supported for class-"
               "probability targets (got ",
               ignore_index, ")");
    Tensor p = target;
    if (label_smoothing > 0.0) {
      p = add(mul(target, 1.0 - label_smoothing), label_smoothing / static_cast<double>(classes));
    }
    Tensor terms = mul(logp, p);
    if (w.defined()) terms = mul(terms, w);
    if (reduction == 0) return mul(sum(terms, IntArrayRef{class_dim}), -1.0);
    Tensor total = mul(sum(terms), -1.0);
    if (reduction == 2) return total;
    // Mean over samples (numel / C); an empty input gives 0/0 = NaN, as PyTorch.
    const int64_t samples = classes > 0 ? input.numel() / classes : 0;
    return div(total, static_cast<double>(samples));
  }

  Tensor nll = nll_loss(logp, target, weight, static_cast<Reduction>(reduction), ignore_index);
  if (label_smoothing == 0.0) return nll;
  // Smoothing spreads label_smoothing of the target mass uniformly over the classes: its term is
  // the (weighted) sum of -log p over classes, zero where the target is ignored.
  const Tensor ignored = eq(target, ignore_index);
  Tensor smooth = mul(sum(w.defined() ? mul(logp, w) : logp, IntArrayRef{class_dim}), -1.0);
  smooth = masked_fill(smooth, ignored, 0.0);
  Tensor ret;
  if (reduction == 0) {
    ret = smooth;
  } else if (reduction == 2) {
    ret = sum(smooth);
  } else if (w.defined()) {
    // Normalised by the summed weights of the non-ignored targets, like nll_loss's mean.
    Tensor safe_target = masked_fill(target, ignored, 0);
    Tensor tw = reshape(index_select(*weight, 0, reshape(safe_target, {-1})), target.sizes());
    ret = div(sum(smooth), sum(masked_fill(tw, ignored, 0.0)));
  } else {
    ret = div(sum(smooth), sum(ne(target, ignore_index)));
  }
  return add(mul(nll, 1.0 - label_smoothing),
             mul(ret, label_smoothing / static_cast<double>(classes)));
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "native_layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor)");
  m.def(
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
      "float eps=1e-05) -> Tensor");
  m.def(
      "native_dropout(Tensor input, float p, bool train, *, Generator? generator=None) -> "
      "(Tensor, Tensor)");
  m.def("dropout(Tensor input, float p, bool train, *, Generator? generator=None) -> Tensor");
  m.def(
      "nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, "
      "int ignore_index=-100) -> Tensor");
  m.def(
      "cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, "
      "int ignore_index=-100, float label_smoothing=0.0) -> Tensor");
  m.def(
      "native_layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, "
      "Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool grad_input_mask, "
      "bool grad_weight_mask, bool grad_bias_mask) -> (Tensor, Tensor, Tensor)");
  m.def("native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor");
  m.def(
      "nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, "
      "int reduction, int ignore_index) -> Tensor");
  Structured<&native_layer_norm_shape, &native_layer_norm_loop>::register_kernels(
      m, "native_layer_norm");
  Structured<&native_layer_norm_backward_shape, &native_layer_norm_backward_loop>::register_kernels(
      m, "native_layer_norm_backward");
  Structured<&native_dropout_shape, &native_dropout_loop>::register_kernels(m, "native_dropout");
  m.impl("native_dropout_backward", DispatchKey::CPU, native_dropout_backward_kernel);
  m.impl("native_dropout_backward", DispatchKey::Meta,
         MetaKernel<&native_dropout_backward_shape>::run);
  Structured<&nll_loss_shape, &nll_loss_loop>::register_kernels(m, "nll_loss");
  Structured<&nll_loss_backward_shape, &nll_loss_backward_loop>::register_kernels(
      m, "nll_loss_backward");
  m.impl("layer_norm", DispatchKey::CompositeImplicit, layer_norm_kernel);
  m.impl("dropout", DispatchKey::CompositeImplicit, dropout_kernel);
  m.impl("cross_entropy", DispatchKey::CompositeImplicit, cross_entropy_kernel);
}

Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape,
                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                  double eps) {
  LOOM_CALL_OP("loom::layer_norm",
               Tensor(const Tensor&, IntArrayRef, const std::optional<Tensor>&,
                      const std::optional<Tensor>&, double),
               input, normalized_shape, weight, bias, eps);
}
std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input,
                                                     IntArrayRef normalized_shape,
                                                     const std::optional<Tensor>& weight,
                                                     const std::optional<Tensor>& bias,
                                                     double eps) {
  using Sig =
      std::tuple<Tensor, Tensor, Tensor>(const Tensor&, IntArrayRef, const std::optional<Tensor>&,
                                         const std::optional<Tensor>&, double);
  LOOM_CALL_OP("loom::native_layer_norm", Sig, input, normalized_shape, weight, bias, eps);
}
Tensor dropout(const Tensor& input, double p, bool train, const std::optional<Generator>& gen) {
  LOOM_CALL_OP("loom::dropout",
               Tensor(const Tensor&, double, bool, const std::optional<Generator>&), input, p,
               train, gen);
}
std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, bool train,
                                          const std::optional<Generator>& gen) {
  using Sig =
      std::tuple<Tensor, Tensor>(const Tensor&, double, bool, const std::optional<Generator>&);
  LOOM_CALL_OP("loom::native_dropout", Sig, input, p, train, gen);
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                Reduction reduction, int64_t ignore_index) {
  LOOM_CALL_OP("loom::nll_loss",
               Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t, int64_t),
               input, target, weight, static_cast<int64_t>(reduction), ignore_index);
}
Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight,
                     Reduction reduction, int64_t ignore_index, double label_smoothing) {
  LOOM_CALL_OP(
      "loom::cross_entropy",
      Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t, int64_t, double),
      input, target, weight, static_cast<int64_t>(reduction), ignore_index, label_smoothing);
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, IntArrayRef normalized_shape, const Tensor& mean,
    const Tensor& rstd, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
    std::array<bool, 3> output_mask) {
  using Sig = std::tuple<Tensor, Tensor, Tensor>(
      const Tensor&, const Tensor&, IntArrayRef, const Tensor&, const Tensor&,
      const std::optional<Tensor>&, const std::optional<Tensor>&, bool, bool, bool);
  LOOM_CALL_OP("loom::native_layer_norm_backward", Sig, grad_out, input, normalized_shape, mean,
               rstd, weight, bias, output_mask[0], output_mask[1], output_mask[2]);
}
Tensor native_dropout_backward(const Tensor& grad_output, const Tensor& mask, double scale) {
  LOOM_CALL_OP("loom::native_dropout_backward", Tensor(const Tensor&, const Tensor&, double),
               grad_output, mask, scale);
}
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const std::optional<Tensor>& weight, Reduction reduction,
                         int64_t ignore_index) {
  using Sig = Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&,
                     int64_t, int64_t);
  LOOM_CALL_OP("loom::nll_loss_backward", Sig, grad_output, self, target, weight,
               static_cast<int64_t>(reduction), ignore_index);
}

}  // namespace loom
