// make_iter_args: a TensorIterator's loop for the CUDA loops (loops.cuh).
#include "ops/cuda/cuda_ops.h"

#include <cstring>

#include "loom/error.h"

namespace loom::cuda_ops {

IterArgs make_iter_args(const TensorIterator& it) {
  IterArgs a;
  const char* op = "op";
  LOOM_CHECK(it.ntensors() <= kMaxIterOperands, "[cuda] a pointwise kernel takes at most ",
             kMaxIterOperands, " operands, got ", it.ntensors());
  const IntArrayRef shape = it.loop_shape();
  LOOM_CHECK(static_cast<int>(shape.size()) <= kMaxIterDims, "[cuda] a pointwise kernel over ",
             shape.size(), " non-contiguous dimensions (at most ", kMaxIterDims,
             "); make the operands contiguous first");
  (void)op;
  a.ndim = static_cast<int>(shape.size());
  a.ntensors = it.ntensors();
  a.noutputs = it.noutputs();
  a.numel = it.numel();
  for (int d = 0; d < a.ndim; ++d) a.sizes[d] = shape[static_cast<size_t>(d)];
  for (int t = 0; t < a.ntensors; ++t) {
    const Tensor& x = it.operand(t);
    a.dtype[t] = code_of(x.dtype());
    const IntArrayRef st = it.loop_strides(t);
    for (int d = 0; d < a.ndim; ++d) a.strides[t][d] = st[static_cast<size_t>(d)];
    if (x.is_cpu()) {
      // A host scalar next to device operands (common_device lets CPU 0-dim tensors mix in).
      LOOM_INTERNAL_ASSERT(t >= it.noutputs() && x.numel() == 1, "[cuda] a CPU operand ", t,
                           " of shape ", x.sizes(), " in a device loop");
      a.cpu_scalar_mask |= 1u << t;
      std::memcpy(a.scalar[t], x.data_ptr(), x.element_size());
      for (int d = 0; d < a.ndim; ++d) a.strides[t][d] = 0;
    } else {
      a.data[t] = static_cast<char*>(x.data_ptr());
    }
  }
  if (a.numel == 1 && a.ndim == 1) {
    // One element: contiguous whatever the strides say.
    for (int t = 0; t < a.ntensors; ++t) a.strides[t][0] = scalar_size(a.dtype[t]);
  }
  return a;
}

}  // namespace loom::cuda_ops
