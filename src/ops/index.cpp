// Indexing operators: index_select, gather, scatter / scatter_add (and in place), embedding,
// masked_fill, one_hot.
//
// Every kernel validates all indices before it writes anything, so a bad index throws IndexError
// (naming the op, the value, the dim and its size) and leaves the destination untouched. Copies
// that only move elements are type-erased by element size.
#include <algorithm>
#include <array>
#include <cstring>

#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "loops.h"
#include "op_call.h"
#include "shapes.h"
#include "tensor_iterator.h"

namespace loom {
namespace {

// PyTorch takes int64 indices everywhere, and int32 for index_select and embedding.
void check_index_dtype(const char* op, const char* arg, TensorMetaRef index, bool allow_int32) {
  const DType dt = index.dtype;
  LOOM_CHECK_TYPE(dt == kInt64 || (allow_int32 && dt == kInt32), "[", op, "] expected ", arg,
                  " to have dtype int64", allow_int32 ? " or int32" : "", " but got ", dt);
}

void check_same_device(const char* op, TensorMetaRef self, TensorMetaRef other, const char* arg) {
  LOOM_CHECK(self.device == other.device, "[", op, "] expected ", arg, " on ", self.device,
             " (like self) but it is on ", other.device);
}

// The values of a CPU index tensor as int64 in row-major order; no copy for contiguous int64.
class IndexValues {
 public:
  explicit IndexValues(const Tensor& index) : n_(index.numel()) {
    Tensor c = contiguous(index);
    if (c.dtype() == kInt64) {
      keep_ = c;
      p_ = c.data_ptr<int64_t>();
    } else {
      const int32_t* q = c.data_ptr<int32_t>();
      buf_.assign(q, q + n_);
      p_ = buf_.data();
    }
  }
  const int64_t* data() const { return p_; }
  int64_t size() const { return n_; }
  int64_t operator[](int64_t i) const { return p_[i]; }

  // Throws IndexError for the first value outside [0, dim_size).
  void check_range(const char* op, int64_t dim, int64_t dim_size) const {
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t v = p_[i];
      if (LOOM_UNLIKELY(v < 0 || v >= dim_size)) {
        LOOM_THROW(IndexError, "[", op, "] index ", v, " is out of range for dimension ", dim,
                   " with size ", dim_size);
      }
    }
  }

 private:
  Tensor keep_;
  std::vector<int64_t> buf_;
  const int64_t* p_ = nullptr;
  int64_t n_ = 0;
};

// Runs f(E{}) with E an unsigned integer of the element size: copies do not care about dtypes.
template <class F>
void dispatch_by_size(size_t element_size, const F& f) {
  switch (element_size) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 8:
      f(uint64_t{});
      break;
    default:
      LOOM_INTERNAL_ASSERT(false, "unexpected element size ", element_size);
  }
}

// Sizes and strides with a 0-dim tensor seen as shape [1] (gather and scatter treat it so).
DimVector nonempty_sizes(TensorMetaRef t) {
  return t.dim() == 0 ? DimVector{1} : DimVector(t.sizes);
}
DimVector nonempty_strides(const Tensor& t) {
  return t.dim() == 0 ? DimVector{1} : DimVector(t.strides());
}

// Note [Rows along dim]
// gather and scatter walk the index tensor one "row" at a time: a row fixes every coordinate but
// `dim` and runs along `dim`. row(offsets) receives each operand's element offset at the row's
// start (coordinate 0 along dim). Two rows differ in a coordinate other than dim, so the elements a
// scatter writes from different rows never coincide and rows can run in parallel without races,
// while duplicates inside one row are applied in order (the last write wins, as on PyTorch's CPU).
template <size_t NT, class F>
void for_each_row(IntArrayRef shape, int64_t dim, const std::array<IntArrayRef, NT>& strides,
                  const F& row) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t rows = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (d != dim) rows *= shape[static_cast<size_t>(d)];
  }
  const int64_t len = shape[static_cast<size_t>(dim)];
  if (rows == 0 || len == 0) return;
  const int64_t grain = std::max<int64_t>(1, 16384 / len);
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    DimVector c(static_cast<size_t>(nd), 0);
    std::array<int64_t, NT> off{};
    int64_t r = begin;
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (d == dim) continue;
      const size_t u = static_cast<size_t>(d);
      c[u] = r % shape[u];
      r /= shape[u];
      for (size_t t = 0; t < NT; ++t) off[t] += c[u] * strides[t][u];
    }
    for (int64_t i = begin; i < end; ++i) {
      row(off);
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (d == dim) continue;
        const size_t u = static_cast<size_t>(d);
        for (size_t t = 0; t < NT; ++t) off[t] += strides[t][u];
        if (++c[u] < shape[u]) break;
        for (size_t t = 0; t < NT; ++t) off[t] -= shape[u] * strides[t][u];
        c[u] = 0;
      }
    }
  });
}

