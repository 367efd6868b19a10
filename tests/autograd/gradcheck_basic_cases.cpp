// gradcheck cases for binary, linear-algebra and basic reduction operators.
#include "autograd/gradcheck_cases.h"

namespace loom::testing {
namespace {

using V = std::vector<Tensor>;

const RegisterGradCases kCases({
    {"add", "broadcast + alpha", [](const V& x) { return V{add(x[0], x[1], 2.5)}; },
     [] {
       return V{rnd({2, 3}, 1), rnd({3}, 2)};
     },
     true},
    {"add", "non-contiguous", [](const V& x) { return V{add(x[0], x[1])}; },
     [] {
       return V{noncontig({3, 2}, 3), rnd({3, 2}, 4)};
     }},
    {"sub", "broadcast + alpha", [](const V& x) { return V{sub(x[0], x[1], 0.5)}; },
     [] {
       return V{rnd({2, 1}, 5), rnd({2, 3}, 6)};
     },
     true},
    {"mul", "broadcast", [](const V& x) { return V{mul(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 7), rnd({1, 3}, 8)};
     },
     true},
    {"mul", "non-contiguous, scalar", [](const V& x) { return V{mul(x[0], 3.0)}; },
     [] {
       return V{noncontig({2, 3}, 9)};
     }},
    {"div", "broadcast", [](const V& x) { return V{div(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 10), rnd({3}, 11, 0.5, 2.0)};
     },
     true},
    {"maximum", "broadcast", [](const V& x) { return V{maximum(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 12), rnd({3}, 13)};
     }},
    {"minimum", "", [](const V& x) { return V{minimum(x[0], x[1])}; },
     [] {
       return V{rnd({4}, 14), rnd({4}, 15)};
     }},
    {"where", "broadcast", [](const V& x) { return V{where(gt(x[0], 0.0), x[0], x[1])}; },
     [] {
       return V{rnd({2, 3}, 16), rnd({3}, 17)};
     }},
    {"mm", "non-contiguous", [](const V& x) { return V{mm(x[0], x[1])}; },
     [] {
       return V{noncontig({3, 4}, 18), rnd({4, 2}, 19)};
     },
     true},
    {"bmm", "", [](const V& x) { return V{bmm(x[0], x[1])}; },
     [] {
       return V{rnd({2, 3, 4}, 20), rnd({2, 4, 2}, 21)};
     },
     true},
    {"addmm", "broadcast bias, alpha, beta",
     [](const V& x) { return V{addmm(x[0], x[1], x[2], 0.5, 2.0)}; },
     [] {
       return V{rnd({2}, 22), rnd({3, 4}, 23), rnd({4, 2}, 24)};
     },
     true},
    {"_linear", "3-D input (through linear)",
     [](const V& x) { return V{linear(x[0], x[1], x[2])}; },
     [] {
       return V{rnd({2, 3, 4}, 40), noncontig({5, 4}, 41), rnd({5}, 42)};
     },
     true},
    {"_linear", "broadcast bias, no bias",
     [](const V& x) {
       return V{linear(x[0], x[1], x[2]), linear(x[0], x[1])};
     },
     [] {
       return V{noncontig({3, 4}, 43), rnd({2, 4}, 44), rnd({1}, 45)};
     },
     true},
    {"dot", "", [](const V& x) { return V{dot(x[0], x[1])}; },
     [] {
       return V{rnd({5}, 25), noncontig({5}, 26)};
     },
     true},
    {"sum", "all", [](const V& x) { return V{sum(x[0])}; },
     [] {
       return V{rnd({2, 3}, 27)};
     }},
    {"sum", "dims, keepdim",
     [](const V& x) {
       return V{sum(x[0], IntArrayRef{0, 2}, true)};
     },
     [] {
       return V{noncontig({2, 3, 2}, 28)};
     }},
    {"mean", "dim", [](const V& x) { return V{mean(x[0], IntArrayRef{-1})}; },
     [] {
       return V{rnd({2, 3}, 29)};
     },
     true},
});

}  // namespace
}  // namespace loom::testing
