// gradcheck cases for views, joining, indexing, copies and the remaining reductions.
#include <limits>

#include "autograd/gradcheck_cases.h"

namespace loom::testing {
namespace {

using V = std::vector<Tensor>;
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor ints(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return from_vector(v, shape);
}
Tensor leaf_of(std::vector<double> v, std::vector<int64_t> shape) {
  return from_vector(v, shape).requires_grad_();
}
// A non-leaf copy of x, so that in-place operators may write into it.
Tensor writable(const Tensor& x) {
  return mul(x, 1.0);
}

const RegisterGradCases kViewCases({
    {"view", "",
     [](const V& x) {
       return V{x[0].view({3, -1})};
     },
     [] {
       return V{rnd({2, 3}, 101)};
     },
     true},
    {"reshape", "non-contiguous (copies)", [](const V& x) { return V{x[0].reshape({6})}; },
     [] {
       return V{noncontig({3, 2}, 102)};
     }},
    {"permute", "",
     [](const V& x) {
       return V{x[0].permute({2, 0, 1})};
     },
     [] {
       return V{rnd({2, 3, 4}, 103)};
     },
     true},
    {"permute", "negative dims, non-contiguous",
     [](const V& x) {
       return V{x[0].permute({-1, 0})};
     },
     [] {
       return V{noncontig({3, 4}, 104)};
     }},
    {"transpose", "non-contiguous", [](const V& x) { return V{x[0].transpose(0, 1)}; },
     [] {
       return V{noncontig({3, 4}, 105)};
     },
     true},
    {"t", "", [](const V& x) { return V{x[0].t()}; },
     [] {
       return V{rnd({2, 3}, 106)};
     }},
    {"slice", "step 2", [](const V& x) { return V{x[0].slice(0, 1, 5, 2)}; },
     [] {
       return V{rnd({5, 3}, 107)};
     },
     true},
    {"slice", "negative start, open end, non-contiguous",
     [](const V& x) { return V{x[0].slice(1, -2, std::nullopt)}; },
     [] {
       return V{noncontig({3, 4}, 108)};
     },
     true},
    {"slice", "step 3 from the start",
     [](const V& x) { return V{x[0].slice(0, 0, std::nullopt, 3)}; },
     [] { return V{rnd({7}, 109)}; }, true},
    {"narrow", "", [](const V& x) { return V{x[0].narrow(1, 1, 2)}; },
     [] {
       return V{rnd({2, 4}, 110)};
     }},
    {"select", "negative index", [](const V& x) { return V{x[0].select(1, -1)}; },
     [] {
       return V{rnd({3, 4}, 111)};
     },
     true},
    {"select", "non-contiguous, middle", [](const V& x) { return V{x[0].select(0, 1)}; },
     [] {
       return V{noncontig({3, 4}, 112)};
     },
     true},
    {"expand", "broadcast",
     [](const V& x) {
       return V{x[0].expand({2, 3, 4})};
     },
     [] {
       return V{rnd({3, 1}, 113)};
     },
     true},
    {"expand", "broadcast_to, -1",
     [](const V& x) {
       return V{broadcast_to(x[0], {2, -1})};
     },
     [] { return V{rnd({3}, 114)}; }},
    {"squeeze", "all", [](const V& x) { return V{x[0].squeeze()}; },
     [] {
       return V{rnd({2, 1, 3, 1}, 115)};
     },
     true},
    {"squeeze", "one dim", [](const V& x) { return V{x[0].squeeze(1)}; },
     [] {
       return V{rnd({2, 1, 3}, 116)};
     }},
    {"unsqueeze", "", [](const V& x) { return V{x[0].unsqueeze(-1)}; },
     [] {
       return V{rnd({2, 3}, 117)};
     },
     true},
    {"flatten", "non-contiguous", [](const V& x) { return V{x[0].flatten()}; },
     [] {
       return V{noncontig({3, 4}, 118)};
     }},
    {"as_strided", "offset, transposed window",
     [](const V& x) {
       return V{as_strided(x[0], {2, 2}, {1, 4}, 1)};
     },
     [] {
       return V{rnd({3, 4}, 119)};
     },
     true},
    {"as_strided", "overlapping windows (gradients add up)",
     [](const V& x) {
       return V{as_strided(x[0], {3, 3}, {1, 1}, 0)};
     },
     [] { return V{rnd({5}, 120)}; }, true},
    {"as_strided", "non-contiguous input (storage positions)",
     [](const V& x) { return V{as_strided(x[0], {4}, {3}, 0)}; },
     [] {
       return V{noncontig({3, 4}, 121)};
     }},
    {"as_strided", "of an expanded input",
     [](const V& x) {
       return V{as_strided(x[0].expand({3, 4}), {2, 2}, {1, 1}, 0)};
     },
     [] { return V{rnd({4}, 122)}; }},
    {"split", "uneven", [](const V& x) { return split(x[0], 2, 1); },
     [] {
       return V{rnd({2, 3}, 123)};
     }},
    {"split_with_sizes", "",
     [](const V& x) {
       return split_with_sizes(x[0], {1, 3}, 0);
     },
     [] {
       return V{rnd({4, 2}, 124)};
     },
     true},
    {"split_with_sizes", "one piece used, non-contiguous",
     [](const V& x) {
       return V{mul(split_with_sizes(x[0], {2, 0, 1}, 1)[2], 2.0)};
     },
     [] {
       return V{noncontig({2, 3}, 127)};
     },
     true},
    {"chunk", "", [](const V& x) { return chunk(x[0], 2, -1); },
     [] {
       return V{rnd({2, 5}, 125)};
     }},
    {"unbind", "", [](const V& x) { return unbind(x[0], 1); },
     [] {
       return V{rnd({2, 3}, 126)};
     },
     true},
    {"unbind", "one piece used", [](const V& x) { return V{unbind(x[0], 0)[1]}; },
     [] {
       return V{rnd({3, 2}, 128)};
     },
     true},
});

const RegisterGradCases kJoinCases({
    {"cat", "dim 0",
     [](const V& x) {
       return V{cat(V{x[0], x[1]}, 0)};
     },
     [] {
       return V{rnd({2, 3}, 201), rnd({4, 3}, 202)};
     },
     true},
    {"cat", "dim -1, non-contiguous, one input without grad",
     [](const V& x) {
       return V{cat(V{x[0], x[1], x[2]}, -1)};
     },
     [] {
       return V{noncontig({3, 2}, 203), rnd({3, 1}, 204, -1, 1, false), rnd({3, 3}, 205)};
     }},
    {"cat", "legacy empty input",
     [](const V& x) {
       return V{cat(V{x[0], x[1]}, 1)};
     },
     [] {
       return V{rnd({2, 2}, 206), rnd({0}, 207)};
     }},
    {"stack", "",
     [](const V& x) {
       return V{stack(V{x[0], x[1]}, 1)};
     },
     [] {
       return V{rnd({2, 3}, 208), rnd({2, 3}, 209)};
     },
     true},
});

const RegisterGradCases kIndexCases({
    {"index_select", "dim 0, repeated index",
     [](const V& x) {
       return V{index_select(x[0], 0, ints({2, 0, 2}, {3}))};
     },
     [] {
       return V{rnd({4, 3}, 301)};
     },
     true},
    {"index_select", "dim 1, int32 index, non-contiguous",
     [](const V& x) {
       return V{index_select(x[0], 1, ints({3, 1}, {2}).to(kInt32))};
     },
     [] {
       return V{noncontig({3, 4}, 302)};
     }},
    {"gather", "",
     [](const V& x) {
       return V{gather(x[0], 1, ints({0, 1, 3, 3, 2, 0}, {3, 2}))};
     },
     [] {
       return V{rnd({3, 4}, 303)};
     },
     true},
    {"scatter.src", "src larger than index",
     [](const V& x) {
       return V{scatter(x[0], 1, ints({0, 2, 1, 3, 3, 0}, {3, 2}), x[1])};
     },
     [] {
       return V{rnd({3, 4}, 304), rnd({3, 3}, 305)};
     },
     true},
    {"scatter.value", "",
     [](const V& x) {
       return V{scatter(x[0], 0, ints({1, 0, 2}, {1, 3}), Scalar(2.5))};
     },
     [] {
       return V{rnd({3, 3}, 306)};
     }},
    {"scatter_add", "repeated index",
     [](const V& x) {
       return V{scatter_add(x[0], 1, ints({0, 0, 1, 3, 2, 2}, {3, 2}), x[1])};
     },
     [] {
       return V{rnd({3, 4}, 307), rnd({3, 2}, 308)};
     },
     true},
    {"scatter_.src", "in place",
     [](const V& x) {
       Tensor y = writable(x[0]);
       scatter_(y, 0, ints({2, 0, 1}, {1, 3}), x[1]);
       return V{y};
     },
     [] {
       return V{rnd({3, 3}, 309), rnd({2, 3}, 310)};
     },
     true},
    {"scatter_add_", "in place",
     [](const V& x) {
       Tensor y = writable(x[0]);
       scatter_add_(y, 0, ints({2, 2, 1}, {1, 3}), x[1]);
       return V{y};
     },
     [] {
       return V{rnd({3, 3}, 311), rnd({1, 3}, 312)};
     }},
    {"embedding", "repeated rows",
     [](const V& x) {
       return V{embedding(x[0], ints({0, 2, 4, 2}, {2, 2}))};
     },
     [] {
       return V{rnd({5, 3}, 313)};
     },
     true},
    {"embedding_dense_backward", "padding_idx",
     [](const V& x) {
       return V{embedding_dense_backward(x[0], ints({0, 1, 4, 1}, {2, 2}), 5, 1)};
     },
     [] {
       return V{rnd({2, 2, 3}, 314)};
     },
     true},
    {"masked_fill.Scalar", "mask broadcasts",
     [](const V& x) {
       return V{masked_fill(x[0], from_vector<bool>({true, false, true}, {3}), 0.5)};
     },
     [] {
       return V{rnd({2, 3}, 315)};
     },
     true},
    {"masked_fill.Scalar", "self broadcasts",
     [](const V& x) {
       return V{masked_fill(x[0], from_vector<bool>({true, false, false, true}, {2, 2}), -1.0)};
     },
     [] { return V{rnd({2}, 316)}; }},
    {"masked_fill_.Scalar", "in place, non-contiguous",
     [](const V& x) {
       Tensor y = writable(x[0]);
       masked_fill_(y, from_vector<bool>({false, true}, {2}), 3.0);
       return V{y};
     },
     [] {
       return V{noncontig({3, 2}, 317)};
     }},
});

const RegisterGradCases kCopyCases({
    {"copy_", "broadcast src",
     [](const V& x) {
       Tensor y = writable(x[0]);
       y.copy_(x[1]);
       return V{add(y, x[0])};
     },
     [] {
       return V{rnd({2, 3}, 401), rnd({3}, 402)};
     },
     true},
    {"copy_", "into a slice (CopySlices)",
     [](const V& x) {
       Tensor y = writable(x[0]);
       y.slice(1, 0, 2).copy_(x[1]);
       return V{mul(y, y)};
     },
     [] {
       return V{rnd({2, 3}, 403), rnd({2, 2}, 404)};
     },
     true},
    {"fill_", "",
     [](const V& x) {
       Tensor y = writable(x[0]);
       y.fill_(2.0);
       return V{add(y, mul(x[0], x[0]))};
     },
     [] {
       return V{rnd({2, 3}, 405)};
     }},
    {"fill_", "through a view",
     [](const V& x) {
       Tensor y = writable(x[0]);
       y.select(0, 1).fill_(0.0);
       return V{mul(y, x[0])};
     },
     [] {
       return V{rnd({3, 2}, 406)};
     },
     true},
    {"zero_", "through a view",
     [](const V& x) {
       Tensor y = writable(x[0]);
       y.slice(0, 0, 1).zero_();
       return V{y};
     },
     [] {
       return V{rnd({2, 2}, 407)};
     }},
    {"_to_copy", "", [](const V& x) { return V{to(x[0], TensorOptions(kFloat64), /*copy=*/true)}; },
     [] {
       return V{rnd({2, 3}, 408)};
     },
     true},
    {"clone", "non-contiguous", [](const V& x) { return V{clone(x[0])}; },
     [] {
       return V{noncontig({3, 2}, 409)};
     },
     true},
    {"contiguous", "non-contiguous", [](const V& x) { return V{contiguous(x[0])}; },
     [] {
       return V{noncontig({3, 2}, 410)};
     }},
});

const RegisterGradCases kReduceCases({
    {"prod", "all", [](const V& x) { return V{prod(x[0])}; },
     [] {
       return V{rnd({2, 3}, 501, 0.5, 1.5)};
     },
     true},
    {"prod", "dim, keepdim, negative values",
     [](const V& x) { return V{prod(x[0], IntArrayRef{1}, true)}; },
     [] {
       return V{noncontig({3, 4}, 502)};
     },
     true},
    {"prod", "one zero", [](const V& x) { return V{prod(x[0])}; },
     [] {
       return V{leaf_of({2, 0, 3, -1}, {4})};
     }},
    {"prod", "zeros per row: none, one, two",
     [](const V& x) { return V{prod(x[0], IntArrayRef{1})}; },
     [] {
       return V{leaf_of({1, 2, 3, 0, 2, 3, 0, 0, 5}, {3, 3})};
     }},
    {"amax", "dim", [](const V& x) { return V{amax(x[0], {1})}; },
     [] {
       return V{rnd({3, 4}, 503)};
     },
     true},
    {"amax", "all dims, keepdim", [](const V& x) { return V{amax(x[0], {}, true)}; },
     [] {
       return V{noncontig({2, 3}, 504)};
     }},
    {"amin", "two dims",
     [](const V& x) {
       return V{amin(x[0], {0, 2})};
     },
     [] {
       return V{rnd({2, 3, 2}, 505)};
     },
     true},
    {"max", "all", [](const V& x) { return V{max(x[0])}; },
     [] {
       return V{rnd({3, 4}, 506)};
     },
     true},
    {"min", "all", [](const V& x) { return V{min(x[0])}; },
     [] {
       return V{noncontig({3, 2}, 507)};
     }},
    {"max.dim", "", [](const V& x) { return V{std::get<0>(max(x[0], 1))}; },
     [] {
       return V{rnd({3, 4}, 508)};
     },
     true},
    {"max.dim", "keepdim, both outputs",
     [](const V& x) {
       auto [v, i] = max(x[0], 0, true);
       return V{v, i};
     },
     [] {
       return V{noncontig({3, 4}, 509)};
     }},
    {"min.dim", "negative dim", [](const V& x) { return V{std::get<0>(min(x[0], -1))}; },
     [] {
       return V{rnd({2, 3, 4}, 510)};
     },
     true},
    {"var", "dim", [](const V& x) { return V{var(x[0], IntArrayRef{1})}; },
     [] {
       return V{rnd({3, 4}, 511)};
     },
     true},
    {"var", "all, correction 0", [](const V& x) { return V{var(x[0], std::nullopt, 0)}; },
     [] {
       return V{noncontig({3, 2}, 512)};
     }},
    {"std", "dim, keepdim", [](const V& x) { return V{std(x[0], IntArrayRef{0}, 1, true)}; },
     [] {
       return V{rnd({4, 3}, 513)};
     },
     true},
    {"std", "all, correction 2", [](const V& x) { return V{std(x[0], std::nullopt, 2)}; },
     [] {
       return V{rnd({2, 3}, 514)};
     }},
    {"logsumexp", "dim", [](const V& x) { return V{logsumexp(x[0], {1})}; },
     [] {
       return V{rnd({3, 4}, 515, -3, 3)};
     }},
    {"logsumexp", "all dims, keepdim",
     [](const V& x) {
       return V{logsumexp(x[0], {0, 1}, true)};
     },
     [] {
       return V{noncontig({3, 2}, 516)};
     }},
    {"norm", "p=2", [](const V& x) { return V{norm(x[0])}; },
     [] {
       return V{rnd({3, 4}, 517)};
     },
     true},
    {"norm", "p=2, dim", [](const V& x) { return V{norm(x[0], 2, IntArrayRef{1}, true)}; },
     [] {
       return V{noncontig({3, 4}, 518)};
     },
     true},
    {"norm", "p=1", [](const V& x) { return V{norm(x[0], 1, IntArrayRef{0})}; },
     [] {
       return V{rnd({3, 2}, 519)};
     }},
    {"norm", "p=3, dim", [](const V& x) { return V{norm(x[0], 3, IntArrayRef{1})}; },
     [] {
       return V{rnd({2, 4}, 520)};
     }},
    {"norm", "p=0.5", [](const V& x) { return V{norm(x[0], 0.5)}; },
     [] { return V{rnd({5}, 521, 0.2, 1.0)}; }},
    {"norm", "p=1.5, one zero element", [](const V& x) { return V{norm(x[0], 1.5)}; },
     [] {
       return V{leaf_of({0.5, 0, -0.7}, {3})};
     }},
    {"norm", "p=inf", [](const V& x) { return V{norm(x[0], kInf, IntArrayRef{1})}; },
     [] {
       return V{rnd({3, 4}, 522)};
     }},
    {"norm", "p=-inf", [](const V& x) { return V{norm(x[0], -kInf)}; },
     [] { return V{rnd({5}, 523)}; }},
    {"norm", "p=0", [](const V& x) { return V{norm(x[0], 0)}; }, [] { return V{rnd({4}, 524)}; }},
});

}  // namespace
}  // namespace loom::testing