// ---- index_select and embedding ----

// The result's sizes: self's with dim's replaced by the number of indices.
DimVector index_select_sizes(const char* op, TensorMetaRef self, int64_t dim,
                             TensorMetaRef index) {
  const int64_t nd = self.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(nd, 1), op);
  const int64_t n = index.numel();
  check_same_device(op, self, index, "index");
  LOOM_CHECK_INDEX(nd > 0 || n == 1, "[", op,
                   "] selecting from a 0-dim tensor takes exactly one "
                   "index but got ",
                   n);
  DimVector out_shape(self.sizes);
  if (nd > 0) out_shape[static_cast<size_t>(d)] = n;
  return out_shape;
}

// Fills out (index_select's result for these arguments, contiguous); the indices are data, so
// their range is checked here.
void index_select_fill(const char* op, const Tensor& out, const Tensor& self, int64_t dim,
                       const Tensor& index) {
  const int64_t nd = self.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(nd, 1), op);
  const int64_t n = index.numel();
  const int64_t dim_size = nd > 0 ? self.size(d) : 1;
  IndexValues idx(index);
  idx.check_range(op, d, dim_size);
  if (out.numel() == 0) return;

  Tensor src = contiguous(self);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d && nd > 0; ++k) outer *= self.size(k);
  for (int64_t k = d + 1; k < nd; ++k) inner *= self.size(k);
  const size_t es = self.element_size();
  const int64_t row_bytes = inner * static_cast<int64_t>(es);
  const char* sp = static_cast<const char*>(src.data_ptr());
  char* dp = static_cast<char*>(out.data_ptr());
  const int64_t* ip = idx.data();
  // One output row (inner elements) per (outer, index) pair.
  const int64_t grain = std::max<int64_t>(1, 65536 / row_bytes);
  if (inner == 1) {
    dispatch_by_size(es, [&](auto tag) {
      using E = decltype(tag);
      const E* s = reinterpret_cast<const E*>(sp);
      E* o = reinterpret_cast<E*>(dp);
      parallel_for(0, outer * n, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) o[r] = s[(r / n) * dim_size + ip[r % n]];
      });
    });
  } else {
    parallel_for(0, outer * n, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / n, k = r % n;
        std::memcpy(dp + r * row_bytes, sp + (o * dim_size + ip[k]) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    });
  }
}

}  // namespace

TensorMeta index_select_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index) {
  check_index_dtype("index_select", "index", index, true);
  LOOM_CHECK_INDEX(index.dim() <= 1,
                   "[index_select] index is supposed to be a vector (0-D or "
                   "1-D) but got shape ",
                   index.sizes);
  return TensorMeta(index_select_sizes("index_select", self, dim, index), self.dtype);
}

TensorMeta embedding_shape(TensorMetaRef weight, TensorMetaRef indices, int64_t padding_idx) {
  LOOM_CHECK(weight.dim() == 2,
             "[embedding] weight must be 2-D (num_embeddings, embedding_dim) "
             "but got shape ",
             weight.sizes);
  check_index_dtype("embedding", "indices", indices, true);
  check_same_device("embedding", weight, indices, "index");
  // padding_idx only changes the backward pass (that row gets no gradient).
  DimVector shape(indices.sizes);
  shape.push_back(weight.size(1));
  return TensorMeta(shape, weight.dtype);
}

