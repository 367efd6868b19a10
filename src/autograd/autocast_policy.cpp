// Autocast's operator lists and the policy lookups of loom/autocast.h.
#include "autograd/autocast_policy.h"

#include <string_view>

namespace loom::autocast {

namespace {

// PyTorch's CUDA autocast lists, restricted to the operators loom has. An operator added to loom
// that PyTorch lists (cumsum, mse_loss, group_norm, baddbmm, ...) belongs here too, with each of
// its functional overloads (tests/autograd/autocast_test.cpp checks that no overload of a listed
// operator is missing). Composites are listed with what they decompose into: the top one casts and
// the rest run with autocast off (Note [Autocast] in autocast.cpp), and a direct call of the inner
// operator is cast as well.
constexpr PolicyEntry kTable[] = {
    // Matrix products and convolutions: tensor-core work, safe in 16 bits with float32
    // accumulation.
    {"mm", CastPolicy::LowerPrecision},
    {"bmm", CastPolicy::LowerPrecision},
    {"addmm", CastPolicy::LowerPrecision},
    {"matmul", CastPolicy::LowerPrecision},
    {"linear", CastPolicy::LowerPrecision},
    {"_linear", CastPolicy::LowerPrecision},
    {"conv2d", CastPolicy::LowerPrecision},
    {"scaled_dot_product_attention", CastPolicy::LowerPrecision},
    // Range-sensitive math, reductions, normalisations and losses: float32.
    {"exp", CastPolicy::Float32},
    {"log", CastPolicy::Float32},
    {"log1p", CastPolicy::Float32},
    {"rsqrt", CastPolicy::Float32},
    {"reciprocal", CastPolicy::Float32},
    {"pow.Tensor_Scalar", CastPolicy::Float32},
    {"pow.Tensor_Tensor", CastPolicy::Float32},
    {"softmax", CastPolicy::Float32},
    {"log_softmax", CastPolicy::Float32},
    {"logsumexp", CastPolicy::Float32},
    {"sum", CastPolicy::Float32},
    {"prod", CastPolicy::Float32},
    {"norm", CastPolicy::Float32},
    {"layer_norm", CastPolicy::Float32},
    {"native_layer_norm", CastPolicy::Float32},
    {"nll_loss", CastPolicy::Float32},
    {"cross_entropy", CastPolicy::Float32},
    // Operators of several floating inputs that must agree: the widest.
    {"cat", CastPolicy::Promote},
    {"stack", CastPolicy::Promote},
    {"where", CastPolicy::Promote},
    {"dot", CastPolicy::Promote},
    {"scatter_add", CastPolicy::Promote},
};

// "loom::pow.Tensor_Scalar" -> "pow.Tensor_Scalar"; names of other namespaces are not listed.
std::string_view strip_namespace(std::string_view name, bool* other_namespace) {
  const size_t sep = name.find("::");
  *other_namespace = sep != std::string_view::npos && name.substr(0, sep) != "loom";
  return sep == std::string_view::npos ? name : name.substr(sep + 2);
}

}  // namespace

ArrayRef<PolicyEntry> policy_table() {
  return ArrayRef<PolicyEntry>(kTable, sizeof(kTable) / sizeof(kTable[0]));
}

}  // namespace loom::autocast

namespace loom {

CastPolicy autocast_policy(const std::string& op_name) {
  bool other_namespace = false;
  const std::string_view name = autocast::strip_namespace(op_name, &other_namespace);
  if (other_namespace) return CastPolicy::None;
  const bool has_overload = name.find('.') != std::string_view::npos;
  for (const autocast::PolicyEntry& e : autocast::policy_table()) {
    const std::string_view listed = e.name;
    if (listed == name) return e.policy;
    // A name without its overload stands for its listed overloads ("pow" for
    // "pow.Tensor_Scalar").
    if (!has_overload && listed.size() > name.size() && listed.substr(0, name.size()) == name &&
        listed[name.size()] == '.') {
      return e.policy;
    }
  }
  return CastPolicy::None;
}

const char* cast_policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::None:
      return "none";
    case CastPolicy::LowerPrecision:
      return "lower precision";
    case CastPolicy::Float32:
      return "float32";
    case CastPolicy::Promote:
      return "promote";
  }
  return "?";
}

const char* cast_policy_explanation(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::None:
      return "not listed, runs in its inputs' dtype";
    case CastPolicy::LowerPrecision:
      return "floating arguments cast to the autocast dtype (bf16 by default)";
    case CastPolicy::Float32:
      return "floating arguments cast to float32 (a dtype= argument set to float32 instead), for "
             "range and accuracy";
    case CastPolicy::Promote:
      return "floating arguments cast to the widest floating dtype among them";
  }
  return "?";
}

}  // namespace loom
