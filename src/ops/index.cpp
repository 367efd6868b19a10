// Indexing operators: index_select, gather, scatter / scatter_add (and in place), embedding,
// masked_fill, one_hot: schemas, shape functions, derivatives (the CPU kernels are in
// cpu/index_kernels.cpp).
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

// ---- index_select and embedding ----

// The result's sizes: self's with dim's replaced by the number of indices.
DimVector index_select_sizes(const char* op, TensorMetaRef self, int64_t dim, TensorMetaRef index) {
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
  LOOM_CHECK(grad_output.sizes.size() == nd + 1 && grad_output.sizes.slice(0, nd) == indices.sizes,
             "[", op, "] expected grad_output of shape ", indices.sizes,
             " + [embedding_dim] (indices' shape plus one) but got ", grad_output.sizes);
  const DType dt = grad_output.dtype;
  LOOM_CHECK_TYPE(is_floating(dt), "[", op, "] expected a floating grad_output but got ", dt);
  return TensorMeta({num_weights, grad_output.size(-1)}, dt);
}

namespace {

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
    LOOM_CHECK(static_cast<int64_t>(k) == d || is[k] <= ss[k], "[gather] index shape ", index.sizes,
               " is larger than self shape ", self.sizes, " in dimension ", k);
  }
  return TensorMeta(index.sizes, self.dtype);
}

namespace {

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
    LOOM_CHECK(is[k] <= rs[k], "[", op, "] index shape ", index.sizes, " is larger than src shape ",
               rs.ref(), " in dimension ", k);
  }
  return TensorMeta(self.sizes, self.dtype);
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
TensorMeta scatter_inplace_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                 TensorMetaRef src) {
  return scatter_check("scatter_", ScatterKind::Src, self, dim, index, OptionalTensorMetaRef(src));
}
TensorMeta scatter_add_inplace_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                                     TensorMetaRef src) {
  return scatter_check("scatter_add_", ScatterKind::Add, self, dim, index,
                       OptionalTensorMetaRef(src));
}
TensorMeta scatter_add_shape(TensorMetaRef self, int64_t dim, TensorMetaRef index,
                             TensorMetaRef src) {
  return scatter_check("scatter_add", ScatterKind::Add, self, dim, index,
                       OptionalTensorMetaRef(src));
}

namespace {

// In place: the Meta kernels check and return self (the CPU kernels check, then fill self).
template <ScatterKind kKind>
Tensor scatter_inplace_meta(const Tensor& self, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  if constexpr (kKind == ScatterKind::Add) {
    scatter_add_inplace_shape(self, dim, index, src);
  } else {
    scatter_inplace_shape(self, dim, index, src);
  }
  return self;
}

// ---- masked_fill ----

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

}  // namespace

// ---- one_hot ----

void one_hot_check(TensorMetaRef self, int64_t num_classes) {
  LOOM_CHECK_TYPE(self.dtype == kInt64,
                  "[one_hot] is only applicable to index tensors of dtype "
                  "int64 but got ",
                  self.dtype);
  LOOM_CHECK(num_classes >= -1,
             "[one_hot] num_classes must be -1 (infer) or non-negative but "
             "got ",
             num_classes);
}

// Note [Data-dependent sizes]
// one_hot with num_classes=-1 takes its class count from the largest value of self: a size that
// depends on data. Its shape function answers only when num_classes is given (a compiler must
// treat the other case as unknown, a graph break); the CPU kernel, which sees the values, is not
// structured: it computes its own output size.
TensorMeta one_hot_shape(TensorMetaRef self, int64_t num_classes) {
  one_hot_check(self, num_classes);
  LOOM_CHECK(num_classes >= 0,
             "[one_hot] cannot infer num_classes from a Meta tensor (it has "
             "no values); pass num_classes explicitly");
  DimVector shape(self.sizes);
  shape.push_back(num_classes);
  return TensorMeta(shape, kInt64);
}

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
  MetaKernel<&index_select_shape>::register_meta(m, "index_select");
  MetaKernel<&gather_shape>::register_meta(m, "gather");
  MetaKernel<&scatter_src_shape>::register_meta(m, "scatter.src");
  MetaKernel<&scatter_value_shape>::register_meta(m, "scatter.value");
  MetaKernel<&scatter_add_shape>::register_meta(m, "scatter_add");
  m.impl("scatter_.src", DispatchKey::Meta, scatter_inplace_meta<ScatterKind::Src>);
  m.impl("scatter_add_", DispatchKey::Meta, scatter_inplace_meta<ScatterKind::Add>);
  MetaKernel<&embedding_shape>::register_meta(m, "embedding");
  MetaKernel<&embedding_dense_backward_shape>::register_meta(m, "embedding_dense_backward");
  m.impl("masked_fill.Scalar", DispatchKey::Meta, MetaKernel<&masked_fill_shape>::run);
  m.impl("masked_fill_.Scalar", DispatchKey::Meta, masked_fill_inplace_meta);
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
