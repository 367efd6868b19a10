// TEMPORARY: stubs for operators of the unary family not written yet. Delete an entry (or the
// whole file) when the real implementation lands.
#include "loom/ops.h"
#include "loom/error.h"

namespace loom {

Tensor gelu(const Tensor& self, std::string_view approximate) { LOOM_THROW(NotImplementedError, "[gelu] not implemented yet"); }
const Tensor& gelu_(const Tensor& self, std::string_view approximate) { LOOM_THROW(NotImplementedError, "[gelu_] not implemented yet"); }
Tensor pow(const Tensor& self, const Scalar& exponent) { LOOM_THROW(NotImplementedError, "[pow] not implemented yet"); }
Tensor pow(const Tensor& self, const Tensor& exponent) { LOOM_THROW(NotImplementedError, "[pow] not implemented yet"); }
Tensor pow(const Scalar& self, const Tensor& exponent) { LOOM_THROW(NotImplementedError, "[pow] not implemented yet"); }
const Tensor& pow_(const Tensor& self, const Scalar& exponent) { LOOM_THROW(NotImplementedError, "[pow_] not implemented yet"); }
Tensor clamp(const Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) { LOOM_THROW(NotImplementedError, "[clamp] not implemented yet"); }
const Tensor& clamp_(const Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) { LOOM_THROW(NotImplementedError, "[clamp_] not implemented yet"); }
Tensor neg(const Tensor& self) { LOOM_THROW(NotImplementedError, "[neg] not implemented yet"); }
const Tensor& neg_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[neg_out] not implemented yet"); }
Tensor abs(const Tensor& self) { LOOM_THROW(NotImplementedError, "[abs] not implemented yet"); }
const Tensor& abs_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[abs_out] not implemented yet"); }
Tensor exp(const Tensor& self) { LOOM_THROW(NotImplementedError, "[exp] not implemented yet"); }
const Tensor& exp_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[exp_out] not implemented yet"); }
Tensor log(const Tensor& self) { LOOM_THROW(NotImplementedError, "[log] not implemented yet"); }
const Tensor& log_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[log_out] not implemented yet"); }
Tensor log1p(const Tensor& self) { LOOM_THROW(NotImplementedError, "[log1p] not implemented yet"); }
const Tensor& log1p_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[log1p_out] not implemented yet"); }
Tensor sqrt(const Tensor& self) { LOOM_THROW(NotImplementedError, "[sqrt] not implemented yet"); }
const Tensor& sqrt_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[sqrt_out] not implemented yet"); }
Tensor rsqrt(const Tensor& self) { LOOM_THROW(NotImplementedError, "[rsqrt] not implemented yet"); }
const Tensor& rsqrt_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[rsqrt_out] not implemented yet"); }
Tensor sin(const Tensor& self) { LOOM_THROW(NotImplementedError, "[sin] not implemented yet"); }
const Tensor& sin_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[sin_out] not implemented yet"); }
Tensor cos(const Tensor& self) { LOOM_THROW(NotImplementedError, "[cos] not implemented yet"); }
const Tensor& cos_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[cos_out] not implemented yet"); }
Tensor tanh(const Tensor& self) { LOOM_THROW(NotImplementedError, "[tanh] not implemented yet"); }
const Tensor& tanh_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[tanh_out] not implemented yet"); }
Tensor sigmoid(const Tensor& self) { LOOM_THROW(NotImplementedError, "[sigmoid] not implemented yet"); }
const Tensor& sigmoid_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[sigmoid_out] not implemented yet"); }
Tensor relu(const Tensor& self) { LOOM_THROW(NotImplementedError, "[relu] not implemented yet"); }
const Tensor& relu_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[relu_out] not implemented yet"); }
Tensor silu(const Tensor& self) { LOOM_THROW(NotImplementedError, "[silu] not implemented yet"); }
const Tensor& silu_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[silu_out] not implemented yet"); }
Tensor erf(const Tensor& self) { LOOM_THROW(NotImplementedError, "[erf] not implemented yet"); }
const Tensor& erf_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[erf_out] not implemented yet"); }
Tensor sign(const Tensor& self) { LOOM_THROW(NotImplementedError, "[sign] not implemented yet"); }
const Tensor& sign_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[sign_out] not implemented yet"); }
Tensor reciprocal(const Tensor& self) { LOOM_THROW(NotImplementedError, "[reciprocal] not implemented yet"); }
const Tensor& reciprocal_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[reciprocal_out] not implemented yet"); }
Tensor logical_not(const Tensor& self) { LOOM_THROW(NotImplementedError, "[logical_not] not implemented yet"); }
const Tensor& logical_not_out(const Tensor& out, const Tensor& self) { LOOM_THROW(NotImplementedError, "[logical_not_out] not implemented yet"); }

}  // namespace loom
