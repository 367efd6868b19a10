// View operators (share storage) and shape helpers. Views work the same on every device, so one
// CompositeExplicit kernel serves all backends.
#include <algorithm>

#include "loom/derivatives.h"
#include "op_call.h"

namespace loom {
namespace {

Tensor make_view(const Tensor& self, IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  Tensor v = make_tensor(self.storage(), self.dtype(), sizes, strides, offset);
  // A view carries its base's dispatch keys (e.g. Capture); autograd adds its own view tracking.
  DispatchKeySet extra = self.key_set() - DispatchKeySet::backends();
  for (int k = 0; k < kNumDispatchKeys; ++k) {
    if (extra.has(static_cast<DispatchKey>(k))) v.impl()->add_key(static_cast<DispatchKey>(k));
  }
  return v;
}

// Resolves one -1 in a requested shape against numel; errors name the op and both shapes.
DimVector infer_size(const char* op, IntArrayRef shape, int64_t numel) {
  DimVector out(shape);
  int64_t known = 1;
  int infer = -1;
  bool overflow = false, zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LOOM_CHECK(infer < 0, "[", op, "] only one dimension can be inferred (-1) in shape ", shape);
      infer = static_cast<int>(i);
    } else {
      LOOM_CHECK(shape[i] >= 0, "[", op, "] invalid size ", shape[i], " in shape ", shape);
      overflow |= __builtin_mul_overflow(known, shape[i], &known);
      zero |= shape[i] == 0;
    }
  }
  // Note [checked sizes]: a wrapped product could match numel (2^62 x 4 wraps to 0).
  LOOM_CHECK(!overflow || zero, "[", op, "] shape ", shape,
             " has more elements than int64 can count (input of size ", numel, ")");
  if (infer >= 0) {
    LOOM_CHECK(known != 0 && numel % known == 0, "[", op, "] shape ", shape,
               " is invalid for input of size ", numel);
    out[static_cast<size_t>(infer)] = numel / known;
  } else {
    LOOM_CHECK(known == numel, "[", op, "] shape ", shape, " is invalid for input of size ", numel);
  }
  return out;
}