namespace {

void index_select_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index) {
  index_select_fill("index_select", out, self, dim, index);
}

void embedding_loop(const Tensor& out, const Tensor& weight, const Tensor& indices, int64_t) {
  // The rows of weight that the flattened indices name, into out seen as [n, embedding_dim].
  index_select_fill("embedding", out.view({indices.numel(), weight.size(1)}), weight, 0,
                    reshape(indices, {-1}));
}

// Row r of the result is the sum of the grad_output rows whose index is r (none for padding_idx).
// The indices are bucketed by row first (a counting sort), so each task owns whole result rows and
// adds its rows' contributions in index order, whatever the thread count.
}  // namespace

TensorMeta embedding_dense_backward_shape(TensorMetaRef grad_output, TensorMetaRef indices,
                                          int64_t num_weights, int64_t padding_idx) {
  constexpr const char* op = "embedding_dense_backward";
  check_index_dtype(op, "indices", indices, true);
  check_same_device(op, grad_output, indices, "indices");
  LOOM_CHECK(num_weights >= 0, "[", op, "] num_weights must be non-negative but got ", num_weights);
  const auto nd = static_cast<size_t>(indices.dim());
  LOOM_CHECK(
      grad_output.sizes.size() == nd + 1 && grad_output.sizes.slice(0, nd) == indices.sizes,
      "[", op, "] expected grad_output of shape ", indices.sizes,
      " + [embedding_dim] (indices' shape plus one) but got ", grad_output.sizes);
  const DType dt = grad_output.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[", op, "] expected a floating grad_output but got ", dt);
  return TensorMeta({num_weights, grad_output.size(-1)}, dt);
}

namespace {

void embedding_dense_backward_loop(const Tensor& out, const Tensor& grad_output,
                                   const Tensor& indices, int64_t num_weights,
                                   int64_t padding_idx) {
  constexpr const char* op = "embedding_dense_backward";
  const DType dt = grad_output.dtype();
  const int64_t dim = grad_output.size(-1);
  IndexValues idx(indices);
  idx.check_range(op, 0, num_weights);
  const int64_t n = idx.size();
  std::vector<int64_t> start(static_cast<size_t>(num_weights) + 1, 0),
      order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(idx[i]) + 1];
  for (int64_t r = 0; r < num_weights; ++r)
    start[static_cast<size_t>(r + 1)] += start[static_cast<size_t>(r)];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i)
      order[static_cast<size_t>(fill[static_cast<size_t>(idx[i])]++)] = i;
  }
  const Tensor g = contiguous(grad_output);
  LOOM_DISPATCH_FLOAT_TYPES(dt, op, [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* outp = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, dim));
    parallel_for(0, num_weights, grain, [&](int64_t r0, int64_t r1) {
      std::vector<M> acc(static_cast<size_t>(dim));
      for (int64_t r = r0; r < r1; ++r) {
        std::fill(acc.begin(), acc.end(), M(0));
        if (r != padding_idx) {
          for (int64_t k = start[static_cast<size_t>(r)]; k < start[static_cast<size_t>(r + 1)];
               ++k) {
            const scalar_t* row = gp + order[static_cast<size_t>(k)] * dim;
            for (int64_t j = 0; j < dim; ++j) acc[static_cast<size_t>(j)] += static_cast<M>(row[j]);
          }
        }
        for (int64_t j = 0; j < dim; ++j)
          outp[r * dim + j] = convert<scalar_t>(acc[static_cast<size_t>(j)]);
      }
    });
  });
}

// ---- gather and scatter ----

void check_same_rank(const char* op, TensorMetaRef self, TensorMetaRef other, const char* arg) {
  LOOM_CHECK(std::max<int64_t>(self.dim(), 1) == std::max<int64_t>(other.dim(), 1), "[", op, "] ",
             arg, " must have the same number of dimensions as self, but got ", arg, " shape ",
             other.sizes, " and self shape ", self.sizes);
}

}  // namespace

