// Joining: cat (schema and shape function here, its CPU kernel in cpu/join_kernels.cpp) and stack
// (unsqueeze + cat).
#include "loom/derivatives.h"
#include "op_call.h"
#include "shapes.h"

namespace loom {
namespace {

// PyTorch keeps accepting 1-D tensors of size 0 in cat whatever the other shapes are (a legacy of
// the days when an empty tensor had shape [0]); they take part in dtype promotion only.
bool is_legacy_empty(TensorMetaRef t) {
  return t.dim() == 1 && t.size(0) == 0;
}

}  // namespace
TensorMeta cat_shape(TensorMetaList tensors, int64_t dim) {
  LOOM_CHECK(!tensors.empty(), "[cat] expected a non-empty list of tensors");
  DType dtype = kBool;
  std::optional<TensorMetaRef> ref;
  size_t ref_index = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors.defined(i), "[cat] tensor ", i, " in the list is undefined");
    const TensorMetaRef t = tensors[i];
    LOOM_CHECK(t.dim() > 0, "[cat] zero-dimensional tensor (at position ", i,
               ") cannot be concatenated");
    dtype = i == 0 ? t.dtype : promote_types(dtype, t.dtype);
    if (!ref && !is_legacy_empty(t)) {
      ref = t;
      ref_index = i;
    }
  }
  const Device device = tensors[0].device;
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].device == device,
               "[cat] expected all tensors on one device, but "
               "tensor 0 is on ",
               device, " and tensor ", i, " is on ", tensors[i].device);
  }
  if (!ref) {
    wrap_dim(dim, 1, "cat");
    return TensorMeta(IntArrayRef({0}), dtype);
  }
  const int64_t nd = ref->dim();
  const int64_t d = wrap_dim(dim, nd, "cat");
  DimVector out_shape(ref->sizes);
  out_shape[static_cast<size_t>(d)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorMetaRef t = tensors[i];
    if (is_legacy_empty(t)) continue;
    LOOM_CHECK(t.dim() == nd, "[cat] tensors must have the same number of dimensions: tensor ",
               ref_index, " has shape ", ref->sizes, " but tensor ", i, " has shape ", t.sizes);
    for (int64_t k = 0; k < nd; ++k) {
      if (k == d) continue;
      LOOM_CHECK(t.size(k) == ref->size(k),
                 "[cat] sizes of tensors must match except in "
                 "dimension ",
                 d, ": tensor ", ref_index, " has shape ", ref->sizes, " but tensor ", i,
                 " has shape ", t.sizes, " (mismatch in dimension ", k, ")");
    }
    out_shape[static_cast<size_t>(d)] += t.size(d);
  }
  return TensorMeta(out_shape, dtype);
}

namespace {

Tensor stack_kernel(TensorList tensors, int64_t dim) {
  LOOM_CHECK(!tensors.empty(), "[stack] expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].defined(), "[stack] tensor ", i, " in the list is undefined");
    LOOM_CHECK(tensors[i].sizes() == tensors[0].sizes(),
               "[stack] expects each tensor to be equal "
               "size, but got ",
               tensors[0].sizes(), " at entry 0 and ", tensors[i].sizes(), " at entry ", i);
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("cat(Tensor[] tensors, int dim=0) -> Tensor");
  m.def("stack(Tensor[] tensors, int dim=0) -> Tensor");
  MetaKernel<&cat_shape>::register_meta(m, "cat");
  m.impl("stack", DispatchKey::CompositeImplicit, stack_kernel);
}

Tensor cat(TensorList tensors, int64_t dim) {
  LOOM_CALL_OP("loom::cat", Tensor(TensorList, int64_t), tensors, dim);
}
Tensor stack(TensorList tensors, int64_t dim) {
  LOOM_CALL_OP("loom::stack", Tensor(TensorList, int64_t), tensors, dim);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;
}  // namespace

LOOM_DERIVATIVES(m) {
  // Each input's gradient is its slab of the output's gradient (legacy empty inputs get an empty
  // one). The engine casts each slab back to its input's dtype.
  m.def("cat", {}, [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    const size_t n = c.list_size(0);
    auto legacy_empty = [&](size_t i) {
      const IntArrayRef s = c.input_sizes(i);
      return s.size() == 1 && s[0] == 0;
    };
    GradList r(n);
    int64_t rank = -1;
    for (size_t i = 0; i < n && rank < 0; ++i) {
      if (!legacy_empty(i)) rank = static_cast<int64_t>(c.input_sizes(i).size());
    }
    const int64_t d = rank < 0 ? 0 : wrap_dim(c.int_arg(1), rank, "cat");
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      if (legacy_empty(i)) {
        if (c.needs(i)) r[i] = zeros({0}, g.options());
        continue;
      }
      const int64_t len = c.input_sizes(i)[static_cast<size_t>(d)];
      if (c.needs(i)) r[i] = g.narrow(d, offset, len);
      offset += len;
    }
    return r;
  });
}

}  // namespace loom
