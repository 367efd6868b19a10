// TEMPORARY: stubs for operators of the linalg family not written yet. Delete an entry (or the
// whole file) when the real implementation lands.
#include "loom/ops.h"
#include "loom/error.h"

namespace loom {

Tensor mm(const Tensor& self, const Tensor& mat2) { LOOM_THROW(NotImplementedError, "[mm] not implemented yet"); }
Tensor bmm(const Tensor& self, const Tensor& mat2) { LOOM_THROW(NotImplementedError, "[bmm] not implemented yet"); }
Tensor matmul(const Tensor& self, const Tensor& other) { LOOM_THROW(NotImplementedError, "[matmul] not implemented yet"); }
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) { LOOM_THROW(NotImplementedError, "[addmm] not implemented yet"); }
Tensor linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) { LOOM_THROW(NotImplementedError, "[linear] not implemented yet"); }
Tensor dot(const Tensor& self, const Tensor& other) { LOOM_THROW(NotImplementedError, "[dot] not implemented yet"); }
Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) { LOOM_THROW(NotImplementedError, "[conv2d] not implemented yet"); }
Tensor max_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) { LOOM_THROW(NotImplementedError, "[max_pool2d] not implemented yet"); }
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) { LOOM_THROW(NotImplementedError, "[max_pool2d_with_indices] not implemented yet"); }
Tensor avg_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, bool ceil_mode, bool count_include_pad) { LOOM_THROW(NotImplementedError, "[avg_pool2d] not implemented yet"); }

}  // namespace loom