TensorMeta gather_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index) {
  check_index_dtype("gather", "index", index, false);
  check_same_device("gather", self, index, "index");
  check_same_rank("gather", self, index, "index");
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), "gather");
  for (size_t k = 0; k < ss.size(); ++k) {
    LOOM_CHECK(static_cast<int64_t>(k) == d || is[k] <= ss[k], "[gather] index shape ",
               index.sizes, " is larger than self shape ", self.sizes, " in dimension ", k);
  }
  return TensorMeta(index.sizes, self.dtype);
}

namespace {

void gather_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), "gather");
  IndexValues idx(index);
  idx.check_range("gather", d, ss[static_cast<size_t>(d)]);
  const DimVector self_st = nonempty_strides(self), out_st = contiguous_strides(is);
  const int64_t sd = self_st[static_cast<size_t>(d)], od = out_st[static_cast<size_t>(d)];
  const int64_t len = is[static_cast<size_t>(d)];
  dispatch_by_size(self.element_size(), [&](auto tag) {
    using E = decltype(tag);
    const E* src = static_cast<const E*>(self.data_ptr());
    E* dst = static_cast<E*>(out.data_ptr());
    const int64_t* ip = idx.data();
    // The output and the (contiguous) index share offsets.
    for_each_row<2>(is, d, {self_st.ref(), out_st.ref()}, [&](const std::array<int64_t, 2>& off) {
      for (int64_t k = 0; k < len; ++k)
        dst[off[1] + k * od] = src[off[0] + ip[off[1] + k * od] * sd];
    });
  });
}

enum class ScatterKind { Src, Value, Add };

// Writes into self in place; `src` is used by Src and Add, `value` by Value.
// The shape function of every scatter: the result is self's geometry.
TensorMeta scatter_check(const char* op, ScatterKind kind, TensorMetaRef self, int64_t dim,
                         TensorMetaRef index, const OptionalTensorMetaRef& src) {
  check_index_dtype(op, "index", index, false);
  check_same_device(op, self, index, "index");
  check_same_rank(op, self, index, "index");
  const bool has_src = kind != ScatterKind::Value;
  if (has_src) {
    LOOM_CHECK(src.has_value(), "[", op, "] argument 'src' is an undefined tensor");
    check_same_device(op, self, *src, "src");
    check_same_rank(op, self, *src, "src");
    LOOM_CHECK_TYPE(src->dtype == self.dtype, "[", op,
                    "] expected src to have the dtype of "
                    "self (",
                    self.dtype, ") but got ", src->dtype);
  }
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), op);
  const DimVector rs = has_src ? nonempty_sizes(*src) : is;
  for (size_t k = 0; k < ss.size(); ++k) {
    LOOM_CHECK(static_cast<int64_t>(k) == d || is[k] <= ss[k], "[", op, "] index shape ",
               index.sizes, " is larger than self shape ", self.sizes, " in dimension ", k);
    LOOM_CHECK(is[k] <= rs[k], "[", op, "] index shape ", index.sizes,
               " is larger than src shape ", rs.ref(), " in dimension ", k);
  }
  return TensorMeta(self.sizes, self.dtype);
}

