// CUDA kernel of cat. Contiguous inputs of the result's dtype are copied slab by slab, one strided
// cudaMemcpy2DAsync per input (its rows into their columns of the result's rows); anything else
// goes through copy_ into narrowed views of the result, as on the CPU.
#include "loom/cuda.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

// A 1-D tensor of size 0, which cat skips whatever the other shapes are (as cat_shape does).
bool is_legacy_empty(const Tensor& t) {
  return t.dim() == 1 && t.size(0) == 0;
}

void cat_loop(const Tensor& out, TensorList tensors, int64_t dim) {
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(dim, out.dim(), "cat");
  const auto es = static_cast<int64_t>(out.element_size());
  int64_t outer = 1;
  for (int64_t k = 0; k < d; ++k) outer *= out.size(k);
  const int64_t out_row = out.numel() / outer * es;
  bool simple = out_row < (int64_t{1} << 31);
  for (const Tensor& t : tensors) {
    if (!is_legacy_empty(t) && (t.dtype() != out.dtype() || !t.is_contiguous())) simple = false;
  }
  if (!simple) {
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      if (is_legacy_empty(t)) continue;
      const int64_t n = t.size(d);
      if (n > 0 && t.numel() > 0) copy_(narrow(out, d, offset, n), t);
      offset += n;
    }
    return;
  }
  cudaStream_t stream = cuda_ops::stream_of(out);
  char* dst = static_cast<char*>(out.data_ptr());
  int64_t col = 0;
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t) || t.numel() == 0) continue;
    const int64_t row = t.numel() / outer * es;
    LOOM_CUDA_CHECK(cudaMemcpy2DAsync(dst + col, static_cast<size_t>(out_row), t.data_ptr(),
                                      static_cast<size_t>(row), static_cast<size_t>(row),
                                      static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, stream),
                    "loom::cat");
    col += row;
  }
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  cuda_ops::CudaStructured<&cat_shape, &cat_loop>::register_cuda(m, "cat");
}

}  // namespace loom
