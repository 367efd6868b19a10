// CUDA kernels of the index family: index_select, embedding, embedding_dense_backward, gather,
// scatter.src / scatter.value / scatter_add and the in-place scatter_ / scatter_add_ (loops in
// index_kernels.cu). Index values are checked on the device before anything is written, with the
// CPU kernels' errors (Note [Device index checks] in index_check.h). Every kernel here is
// deterministic: scatter_add and embedding_dense_backward add in the CPU's order without atomics.
#include <cstring>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/index_check.h"
#include "ops/cuda/index_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/tensor_iterator.h"

namespace loom {
namespace {

using cuda_ops::ScatterMode;

const int64_t* int64_ptr(const Tensor& t) {
  return static_cast<const int64_t*>(t.data_ptr());
}

// The index as contiguous int64, every value checked against [0, dim_size).
Tensor checked_range(const char* op, const char* name, const Tensor& index, int64_t dim,
                     int64_t dim_size) {
  return cuda_ops::checked_indices(name, index, dim_size, std::nullopt, [&](int64_t v) {
    LOOM_THROW(IndexError, "[", op, "] index ", v, " is out of range for dimension ", dim,
               " with size ", dim_size);
  });
}

void index_select_fill(const char* op, const char* name, const Tensor& out, const Tensor& self,
                       int64_t dim, const Tensor& index) {
  const int64_t nd = self.dim();
  const int64_t d = wrap_dim(dim, std::max<int64_t>(nd, 1), op);
  const int64_t dim_size = nd > 0 ? self.size(d) : 1;
  const Tensor idx = checked_range(op, name, index, d, dim_size);
  if (out.numel() == 0) return;
  const Tensor src = self.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d && nd > 0; ++k) outer *= self.size(k);
  for (int64_t k = d + 1; k < nd; ++k) inner *= self.size(k);
  cuda_ops::check_launch(
      cuda_ops::launch_index_select(src.data_ptr(), out.data_ptr(), int64_ptr(idx), outer, dim_size,
                                    idx.numel(), inner, static_cast<int>(self.element_size()),
                                    cuda_ops::stream_of(self)),
      name);
}

void index_select_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index) {
  index_select_fill("index_select", "loom::index_select", out, self, dim, index);
}

void embedding_loop(const Tensor& out, const Tensor& weight, const Tensor& indices, int64_t) {
  index_select_fill("embedding", "loom::embedding", out.view({indices.numel(), weight.size(1)}),
                    weight, 0, reshape(indices, {-1}));
}

void embedding_dense_backward_loop(const Tensor& out, const Tensor& grad_output,
                                   const Tensor& indices, int64_t num_weights,
                                   int64_t padding_idx) {
  constexpr const char* op = "embedding_dense_backward";
  constexpr const char* name = "loom::embedding_dense_backward";
  const Tensor idx = checked_range(op, name, indices, 0, num_weights);
  const int64_t n = idx.numel();
  LOOM_CHECK(n < (int64_t{1} << 31), "[", op, "] at most 2^31 - 1 indices on CUDA, got ", n);
  const Tensor g = grad_output.contiguous();
  const size_t bytes = cuda_ops::embedding_backward_workspace_bytes(n, num_weights);
  Tensor workspace;
  if (bytes > 0) workspace = empty_tensor({static_cast<int64_t>(bytes)}, kUInt8, out.device());
  cuda_ops::check_launch(
      cuda_ops::launch_embedding_backward(
          cuda_ops::code_of(g.dtype()), g.data_ptr(), int64_ptr(idx), n, grad_output.size(-1),
          num_weights, padding_idx, out.data_ptr(),
          workspace.defined() ? workspace.data_ptr() : nullptr, bytes, cuda_ops::stream_of(out)),
      name);
}

DimVector nonempty_strides(const Tensor& t) {
  return t.dim() == 0 ? DimVector{1} : DimVector(t.strides());
}

void copy_dims(IntArrayRef from, int64_t* to) {
  for (size_t i = 0; i < from.size(); ++i) to[i] = from[i];
}

cuda_ops::IndexGeometry index_geometry(const char* op, IntArrayRef index_sizes, int64_t d) {
  LOOM_CHECK(index_sizes.size() <= static_cast<size_t>(cuda_ops::kMaxIndexDims), "[", op,
             "] at most ", cuda_ops::kMaxIndexDims, " dims on CUDA, got index shape ", index_sizes);
  cuda_ops::IndexGeometry g;
  g.ndim = static_cast<int>(index_sizes.size());
  g.dim = static_cast<int>(d);
  copy_dims(index_sizes, g.sizes);
  copy_dims(contiguous_strides(index_sizes), g.idx_strides);
  return g;
}