// Scatters into self in place (its geometry checked by scatter_check); `src` is used by Src and
// Add, `value` by Value.
void scatter_fill(const char* op, ScatterKind kind, const Tensor& self, int64_t dim,
                  const Tensor& index, const Tensor& src, const Scalar& value) {
  const bool has_src = kind != ScatterKind::Value;
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), op);
  if (index.numel() == 0) return;
  IndexValues idx(index);
  idx.check_range(op, d, ss[static_cast<size_t>(d)]);

  const DimVector self_st = nonempty_strides(self), idx_st = contiguous_strides(is);
  const DimVector src_st = has_src ? nonempty_strides(src) : idx_st;
  const size_t u = static_cast<size_t>(d);
  const int64_t sd = self_st[u], rd = src_st[u], id = idx_st[u], len = is[u];
  const int64_t* ip = idx.data();
  const std::array<IntArrayRef, 3> strides{self_st.ref(), src_st.ref(), idx_st.ref()};
  if (kind == ScatterKind::Src) {
    dispatch_by_size(self.element_size(), [&](auto tag) {
      using E = decltype(tag);
      E* dst = static_cast<E*>(self.data_ptr());
      const E* s = static_cast<const E*>(src.data_ptr());
      for_each_row<3>(is, d, strides, [&](const std::array<int64_t, 3>& off) {
        for (int64_t k = 0; k < len; ++k)
          dst[off[0] + ip[off[2] + k * id] * sd] = s[off[1] + k * rd];
      });
    });
  } else {
    LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] {
      scalar_t* dst = self.data_ptr<scalar_t>();
      if (kind == ScatterKind::Value) {
        const scalar_t v = value.to<scalar_t>();
        for_each_row<3>(is, d, strides, [&](const std::array<int64_t, 3>& off) {
          for (int64_t k = 0; k < len; ++k) dst[off[0] + ip[off[2] + k * id] * sd] = v;
        });
      } else {
        using M = opmath_t<scalar_t>;
        const scalar_t* s = src.data_ptr<scalar_t>();
        for_each_row<3>(is, d, strides, [&](const std::array<int64_t, 3>& off) {
          for (int64_t k = 0; k < len; ++k) {
            scalar_t& o = dst[off[0] + ip[off[2] + k * id] * sd];
            o = convert<scalar_t>(static_cast<M>(o) + static_cast<M>(s[off[1] + k * rd]));
          }
        });
      }
    });
  }
  self.storage()->bump_version();
}

}  // namespace

TensorMeta scatter_src_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                             TensorMetaRef src) {
  return scatter_check("scatter", ScatterKind::Src, self, dim, index, OptionalTensorMetaRef(src));
}
TensorMeta scatter_value_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                               const Scalar& value) {
  return scatter_check("scatter", ScatterKind::Value, self, dim, index, std::nullopt);
}
TensorMeta scatter_add_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                             TensorMetaRef src) {
  return scatter_check("scatter_add", ScatterKind::Add, self, dim, index,
                       OptionalTensorMetaRef(src));
}

namespace {

// The functional scatters write into a copy of self.
void scatter_src_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  out.copy_(self);
  scatter_fill("scatter", ScatterKind::Src, out, dim, index, src, 0);
}
void scatter_value_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                        const Scalar& value) {
  out.copy_(self);
  scatter_fill("scatter", ScatterKind::Value, out, dim, index, Tensor(), value);
}
void scatter_add_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  out.copy_(self);
  scatter_fill("scatter_add", ScatterKind::Add, out, dim, index, src, 0);
}

// In place: the Meta kernels check and return self; the CPU kernels check, then fill self.
template <ScatterKind kKind>
Tensor scatter_inplace_meta(const Tensor& self, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  const char* op = kKind == ScatterKind::Add ? "scatter_add_" : "scatter_";
  scatter_check(op, kKind, self, dim, index, OptionalTensorMetaRef(TensorMetaRef(src)));
  return self;
}
template <ScatterKind kKind>
Tensor scatter_inplace_cpu(const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor& src) {
  const char* op = kKind == ScatterKind::Add ? "scatter_add_" : "scatter_";
  scatter_check(op, kKind, self, dim, index, OptionalTensorMetaRef(TensorMetaRef(src)));
  scatter_fill(op, kKind, self, dim, index, src, 0);
  return self;
}

// ---- masked_fill ----

// out undefined: a new tensor of the broadcast shape of self and mask; else out is self (in place,
// and the mask must broadcast to self's shape).
Tensor masked_fill_impl(const char* op, const Tensor& self, const Tensor& mask, const Scalar& value,
                        bool inplace) {
  LOOM_CHECK_TYPE(mask.dtype() == kBool, "[", op, "] expected mask to have dtype bool but got ",
                  mask.dtype());
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.outputs = {inplace ? self : Tensor()};
  cfg.inputs = {self, mask};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  cfg.output_dtype = self.dtype();
  cfg.is_inplace = inplace;
  TensorIterator it(std::move(cfg));
  LOOM_DISPATCH_ALL_TYPES(self.dtype(), op, [&] {
    const scalar_t v = value.to<scalar_t>();
    it.for_each([v](char** data, const int64_t* strides, int64_t n) {
      binary_loop<scalar_t, scalar_t, bool>(data, strides, n,
                                            [v](scalar_t x, bool m) { return m ? v : x; });
    });
  });
  it.finish();
  return it.output(0);
}

