// TEMPORARY: stubs for operators of the index_nn family not written yet. Delete an entry (or the
// whole file) when the real implementation lands.
#include "loom/ops.h"
#include "loom/error.h"

namespace loom {

Tensor cat(TensorList tensors, int64_t dim) { LOOM_THROW(NotImplementedError, "[cat] not implemented yet"); }
Tensor stack(TensorList tensors, int64_t dim) { LOOM_THROW(NotImplementedError, "[stack] not implemented yet"); }
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index) { LOOM_THROW(NotImplementedError, "[index_select] not implemented yet"); }
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) { LOOM_THROW(NotImplementedError, "[gather] not implemented yet"); }
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) { LOOM_THROW(NotImplementedError, "[scatter] not implemented yet"); }
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value) { LOOM_THROW(NotImplementedError, "[scatter] not implemented yet"); }
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) { LOOM_THROW(NotImplementedError, "[scatter_add] not implemented yet"); }
const Tensor& scatter_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) { LOOM_THROW(NotImplementedError, "[scatter_] not implemented yet"); }
const Tensor& scatter_add_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) { LOOM_THROW(NotImplementedError, "[scatter_add_] not implemented yet"); }
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) { LOOM_THROW(NotImplementedError, "[embedding] not implemented yet"); }
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Scalar& value) { LOOM_THROW(NotImplementedError, "[masked_fill] not implemented yet"); }
const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, const Scalar& value) { LOOM_THROW(NotImplementedError, "[masked_fill_] not implemented yet"); }
Tensor one_hot(const Tensor& self, int64_t num_classes) { LOOM_THROW(NotImplementedError, "[one_hot] not implemented yet"); }
Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps) { LOOM_THROW(NotImplementedError, "[layer_norm] not implemented yet"); }
std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input, IntArrayRef normalized_shape, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps) { LOOM_THROW(NotImplementedError, "[native_layer_norm] not implemented yet"); }
Tensor dropout(const Tensor& input, double p, bool train, const std::optional<Generator>& gen) { LOOM_THROW(NotImplementedError, "[dropout] not implemented yet"); }
std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p, bool train, const std::optional<Generator>& gen) { LOOM_THROW(NotImplementedError, "[native_dropout] not implemented yet"); }
Tensor nll_loss(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight, Reduction reduction, int64_t ignore_index) { LOOM_THROW(NotImplementedError, "[nll_loss] not implemented yet"); }
Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::optional<Tensor>& weight, Reduction reduction, int64_t ignore_index, double label_smoothing) { LOOM_THROW(NotImplementedError, "[cross_entropy] not implemented yet"); }
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) { LOOM_THROW(NotImplementedError, "[allclose] not implemented yet"); }
bool equal(const Tensor& a, const Tensor& b) { LOOM_THROW(NotImplementedError, "[equal] not implemented yet"); }

}  // namespace loom