void gather_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), "gather");
  const Tensor idx = checked_range("gather", "loom::gather", index, d, ss[static_cast<size_t>(d)]);
  cuda_ops::IndexGeometry g = index_geometry("gather", is, d);
  copy_dims(nonempty_strides(self), g.self_strides);
  cuda_ops::check_launch(
      cuda_ops::launch_gather(g, self.data_ptr(), out.data_ptr(), int64_ptr(idx),
                              static_cast<int>(self.element_size()), cuda_ops::stream_of(out)),
      "loom::gather");
}

// The bit pattern of `value` in `dtype`, through a one-element CPU tensor (the CPU's conversion).
uint64_t value_bits(const Scalar& value, DType dtype) {
  Tensor one = empty_tensor({}, dtype, kCPU);
  one.fill_(value);
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  return bits;
}

// Scatters into self in place (its geometry checked by the shape function).
void scatter_fill(const char* op, const char* name, ScatterMode mode, const Tensor& self,
                  int64_t dim, const Tensor& index, const Tensor& src, const Scalar& value) {
  const DimVector ss = nonempty_sizes(self), is = nonempty_sizes(index);
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(ss.size()), op);
  if (index.numel() == 0) return;
  const Tensor idx = checked_range(op, name, index, d, ss[static_cast<size_t>(d)]);
  cuda_ops::IndexGeometry g = index_geometry(op, is, d);
  copy_dims(nonempty_strides(self), g.self_strides);
  if (mode != ScatterMode::Value) {
    copy_dims(nonempty_strides(src), g.src_strides);
  } else {
    copy_dims(IntArrayRef(g.idx_strides, static_cast<size_t>(g.ndim)), g.src_strides);
  }
  const uint64_t bits = mode == ScatterMode::Value ? value_bits(value, self.dtype()) : 0;
  cuda_ops::check_launch(
      cuda_ops::launch_scatter(g, mode, cuda_ops::code_of(self.dtype()), self.data_ptr(),
                               mode != ScatterMode::Value ? src.data_ptr() : nullptr,
                               int64_ptr(idx), bits, cuda_ops::stream_of(self)),
      name);
  self.storage()->bump_version();
}

void scatter_src_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  out.copy_(self);
  scatter_fill("scatter", "loom::scatter", ScatterMode::Src, out, dim, index, src, 0);
}
void scatter_value_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                        const Scalar& value) {
  out.copy_(self);
  scatter_fill("scatter", "loom::scatter", ScatterMode::Value, out, dim, index, Tensor(), value);
}
void scatter_add_loop(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  out.copy_(self);
  scatter_fill("scatter_add", "loom::scatter_add", ScatterMode::Add, out, dim, index, src, 0);
}

template <ScatterMode kMode>
Tensor scatter_inplace_cuda(const Tensor& self, int64_t dim, const Tensor& index,
                            const Tensor& src) {
  cuda_ops::KernelGuard guard(self);
  if constexpr (kMode == ScatterMode::Add) {
    scatter_add_inplace_shape(self, dim, index, src);
    scatter_fill("scatter_add_", "loom::scatter_add_", kMode, self, dim, index, src, 0);
  } else {
    scatter_inplace_shape(self, dim, index, src);
    scatter_fill("scatter_", "loom::scatter_", kMode, self, dim, index, src, 0);
  }
  return self;
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&index_select_shape, &index_select_loop>::register_cuda(m, "index_select");
  CudaStructured<&gather_shape, &gather_loop>::register_cuda(m, "gather");
  CudaStructured<&scatter_src_shape, &scatter_src_loop>::register_cuda(m, "scatter.src");
  CudaStructured<&scatter_value_shape, &scatter_value_loop>::register_cuda(m, "scatter.value");
  CudaStructured<&scatter_add_shape, &scatter_add_loop>::register_cuda(m, "scatter_add");
  CudaStructured<&embedding_shape, &embedding_loop>::register_cuda(m, "embedding");
  CudaStructured<&embedding_dense_backward_shape, &embedding_dense_backward_loop>::register_cuda(
      m, "embedding_dense_backward");
  m.impl("scatter_.src", scatter_inplace_cuda<ScatterMode::Src>);
  m.impl("scatter_add_", scatter_inplace_cuda<ScatterMode::Add>);
}

}  // namespace loom