Tensor masked_fill_kernel(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return masked_fill_impl("masked_fill", self, mask, value, false);
}
Tensor masked_fill_inplace_kernel(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return masked_fill_impl("masked_fill_", self, mask, value, true);
}

}  // namespace

// Pointwise over self and mask broadcast together, in self's dtype.
TensorMeta masked_fill_shape(TensorMetaRef self, TensorMetaRef mask, const Scalar& value) {
  LOOM_CHECK_TYPE(mask.dtype == kBool, "[masked_fill] expected mask to have dtype bool but got ",
                  mask.dtype);
  const TensorMetaRef in[2] = {self, mask};
  common_device("masked_fill", in, 2);
  return TensorMeta(broadcast_shapes("masked_fill", in, 2), self.dtype);
}

namespace {

Tensor masked_fill_inplace_meta(const Tensor& self, const Tensor& mask, const Scalar& value) {
  return meta_inplace("masked_fill_", self, masked_fill_shape(self, mask, value));
}

// ---- one_hot ----

void check_one_hot(TensorMetaRef self, int64_t num_classes) {
  LOOM_CHECK_TYPE(self.dtype == kInt64,
                  "[one_hot] is only applicable to index tensors of dtype "
                  "int64 but got ",
                  self.dtype);
  LOOM_CHECK(num_classes >= -1,
             "[one_hot] num_classes must be -1 (infer) or non-negative but "
             "got ",
             num_classes);
}

}  // namespace

// Note [Data-dependent sizes]
// one_hot with num_classes=-1 takes its class count from the largest value of self: a size that
// depends on data. Its shape function answers only when num_classes is given (a compiler must
// treat the other case as unknown, a graph break); the CPU kernel, which sees the values, is not
// structured: it computes its own output size.
TensorMeta one_hot_shape(TensorMetaRef self, int64_t num_classes) {
  check_one_hot(self, num_classes);
  LOOM_CHECK(num_classes >= 0,
             "[one_hot] cannot infer num_classes from a Meta tensor (it has "
             "no values); pass num_classes explicitly");
  DimVector shape(self.sizes);
  shape.push_back(num_classes);
  return TensorMeta(shape, kInt64);
}

