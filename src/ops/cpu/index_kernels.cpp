// CPU kernels of the index family: index_select, embedding and its backward, gather, scatter,
// masked_fill (through TensorIterator) and one_hot, whose output size depends on the values (Note
// [Data-dependent sizes]). Indices are data, so their range is checked here.
#include <algorithm>
#include <array>
#include <cstring>

#include "loom/parallel.h"
#include "ops/loops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/tensor_iterator.h"

namespace loom {
namespace {

enum class ScatterKind { Src, Value, Add };

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

void index_select_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index) {
  index_select_fill("index_select", out, self, dim, index);
}

void embedding_loop(const Tensor& out, const Tensor& weight, const Tensor& indices, int64_t) {
  // The rows of weight that the flattened indices name, into out seen as [n, embedding_dim].
  index_select_fill("embedding", out.view({indices.numel(), weight.size(1)}), weight, 0,
                    reshape(indices, {-1}));
}

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

Tensor one_hot_kernel(const Tensor& self, int64_t num_classes) {
  one_hot_check(self, num_classes);
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

// In place: check (the operator's shape function), then fill self.
template <ScatterKind kKind>
Tensor scatter_inplace_cpu(const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor& src) {
  if constexpr (kKind == ScatterKind::Add) {
    scatter_add_inplace_shape(self, dim, index, src);
    scatter_fill("scatter_add_", kKind, self, dim, index, src, 0);
  } else {
    scatter_inplace_shape(self, dim, index, src);
    scatter_fill("scatter_", kKind, self, dim, index, src, 0);
  }
  return self;
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&index_select_shape, &index_select_loop>::register_cpu(m, "index_select");
  Structured<&gather_shape, &gather_loop>::register_cpu(m, "gather");
  Structured<&scatter_src_shape, &scatter_src_loop>::register_cpu(m, "scatter.src");
  Structured<&scatter_value_shape, &scatter_value_loop>::register_cpu(m, "scatter.value");
  Structured<&scatter_add_shape, &scatter_add_loop>::register_cpu(m, "scatter_add");
  Structured<&embedding_shape, &embedding_loop>::register_cpu(m, "embedding");
  Structured<&embedding_dense_backward_shape, &embedding_dense_backward_loop>::register_cpu(
      m, "embedding_dense_backward");
  m.impl("scatter_.src", scatter_inplace_cpu<ScatterKind::Src>);
  m.impl("scatter_add_", scatter_inplace_cpu<ScatterKind::Add>);
  m.impl("masked_fill.Scalar", masked_fill_kernel);
  m.impl("masked_fill_.Scalar", masked_fill_inplace_kernel);
  m.impl("one_hot", one_hot_kernel);
}

}  // namespace loom
