// Gradcheck cases of the fused training kernels (src/ops/fused_loss.cpp, fused_gelu.cpp,
// attention.cpp): their derivatives by finite differences, and the second derivative (the
// create_graph composition). Attention goes through scaled_dot_product_attention, which runs
// _flash_attention on the CPU (and the composed path for float64 on CUDA).
#include <tuple>

#include "autograd/gradcheck_cases.h"

namespace loom::testing {
namespace {

using V = std::vector<Tensor>;

Tensor targets(std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n});
}

RegisterGradCases fused_cases({
    {"_fused_cross_entropy", "mean",
     [](const V& x) {
       return V{std::get<0>(_fused_cross_entropy(x[0], targets({1, 0, 3})))};
     },
     [] {
       return V{rnd({3, 5}, 801, -2.0, 2.0)};
     },
     true},
    {"_fused_cross_entropy", "ignore_index and label smoothing",
     [](const V& x) {
       return V{std::get<0>(_fused_cross_entropy(x[0], targets({1, 2, 3, 2}), 2, 0.15))};
     },
     [] {
       return V{rnd({4, 6}, 802, -2.0, 2.0)};
     },
     true},
    {"_bias_gelu", "tanh", [](const V& x) { return V{_bias_gelu(x[0], x[1], "tanh")}; },
     [] {
       return V{rnd({2, 3, 4}, 803, -2.0, 2.0), rnd({4}, 804)};
     },
     true},
    {"_bias_gelu", "none (erf)", [](const V& x) { return V{_bias_gelu(x[0], x[1], "none")}; },
     [] {
       return V{rnd({3, 5}, 805, -2.0, 2.0), rnd({5}, 806)};
     },
     true},
    {"_flash_attention", "causal, query and key lengths differ",
     [](const V& x) { return V{scaled_dot_product_attention(x[0], x[1], x[2], 0.0, true)}; },
     [] {
       return V{rnd({1, 2, 5, 3}, 807), rnd({1, 2, 7, 3}, 808), rnd({1, 2, 7, 3}, 809)};
     },
     true},
    {"_flash_attention", "full, scale 0.7",
     [](const V& x) { return V{scaled_dot_product_attention(x[0], x[1], x[2], 0.0, false, 0.7)}; },
     [] {
       return V{rnd({2, 1, 4, 2}, 810), rnd({2, 1, 3, 2}, 811), rnd({2, 1, 3, 2}, 812)};
     },
     true},
});

}  // namespace
}  // namespace loom::testing