// Strides that let a tensor with (old_sizes, old_strides) be viewed as new_sizes without copying,
// or nullopt. Works chunk by chunk: each run of old dimensions that is contiguous in memory can be
// re-split freely (PyTorch's computeStride).
std::optional<DimVector> view_strides(IntArrayRef old_sizes, IntArrayRef old_strides,
                                      IntArrayRef new_sizes) {
  DimVector new_strides(new_sizes.size(), 0);
  if (old_sizes.empty()) {
    for (auto& s : new_strides) s = 1;
    return new_strides;
  }
  int64_t numel = multiply_sizes(old_sizes);
  if (numel == 0) {
    if (old_sizes == new_sizes) return DimVector(old_strides);
    return contiguous_strides(new_sizes);
  }
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[static_cast<size_t>(tensor_d)];
    if (tensor_d == 0 ||
        (old_sizes[static_cast<size_t>(tensor_d - 1)] != 1 &&
         old_strides[static_cast<size_t>(tensor_d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 &&
             (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
        new_strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[static_cast<size_t>(tensor_d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor view_kernel(const Tensor& self, IntArrayRef size) {
  check_defined(self, "view", "self");
  DimVector shape = infer_size("view", size, self.numel());
  auto strides = view_strides(self.sizes(), self.strides(), shape);
  LOOM_CHECK(
      strides.has_value(), "[view] size ", size, " is not compatible with the input's size ",
      self.sizes(), " and stride ", self.strides(),
      " (at least one dimension spans across two contiguous subspaces); use reshape instead");
  return make_view(self, shape, *strides, self.storage_offset());
}

Tensor reshape_kernel(const Tensor& self, IntArrayRef size) {
  check_defined(self, "reshape", "self");
  DimVector shape = infer_size("reshape", size, self.numel());
  if (auto strides = view_strides(self.sizes(), self.strides(), shape)) {
    return view(self, shape);
  }
  return view(clone(self), shape);
}

Tensor permute_kernel(const Tensor& self, IntArrayRef dims) {
  check_defined(self, "permute", "self");
  const int64_t nd = self.dim();
  LOOM_CHECK(static_cast<int64_t>(dims.size()) == nd, "[permute] number of dims ", dims.size(),
             " doesn't match the tensor's rank ", nd, " (dims ", dims, ")");
  DimVector sizes(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd));
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[static_cast<size_t>(i)], nd, "permute");
    LOOM_CHECK(!seen[static_cast<size_t>(d)], "[permute] repeated dim ", d, " in ", dims);
    seen[static_cast<size_t>(d)] = true;
    sizes[static_cast<size_t>(i)] = self.sizes()[static_cast<size_t>(d)];
    strides[static_cast<size_t>(i)] = self.strides()[static_cast<size_t>(d)];
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor transpose_kernel(const Tensor& self, int64_t dim0, int64_t dim1) {
  check_defined(self, "transpose", "self");
  const int64_t nd = self.dim();
  if (nd == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return make_view(self, {}, {}, self.storage_offset());
  }
  int64_t a = wrap_dim(dim0, nd, "transpose"), b = wrap_dim(dim1, nd, "transpose");
  DimVector sizes(self.sizes()), strides(self.strides());
  std::swap(sizes[static_cast<size_t>(a)], sizes[static_cast<size_t>(b)]);
  std::swap(strides[static_cast<size_t>(a)], strides[static_cast<size_t>(b)]);
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor t_kernel(const Tensor& self) {
  check_defined(self, "t", "self");
  LOOM_CHECK(self.dim() <= 2, "[t] expects a tensor with <= 2 dimensions but got ", self.dim(),
             " (shape ", self.sizes(), "); use transpose or permute");
  if (self.dim() < 2) return make_view(self, self.sizes(), self.strides(), self.storage_offset());
  return transpose(self, 0, 1);
}

// [start, end) of a slice of a dimension of `size`, with Python slice semantics: negative indices
// count from the end, out-of-range ones clamp.
std::pair<int64_t, int64_t> slice_bounds(int64_t size, std::optional<int64_t> start,
                                         std::optional<int64_t> end) {
  int64_t s = start.value_or(0), e = end.value_or(size);
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, s, size);
  return {s, e};
}

Tensor slice_kernel(const Tensor& self, int64_t dim, std::optional<int64_t> start,
                    std::optional<int64_t> end, int64_t step) {
  check_defined(self, "slice", "self");
  LOOM_CHECK(self.dim() > 0, "[slice] cannot slice a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "slice");
  LOOM_CHECK(step > 0, "[slice] step must be positive but got ", step);
  const auto [s, e] = slice_bounds(self.sizes()[static_cast<size_t>(d)], start, end);
  DimVector sizes(self.sizes()), strides(self.strides());
  sizes[static_cast<size_t>(d)] = (e - s + step - 1) / step;
  strides[static_cast<size_t>(d)] *= step;
  return make_view(self, sizes, strides,
                   self.storage_offset() + s * self.strides()[static_cast<size_t>(d)]);
}

Tensor narrow_kernel(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  check_defined(self, "narrow", "self");
  LOOM_CHECK(self.dim() > 0, "[narrow] cannot narrow a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "narrow");
  const int64_t size = self.sizes()[static_cast<size_t>(d)];
  if (start < 0) start += size;
  LOOM_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= size, "[narrow] start (", start,
                   ") + length (", length, ") exceeds dimension size (", size, ") of dim ", d,
                   " in shape ", self.sizes());
  return slice(self, d, start, start + length, 1);
}

Tensor select_kernel(const Tensor& self, int64_t dim, int64_t index) {
  check_defined(self, "select", "self");
  LOOM_CHECK_INDEX(self.dim() > 0, "[select] cannot select from a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "select");
  const int64_t size = self.sizes()[static_cast<size_t>(d)];
  LOOM_CHECK_INDEX(index >= -size && index < size, "[select] index ", index,
                   " is out of range for dimension ", d, " with size ", size, " (shape ",
                   self.sizes(), ")");
  if (index < 0) index += size;
  DimVector sizes(self.sizes()), strides(self.strides());
  int64_t offset = self.storage_offset() + index * strides[static_cast<size_t>(d)];
  sizes.erase(static_cast<size_t>(d));
  strides.erase(static_cast<size_t>(d));
  return make_view(self, sizes, strides, offset);
}

Tensor expand_kernel(const Tensor& self, IntArrayRef size) {
  check_defined(self, "expand", "self");
  const int64_t nd = static_cast<int64_t>(size.size());
  for (int64_t want : size) {
    LOOM_CHECK(want >= -1, "[expand] the expanded size ", want, " is not allowed in sizes ", size);
  }
  LOOM_CHECK(nd >= self.dim(), "[expand] the number of sizes provided (", nd,
             ") must be greater or equal to the number of dimensions in the tensor (", self.dim(),
             ")");
  DimVector sizes(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd));
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t off = i - (nd - self.dim());
    int64_t want = size[static_cast<size_t>(i)];
    if (off < 0) {
      LOOM_CHECK(want >= 0, "[expand] the expanded size ", want,
                 " is not allowed in a leading, non-existing dimension ", i);
      sizes[static_cast<size_t>(i)] = want;
      strides[static_cast<size_t>(i)] = 0;
      continue;
    }
    int64_t have = self.sizes()[static_cast<size_t>(off)];
    if (want == -1) want = have;
    LOOM_CHECK(have == want || have == 1, "[expand] the expanded size of the tensor (", want,
               ") must match the existing size (", have, ") at non-singleton dimension ", i,
               ". Target sizes: ", size, ". Tensor sizes: ", self.sizes());
    sizes[static_cast<size_t>(i)] = want;
    strides[static_cast<size_t>(i)] = have == want ? self.strides()[static_cast<size_t>(off)] : 0;
  }
  (void)checked_numel(sizes, "expand");  // Note [checked sizes]: stride-0 sizes can still overflow
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor squeeze_kernel(const Tensor& self, std::optional<int64_t> dim) {
  check_defined(self, "squeeze", "self");
  DimVector sizes, strides;
  std::optional<int64_t> d;
  if (dim) d = wrap_dim(*dim, self.dim(), "squeeze");
  for (int64_t i = 0; i < self.dim(); ++i) {
    int64_t s = self.sizes()[static_cast<size_t>(i)];
    bool drop = s == 1 && (!d || *d == i);
    if (!drop) {
      sizes.push_back(s);
      strides.push_back(self.strides()[static_cast<size_t>(i)]);
    }
  }
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor unsqueeze_kernel(const Tensor& self, int64_t dim) {
  check_defined(self, "unsqueeze", "self");
  int64_t d = wrap_dim(dim, self.dim() + 1, "unsqueeze");
  DimVector sizes(self.sizes()), strides(self.strides());
  int64_t st = d < self.dim() ? sizes[static_cast<size_t>(d)] * strides[static_cast<size_t>(d)] : 1;
  sizes.insert(static_cast<size_t>(d), 1);
  strides.insert(static_cast<size_t>(d), st);
  return make_view(self, sizes, strides, self.storage_offset());
}

Tensor flatten_kernel(const Tensor& self, int64_t start_dim, int64_t end_dim) {
  check_defined(self, "flatten", "self");
  if (self.dim() == 0) return reshape(self, {1});
  int64_t s = wrap_dim(start_dim, self.dim(), "flatten");
  int64_t e = wrap_dim(end_dim, self.dim(), "flatten");
  LOOM_CHECK(s <= e, "[flatten] start_dim (", start_dim, ") cannot come after end_dim (", end_dim,
             ")");
  DimVector shape;
  for (int64_t i = 0; i < s; ++i) shape.push_back(self.sizes()[static_cast<size_t>(i)]);
  int64_t mid = 1;
  for (int64_t i = s; i <= e; ++i) {
    // Wraps only beside a zero size elsewhere (an empty tensor): Note [checked sizes].
    if (__builtin_mul_overflow(mid, self.sizes()[static_cast<size_t>(i)], &mid)) {
      (void)checked_numel(
          self.sizes().slice(static_cast<size_t>(s), static_cast<size_t>(e - s + 1)), "flatten");
    }
  }
  shape.push_back(mid);
  for (int64_t i = e + 1; i < self.dim(); ++i)
    shape.push_back(self.sizes()[static_cast<size_t>(i)]);
  return reshape(self, shape);
}

Tensor as_strided_kernel(const Tensor& self, IntArrayRef size, IntArrayRef stride,
                         std::optional<int64_t> storage_offset) {
  check_defined(self, "as_strided", "self");
  LOOM_CHECK(size.size() == stride.size(), "[as_strided] got ", size.size(), " sizes but ",
             stride.size(), " strides");
  int64_t offset = storage_offset.value_or(self.storage_offset());
  LOOM_CHECK(offset >= 0, "[as_strided] negative storage offset ", offset);
  int64_t max_index = offset;
  bool empty = false, overflow = false;
  for (size_t i = 0; i < size.size(); ++i) {
    LOOM_CHECK(size[i] >= 0, "[as_strided] negative size in ", size);
    LOOM_CHECK(stride[i] >= 0, "[as_strided] negative stride in ", stride);
    if (size[i] == 0) empty = true;
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(size[i] - 1, stride[i], &reach);
    overflow |= __builtin_add_overflow(max_index, reach, &max_index);
  }
  (void)checked_numel(size, "as_strided");
  LOOM_CHECK(empty || !overflow, "[as_strided] size ", size, " stride ", stride, " offset ", offset,
             " reach beyond the largest index int64 can hold");
  if (!empty && !self.is_meta()) {
    int64_t storage_elems = static_cast<int64_t>(self.storage()->nbytes() / self.element_size());
    LOOM_CHECK(max_index < storage_elems, "[as_strided] size ", size, " stride ", stride,
               " offset ", offset, " needs ", max_index + 1,
               " elements but the storage holds only ", storage_elems);
  }
  return make_view(self, size, stride, offset);
}

std::vector<Tensor> split_with_sizes_kernel(const Tensor& self, IntArrayRef sizes, int64_t dim) {
  check_defined(self, "split_with_sizes", "self");
  LOOM_CHECK(self.dim() > 0, "[split_with_sizes] cannot split a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, "[split_with_sizes] split sizes must be non-negative but got ", sizes);
    total += s;
  }
  LOOM_CHECK(total == self.size(d), "[split_with_sizes] split sizes ", sizes, " sum to ", total,
             " but dimension ", d, " has size ", self.size(d));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(self, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split_kernel(const Tensor& self, int64_t split_size, int64_t dim) {
  check_defined(self, "split", "self");
  LOOM_CHECK(self.dim() > 0, "[split] cannot split a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "split");
  LOOM_CHECK(split_size > 0 || self.size(d) == 0, "[split] split_size must be positive but got ",
             split_size);
  std::vector<int64_t> sizes;
  int64_t n = self.size(d);
  if (n == 0) sizes.push_back(0);
  for (int64_t start = 0; start < n; start += split_size)
    sizes.push_back(std::min(split_size, n - start));
  return split_with_sizes(self, sizes, d);
}

std::vector<Tensor> chunk_kernel(const Tensor& self, int64_t chunks, int64_t dim) {
  check_defined(self, "chunk", "self");
  LOOM_CHECK(chunks > 0, "[chunk] number of chunks must be positive but got ", chunks);
  LOOM_CHECK(self.dim() > 0, "[chunk] cannot chunk a 0-dim tensor");
  int64_t d = wrap_dim(dim, self.dim(), "chunk");
  int64_t n = self.size(d);
  int64_t each = (n + chunks - 1) / chunks;
  if (each == 0) each = 1;
  if (n == 0) {
    std::vector<Tensor> out;
    for (int64_t i = 0; i < chunks; ++i) out.push_back(narrow(self, d, 0, 0));
    return out;
  }
  return split(self, each, d);
}

std::vector<Tensor> unbind_kernel(const Tensor& self, int64_t dim) {
  check_defined(self, "unbind", "self");
  int64_t d = wrap_dim(dim, self.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < self.size(d); ++i) out.push_back(select(self, d, i));
  return out;
}

}  // namespace

std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b) {
  size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> out(nd, 1);
  for (size_t i = 0; i < nd; ++i) {
    int64_t x = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t y = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    LOOM_CHECK(x == y || x == 1 || y == 1, "[broadcast_shapes] shapes ", a, " and ", b,
               " cannot be broadcast (dimension ", i, ": ", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("view(Tensor(a) self, int[] size) -> Tensor(a)");
  m.def("reshape(Tensor(a) self, int[] shape) -> Tensor(a)");
  m.def("permute(Tensor(a) self, int[] dims) -> Tensor(a)");
  m.def("transpose(Tensor(a) self, int dim0, int dim1) -> Tensor(a)");
  m.def("t(Tensor(a) self) -> Tensor(a)");
  m.def(
      "slice(Tensor(a) self, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor(a)");
  m.def("narrow(Tensor(a) self, int dim, int start, int length) -> Tensor(a)");
  m.def("select(Tensor(a) self, int dim, int index) -> Tensor(a)");
  m.def("expand(Tensor(a) self, int[] size) -> Tensor(a)");
  m.def("squeeze(Tensor(a) self, int? dim=None) -> Tensor(a)");
  m.def("unsqueeze(Tensor(a) self, int dim) -> Tensor(a)");
  m.def("flatten(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)");
  m.def(
      "as_strided(Tensor(a) self, int[] size, int[] stride, int? storage_offset=None) -> "
      "Tensor(a)");
  m.def("split(Tensor(a) self, int split_size, int dim=0) -> Tensor(a)[]");
  m.def("split_with_sizes(Tensor(a) self, int[] split_sizes, int dim=0) -> Tensor(a)[]");
  m.def("chunk(Tensor(a) self, int chunks, int dim=0) -> Tensor(a)[]");
  m.def("unbind(Tensor(a) self, int dim=0) -> Tensor(a)[]");
  m.impl("view", DispatchKey::CompositeExplicit, view_kernel);
  m.impl("permute", DispatchKey::CompositeExplicit, permute_kernel);
  m.impl("transpose", DispatchKey::CompositeExplicit, transpose_kernel);
  m.impl("slice", DispatchKey::CompositeExplicit, slice_kernel);
  m.impl("select", DispatchKey::CompositeExplicit, select_kernel);
  m.impl("expand", DispatchKey::CompositeExplicit, expand_kernel);
  m.impl("squeeze", DispatchKey::CompositeExplicit, squeeze_kernel);
  m.impl("unsqueeze", DispatchKey::CompositeExplicit, unsqueeze_kernel);
  m.impl("as_strided", DispatchKey::CompositeExplicit, as_strided_kernel);
  // Not decompositions for autograd: one node whose backward joins the pieces' gradients, instead
  // of one node per piece each making a whole input-sized gradient (quadratic for unbind).
  m.impl("split_with_sizes", DispatchKey::CompositeExplicit, split_with_sizes_kernel);
  m.impl("unbind", DispatchKey::CompositeExplicit, unbind_kernel);
  // Decompositions into the views above.
  m.impl("reshape", DispatchKey::CompositeImplicit, reshape_kernel);
  m.impl("t", DispatchKey::CompositeImplicit, t_kernel);
  m.impl("narrow", DispatchKey::CompositeImplicit, narrow_kernel);
  m.impl("flatten", DispatchKey::CompositeImplicit, flatten_kernel);
  m.impl("split", DispatchKey::CompositeImplicit, split_kernel);
  m.impl("chunk", DispatchKey::CompositeImplicit, chunk_kernel);
}

using ViewSig = Tensor(const Tensor&, IntArrayRef);
Tensor view(const Tensor& self, IntArrayRef size) {
  LOOM_CALL_OP("loom::view", ViewSig, self, size);
}
Tensor reshape(const Tensor& self, IntArrayRef size) {
  LOOM_CALL_OP("loom::reshape", ViewSig, self, size);
}
Tensor permute(const Tensor& self, IntArrayRef dims) {
  LOOM_CALL_OP("loom::permute", ViewSig, self, dims);
}
Tensor transpose(const Tensor& self, int64_t dim0, int64_t dim1) {
  LOOM_CALL_OP("loom::transpose", Tensor(const Tensor&, int64_t, int64_t), self, dim0, dim1);
}
Tensor t(const Tensor& self) {
  LOOM_CALL_OP("loom::t", Tensor(const Tensor&), self);
}
Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step) {
  LOOM_CALL_OP(
      "loom::slice",
      Tensor(const Tensor&, int64_t, std::optional<int64_t>, std::optional<int64_t>, int64_t), self,
      dim, start, end, step);
}
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  LOOM_CALL_OP("loom::narrow", Tensor(const Tensor&, int64_t, int64_t, int64_t), self, dim, start,
               length);
}
Tensor select(const Tensor& self, int64_t dim, int64_t index) {
  LOOM_CALL_OP("loom::select", Tensor(const Tensor&, int64_t, int64_t), self, dim, index);
}
Tensor expand(const Tensor& self, IntArrayRef size) {
  LOOM_CALL_OP("loom::expand", ViewSig, self, size);
}
Tensor squeeze(const Tensor& self, std::optional<int64_t> dim) {
  LOOM_CALL_OP("loom::squeeze", Tensor(const Tensor&, std::optional<int64_t>), self, dim);
}
Tensor unsqueeze(const Tensor& self, int64_t dim) {
  LOOM_CALL_OP("loom::unsqueeze", Tensor(const Tensor&, int64_t), self, dim);
}
Tensor flatten(const Tensor& self, int64_t start_dim, int64_t end_dim) {
  LOOM_CALL_OP("loom::flatten", Tensor(const Tensor&, int64_t, int64_t), self, start_dim, end_dim);
}
Tensor as_strided(const Tensor& self, IntArrayRef size, IntArrayRef stride,
                  std::optional<int64_t> storage_offset) {
  LOOM_CALL_OP("loom::as_strided",
               Tensor(const Tensor&, IntArrayRef, IntArrayRef, std::optional<int64_t>), self, size,
               stride, storage_offset);
}
Tensor broadcast_to(const Tensor& self, IntArrayRef size) {
  return expand(self, size);
}
std::vector<Tensor> split(const Tensor& self, int64_t split_size, int64_t dim) {
  LOOM_CALL_OP("loom::split", std::vector<Tensor>(const Tensor&, int64_t, int64_t), self,
               split_size, dim);
}
std::vector<Tensor> split_with_sizes(const Tensor& self, IntArrayRef sizes, int64_t dim) {
  LOOM_CALL_OP("loom::split_with_sizes", std::vector<Tensor>(const Tensor&, IntArrayRef, int64_t),
               self, sizes, dim);
}
std::vector<Tensor> chunk(const Tensor& self, int64_t chunks, int64_t dim) {
  LOOM_CALL_OP("loom::chunk", std::vector<Tensor>(const Tensor&, int64_t, int64_t), self, chunks,
               dim);
}
std::vector<Tensor> unbind(const Tensor& self, int64_t dim) {
  LOOM_CALL_OP("loom::unbind", std::vector<Tensor>(const Tensor&, int64_t), self, dim);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

std::optional<int64_t> optional_int(const IValue& v) {
  return v.is_none() ? std::nullopt : std::optional<int64_t>(v.to_int());
}

// A zeros tensor shaped like `like` except for `len` along `dim`.
Tensor zeros_along(const Tensor& like, int64_t dim, int64_t len) {
  DimVector sizes(like.sizes());
  sizes[static_cast<size_t>(dim)] = len;
  return zeros(sizes, like.options());
}

// Note [Gradients of views]
// The gradient of a view with respect to its input is zeros shaped like the input, with the view's
// region holding the view's gradient. Outside create_graph that is a fresh zeros tensor with the
// region written in place: the cheapest form, and nothing records it. With create_graph the result
// must carry history back to the gradient, and writing in place into a view of a tensor that does
// not require grad would lose it (views of such tensors are not tracked), so the same tensor is
// assembled out of place with cat instead.

// Gradient of self.slice(d, start, <end>, step) (whose gradient is g) with respect to self.
Tensor slice_backward(const Tensor& g, IntArrayRef input_sizes, int64_t d, int64_t start,
                      int64_t step, bool create_graph) {
  const int64_t n = g.size(d);
  if (!create_graph) {
    Tensor z = zeros(input_sizes, g.options());
    if (n > 0) z.slice(d, start, start + (n - 1) * step + 1, step).copy_(g);
    return z;
  }
  Tensor mid = g;
  if (step > 1 && n > 1) {
    // Interleave step - 1 zero rows after each row of g, then drop the trailing ones.
    Tensor rows = g.unsqueeze(d + 1);
    std::vector<Tensor> pair{rows, zeros_along(rows, d + 1, step - 1)};
    DimVector flat(g.sizes());
    flat[static_cast<size_t>(d)] = n * step;
    mid = cat(pair, d + 1).reshape(flat).narrow(d, 0, (n - 1) * step + 1);
  }
  const int64_t after = input_sizes[static_cast<size_t>(d)] - start - mid.size(d);
  std::vector<Tensor> parts;
  if (start > 0) parts.push_back(zeros_along(mid, d, start));
  parts.push_back(mid);
  if (after > 0) parts.push_back(zeros_along(mid, d, after));
  return parts.size() == 1 ? mid : cat(parts, d);
}

// The gradients of a multi-output view's pieces, zeros for those that got none; piece_shape(i, s)
// turns the input's sizes s into piece i's.
template <class F>
std::vector<Tensor> piece_gradients(const BackwardContext& c, IntArrayRef input_sizes,
                                    const F& piece_shape) {
  TensorOptions options;
  for (size_t i = 0; i < c.num_grads(); ++i) {
    if (c.grad(i).defined()) options = c.grad(i).options();
  }
  std::vector<Tensor> pieces;
  for (size_t i = 0; i < c.num_grads(); ++i) {
    if (c.grad(i).defined()) {
      pieces.push_back(c.grad(i));
      continue;
    }
    DimVector s(input_sizes);
    piece_shape(i, s);
    pieces.push_back(zeros(s, options));
  }
  return pieces;
}
}  // namespace

LOOM_DERIVATIVES(m) {
  // Views: see Note [Gradients of views].
  m.def("view", {},
        [](const BackwardContext& c) -> GradList { return {c.grad(0).reshape(c.input_sizes(0))}; });
  m.def("permute", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef dims = c.int_list_arg(1);
    const int64_t nd = static_cast<int64_t>(dims.size());
    std::vector<int64_t> inverse(dims.size());
    for (int64_t i = 0; i < nd; ++i) {
      inverse[static_cast<size_t>(wrap_dim(dims[static_cast<size_t>(i)], nd, "permute"))] = i;
    }
    return {c.grad(0).permute(inverse)};
  });
  m.def("transpose", {}, [](const BackwardContext& c) -> GradList {
    return {c.grad(0).transpose(c.int_arg(1), c.int_arg(2))};
  });
  m.def("slice", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef in = c.input_sizes(0);
    const int64_t d = wrap_dim(c.int_arg(1), static_cast<int64_t>(in.size()), "slice");
    const int64_t start =
        slice_bounds(in[static_cast<size_t>(d)], optional_int(c.arg(2)), optional_int(c.arg(3)))
            .first;
    return {slice_backward(c.grad(0), in, d, start, c.int_arg(4), c.create_graph())};
  });
  m.def("select", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef in = c.input_sizes(0);
    const int64_t d = wrap_dim(c.int_arg(1), static_cast<int64_t>(in.size()), "select");
    int64_t index = c.int_arg(2);
    if (index < 0) index += in[static_cast<size_t>(d)];
    return {slice_backward(c.grad(0).unsqueeze(d), in, d, index, 1, c.create_graph())};
  });
  m.def("expand", {}, [](const BackwardContext& c) -> GradList {
    return {autograd::sum_to(c.grad(0), c.input_sizes(0))};
  });
  // squeeze and unsqueeze only drop or add size-1 dims.
  m.def("squeeze", {},
        [](const BackwardContext& c) -> GradList { return {c.grad(0).reshape(c.input_sizes(0))}; });
  m.def("unsqueeze", {},
        [](const BackwardContext& c) -> GradList { return {c.grad(0).reshape(c.input_sizes(0))}; });
  // Multi-output views: the pieces' gradients joined (zeros for pieces that got none).
  m.def("split_with_sizes", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef in = c.input_sizes(0);
    const int64_t d = wrap_dim(c.int_arg(2), static_cast<int64_t>(in.size()), "split_with_sizes");
    const IntArrayRef sizes = c.int_list_arg(1);
    auto shape = [&](size_t i, DimVector& s) { s[static_cast<size_t>(d)] = sizes[i]; };
    return {cat(piece_gradients(c, in, shape), d)};
  });
  m.def("unbind", {}, [](const BackwardContext& c) -> GradList {
    const IntArrayRef in = c.input_sizes(0);
    const int64_t d = wrap_dim(c.int_arg(1), static_cast<int64_t>(in.size()), "unbind");
    auto shape = [&](size_t, DimVector& s) { s.erase(static_cast<size_t>(d)); };
    return {stack(piece_gradients(c, in, shape), d)};
  });
  m.def("as_strided", {}, [](const BackwardContext& c) -> GradList {
    const std::optional<int64_t> offset = optional_int(c.arg(3));
    return {autograd::as_strided_backward(
        c.grad(0), c.input_sizes(0), c.input_strides(0), c.input_storage_offset(0),
        c.int_list_arg(1), c.int_list_arg(2), offset.value_or(c.input_storage_offset(0)))};
  });
}

}  // namespace loom
