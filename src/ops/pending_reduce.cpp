// TEMPORARY: stubs for operators of the reduce family not written yet. Delete an entry (or the
// whole file) when the real implementation lands.
#include "loom/ops.h"
#include "loom/error.h"

namespace loom {

Tensor sum(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim, std::optional<DType> dtype) { LOOM_THROW(NotImplementedError, "[sum] not implemented yet"); }
Tensor mean(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim, std::optional<DType> dtype) { LOOM_THROW(NotImplementedError, "[mean] not implemented yet"); }
Tensor prod(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim, std::optional<DType> dtype) { LOOM_THROW(NotImplementedError, "[prod] not implemented yet"); }
Tensor amax(const Tensor& self, IntArrayRef dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[amax] not implemented yet"); }
Tensor amin(const Tensor& self, IntArrayRef dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[amin] not implemented yet"); }
Tensor max(const Tensor& self) { LOOM_THROW(NotImplementedError, "[max] not implemented yet"); }
Tensor min(const Tensor& self) { LOOM_THROW(NotImplementedError, "[min] not implemented yet"); }
std::tuple<Tensor, Tensor> max(const Tensor& self, int64_t dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[max] not implemented yet"); }
std::tuple<Tensor, Tensor> min(const Tensor& self, int64_t dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[min] not implemented yet"); }
Tensor argmax(const Tensor& self, std::optional<int64_t> dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[argmax] not implemented yet"); }
Tensor argmin(const Tensor& self, std::optional<int64_t> dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[argmin] not implemented yet"); }
Tensor var(const Tensor& self, std::optional<IntArrayRef> dim, int64_t correction, bool keepdim) { LOOM_THROW(NotImplementedError, "[var] not implemented yet"); }
Tensor std(const Tensor& self, std::optional<IntArrayRef> dim, int64_t correction, bool keepdim) { LOOM_THROW(NotImplementedError, "[std] not implemented yet"); }
Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[logsumexp] not implemented yet"); }
Tensor norm(const Tensor& self, const Scalar& p, std::optional<IntArrayRef> dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[norm] not implemented yet"); }
Tensor all(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[all] not implemented yet"); }
Tensor any(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim) { LOOM_THROW(NotImplementedError, "[any] not implemented yet"); }
Tensor softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) { LOOM_THROW(NotImplementedError, "[softmax] not implemented yet"); }
Tensor log_softmax(const Tensor& self, int64_t dim, std::optional<DType> dtype) { LOOM_THROW(NotImplementedError, "[log_softmax] not implemented yet"); }

}  // namespace loom