namespace {

Tensor one_hot_kernel(const Tensor& self, int64_t num_classes) {
  check_one_hot(self, num_classes);
  DimVector shape(self.sizes());
  IndexValues idx(self);
  if (num_classes == -1) {
    LOOM_CHECK(idx.size() > 0,
               "[one_hot] cannot infer the number of classes from an empty tensor; "
               "pass num_classes explicitly");
    num_classes = *std::max_element(idx.data(), idx.data() + idx.size()) + 1;
  }
  for (int64_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i];
    LOOM_CHECK_INDEX(v >= 0 && v < num_classes, "[one_hot] class value ", v,
                     " is out of range for num_classes ", num_classes,
                     " (values must be in [0, num_classes))");
  }
  shape.push_back(num_classes);
  Tensor out = empty_tensor(shape, kInt64, self.device());
  int64_t* o = out.data_ptr<int64_t>();
  if (out.nbytes() > 0) std::memset(o, 0, out.nbytes());  // an empty result has no data pointer
  for (int64_t i = 0; i < idx.size(); ++i) o[i * num_classes + idx[i]] = 1;
  return out;
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("index_select(Tensor self, int dim, Tensor index) -> Tensor");
  m.def("gather(Tensor self, int dim, Tensor index) -> Tensor");
  m.def("scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  m.def("scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor");
  m.def("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor");
  m.def("scatter_.src(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)");
  m.def("scatter_add_(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)");
  m.def("embedding(Tensor weight, Tensor indices, int padding_idx=-1) -> Tensor");
  m.def(
      "embedding_dense_backward(Tensor grad_output, Tensor indices, int num_weights, "
      "int padding_idx) -> Tensor");
  m.def("masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor");
  m.def("masked_fill_.Scalar(Tensor(a!) self, Tensor mask, Scalar value) -> Tensor(a!)");
  m.def("one_hot(Tensor self, int num_classes=-1) -> Tensor");
  Structured<&index_select_shape, &index_select_loop>::register_kernels(m, "index_select");
  Structured<&gather_shape, &gather_loop>::register_kernels(m, "gather");
  Structured<&scatter_src_shape, &scatter_src_loop>::register_kernels(m, "scatter.src");
  Structured<&scatter_value_shape, &scatter_value_loop>::register_kernels(m, "scatter.value");
  Structured<&scatter_add_shape, &scatter_add_loop>::register_kernels(m, "scatter_add");
  m.impl("scatter_.src", DispatchKey::CPU, scatter_inplace_cpu<ScatterKind::Src>);
  m.impl("scatter_.src", DispatchKey::Meta, scatter_inplace_meta<ScatterKind::Src>);
  m.impl("scatter_add_", DispatchKey::CPU, scatter_inplace_cpu<ScatterKind::Add>);
  m.impl("scatter_add_", DispatchKey::Meta, scatter_inplace_meta<ScatterKind::Add>);
  Structured<&embedding_shape, &embedding_loop>::register_kernels(m, "embedding");
  Structured<&embedding_dense_backward_shape, &embedding_dense_backward_loop>::register_kernels(
      m, "embedding_dense_backward");
  m.impl("masked_fill.Scalar", DispatchKey::CPU, masked_fill_kernel);
  m.impl("masked_fill.Scalar", DispatchKey::Meta, MetaKernel<&masked_fill_shape>::run);
  m.impl("masked_fill_.Scalar", DispatchKey::CPU, masked_fill_inplace_kernel);
  m.impl("masked_fill_.Scalar", DispatchKey::Meta, masked_fill_inplace_meta);
  m.impl("one_hot", DispatchKey::CPU, one_hot_kernel);
  m.impl("one_hot", DispatchKey::Meta, MetaKernel<&one_hot_shape>::run);
}

using IndexSig = Tensor(const Tensor&, int64_t, const Tensor&);
using ScatterSig = Tensor(const Tensor&, int64_t, const Tensor&, const Tensor&);
using MaskedFillSig = Tensor(const Tensor&, const Tensor&, const Scalar&);

Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) {
  LOOM_CALL_OP("loom::index_select", IndexSig, self, dim, index);
}
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) {
  LOOM_CALL_OP("loom::gather", IndexSig, self, dim, index);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  LOOM_CALL_OP("loom::scatter.src", ScatterSig, self, dim, index, src);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) {
  LOOM_CALL_OP("loom::scatter.value", Tensor(const Tensor&, int64_t, const Tensor&, const Scalar&),
               self, dim, index, value);
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  LOOM_CALL_OP("loom::scatter_add", ScatterSig, self, dim, index, src);
}
const Tensor& scatter_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  LOOM_CALL_INPLACE("loom::scatter_.src", ScatterSig, self, dim, index, src);
}
const Tensor& scatter_add_(const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor& src) {
  LOOM_CALL_INPLACE("loom::scatter_add_", ScatterSig, self, dim, index, src);
}
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  LOOM_CALL_OP("loom::embedding", Tensor(const Tensor&, const Tensor&, int64_t), weight, indices,
               padding_idx);
}
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value) {
  LOOM_CALL_OP("loom::masked_fill.Scalar", MaskedFillSig, self, mask, value);
}
const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, const Scalar& value) {
  LOOM_CALL_INPLACE("loom::masked_fill_.Scalar", MaskedFillSig, self, mask, value);
}
Tensor one_hot(const Tensor& self, int64_t num_classes) {
  LOOM_CALL_OP("loom::one_hot", Tensor(const Tensor&, int64_t), self, num_classes);
}

Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices,
                                int64_t num_weights, int64_t padding_idx) {
  LOOM_CALL_OP("loom::embedding_dense_backward",
               Tensor(const Tensor&, const Tensor&, int64_t, int64_t), grad_output, indices,
               num_weights, padding_idx);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

// gather and scatter see a 0-dim tensor as shape [1].
int64_t scatter_dim(const BackwardContext& c, size_t pos) {
  const int64_t rank = static_cast<int64_t>(c.input_sizes(0).size());
  return wrap_dim(c.int_arg(pos), std::max<int64_t>(rank, 1), "scatter");
}

// t placed at the origin of a zeros tensor of `sizes` (t no larger in any dim): the gradient of a
// scatter's src, which may be larger than the index it was read through.
Tensor pad_to(const Tensor& t, IntArrayRef sizes) {
  if (t.sizes() == sizes || t.dim() != static_cast<int64_t>(sizes.size())) return t;
  Tensor r = t;
  for (int64_t d = 0; d < r.dim(); ++d) {
    const int64_t missing = sizes[static_cast<size_t>(d)] - r.size(d);
    if (missing <= 0) continue;
    DimVector pad(r.sizes());
    pad[static_cast<size_t>(d)] = missing;
    std::vector<Tensor> parts{r, zeros(pad, r.options())};
    r = cat(parts, d);
  }
  return r;
}

// Gradient of self where a scatter overwrote it: none.
Tensor scattered_over(const BackwardContext& c) {
  return scatter(c.grad(0), scatter_dim(c, 1), c.input(1), Scalar(0.0));
}
Tensor gradient_of_src(const BackwardContext& c) {
  return pad_to(gather(c.grad(0), scatter_dim(c, 1), c.input(1)), c.input_sizes(2));
}
}  // namespace

