// LayerNorm and Embedding.
#include <sstream>

#include "loom/autograd.h"
#include "nn/check.h"

namespace loom::nn {

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine,
                     bool bias)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  LOOM_CHECK(!shape_.empty(), "[LayerNorm] normalized_shape must have at least one dimension");
  for (int64_t s : shape_) {
    LOOM_CHECK(s > 0, "[LayerNorm] normalized_shape must be positive but got ",
               IntArrayRef(shape_));
  }
  LOOM_CHECK(eps >= 0, "[LayerNorm] eps must be non-negative but got ", eps);
  if (elementwise_affine) {
    weight_ = add_parameter("weight", ones(shape_, default_dtype()));
    if (bias) bias_ = add_parameter("bias", zeros(shape_, default_dtype()));
  }
}

const Tensor& LayerNorm::weight() const {
  static const Tensor kNone;
  return weight_ ? parameter_at(*weight_) : kNone;
}
const Tensor& LayerNorm::bias() const {
  static const Tensor kNone;
  return bias_ ? parameter_at(*bias_) : kNone;
}

std::string LayerNorm::name() const {
  std::ostringstream os;
  os << "LayerNorm(" << IntArrayRef(shape_) << ", eps=" << eps_;
  if (!weight_) os << ", elementwise_affine=false";
  return os.str() + ")";
}

Tensor LayerNorm::forward(const Tensor& input) {
  detail::check_defined_input(*this, input);
  const auto k = static_cast<int64_t>(shape_.size());
  bool ok = input.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i)
    ok = input.size(input.dim() - k + i) == shape_[static_cast<size_t>(i)];
  LOOM_CHECK(ok, "[", name(), "] expected the last ", k, " dimension(s) of the input to be ",
             IntArrayRef(shape_), " but got input shape ", input.shape_str());
  if (weight_) detail::check_input_dtype(*this, input, parameter_at(*weight_));
  LOOM_CHECK_TYPE(input.is_floating_point(), "[", name(),
                  "] expected a floating-point input but got ", dtype_name(input.dtype()));
  auto opt = [&](const std::optional<size_t>& slot) {
    return slot ? std::optional<Tensor>(parameter_at(*slot)) : std::nullopt;
  };
  return layer_norm(input, shape_, opt(weight_), opt(bias_), eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_idx, Generator* gen)
    : num_(num_embeddings), dim_(embedding_dim) {
  LOOM_CHECK(num_embeddings >= 0 && embedding_dim >= 0,
             "[Embedding] num_embeddings and "
             "embedding_dim must be non-negative but got ",
             num_embeddings, " and ", embedding_dim);
  if (padding_idx) {
    LOOM_CHECK(*padding_idx >= -num_ && *padding_idx < num_,
               "[Embedding] padding_idx must be within "
               "[-",
               num_, ", ", num_, ") but got ", *padding_idx);
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_ : *padding_idx;
  }
  weight_ = add_parameter("weight", empty({num_, dim_}, default_dtype()));
  init::normal_(weight(), 0.0, 1.0, gen);
  if (padding_idx_) {
    autograd::NoGradGuard no_grad;
    weight().select(0, *padding_idx_).zero_();
  }
}

std::string Embedding::name() const {
  std::string s = loom::detail::str_cat("Embedding(", num_, ", ", dim_);
  if (padding_idx_) s += loom::detail::str_cat(", padding_idx=", *padding_idx_);
  return s + ")";
}

Tensor Embedding::forward(const Tensor& indices) {
  detail::check_defined_input(*this, indices);
  LOOM_CHECK_TYPE(indices.dtype() == kInt64 || indices.dtype() == kInt32, "[", name(),
                  "] expected integer indices (int64 or int32) but got ",
                  dtype_name(indices.dtype()), " (input shape ", indices.shape_str(), ")");
  try {
    return embedding(weight(), indices, padding_idx_.value_or(-1));
  } catch (const IndexError& e) {
    LOOM_THROW(IndexError, "[", name(), "] index out of range (valid indices are 0 to ", num_ - 1,
               "): ", e.what());
  }
}

}  // namespace loom::nn