LOOM_DERIVATIVES(m) {
  // Each selected row's gradient is added back into its place (rows selected twice get both).
  m.def("index_select", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (!c.needs(0)) return r;
    const Tensor& g = c.grad(0);
    const IntArrayRef in = c.input_sizes(0);
    if (in.empty()) {
      r[0] = g.reshape(in);
      return r;
    }
    const int64_t d = wrap_dim(c.int_arg(1), static_cast<int64_t>(in.size()), "index_select");
    Tensor index = c.input(1);
    DimVector along(in.size(), 1);
    along[static_cast<size_t>(d)] = index.numel();
    index = (index.dtype() == kInt64 ? index : index.to(kInt64)).reshape(along).expand(g.sizes());
    r[0] = scatter_add(zeros(in, g.options()), d, index, g);
    return r;
  });
  m.def("gather", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (c.needs(0)) {
      const Tensor& g = c.grad(0);
      r[0] = scatter_add(zeros(c.input_sizes(0), g.options()), scatter_dim(c, 1), c.input(1), g);
    }
    return r;
  });
  // Duplicate indices leave the result undefined, as in PyTorch: every duplicate src element gets
  // the gradient of the one position they all wrote.
  m.def("scatter.src", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(3);
    if (c.needs(0)) r[0] = scattered_over(c);
    if (c.needs(2)) r[2] = gradient_of_src(c);
    return r;
  });
  m.def("scatter.value", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (c.needs(0)) r[0] = scattered_over(c);
    return r;
  });
  m.def("scatter_add", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(3);
    if (c.needs(0)) r[0] = c.grad(0);
    if (c.needs(2)) r[2] = gradient_of_src(c);
    return r;
  });
  // scatter_.src, scatter_add_ and masked_fill_.Scalar use the derivatives above (name_.overload).
  m.def("embedding", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (c.needs(0)) {
      r[0] = embedding_dense_backward(c.grad(0), c.input(1), c.input_sizes(0)[0], c.int_arg(2));
    }
    return r;
  });
  // embedding_dense_backward is linear in grad_output: its derivative reads the rows back.
  m.def("embedding_dense_backward", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (!c.needs(0)) return r;
    const Tensor indices = c.input(1);
    Tensor rows = embedding(c.grad(0), indices);
    const int64_t padding_idx = c.int_arg(3);
    if (padding_idx >= 0) rows = masked_fill(rows, eq(indices, padding_idx).unsqueeze(-1), 0);
    r[0] = rows;
    return r;
  });
  m.def("masked_fill.Scalar", autograd::saves({1}), [](const BackwardContext& c) -> GradList {
    GradList r(2);
    if (c.needs(0)) r[0] = masked_fill(c.grad(0), c.input(1), 0);
    return r;
  });
  m.nondifferentiable("one_hot");
}

}  // namespace loom
