// `loom bench core`: eager overhead and kernel throughput against libtorch (the anchor process
// loom-anchor-torch measures the same names with the same sizes). Rows measured at several thread
// counts get a "_tN" suffix.
#include <memory>

#include "bench.h"
#include "loom/ops.h"

namespace loom::bench {
namespace {

constexpr int64_t kBig = 16 * 1024 * 1024;  // 16M float32 = 64 MiB per tensor

std::vector<Measure> setup_core(const SuiteOptions& opt) {
  struct State {
    Tensor a8, b8, x, y, out, m1, m2, act, w, g;
  };
  auto s = std::make_shared<State>();
  s->a8 = rand({8});
  s->b8 = rand({8});
  s->x = rand({kBig});
  s->y = rand({kBig});
  s->out = empty({kBig});
  s->m1 = rand({1024, 1024});
  s->m2 = rand({1024, 1024});
  // The first layer of `loom bench train`'s MLP: activations [128, 784], weight [512, 784], the
  // output's gradient [128, 512].
  s->act = rand({128, 784});
  s->w = rand({512, 784});
  s->g = rand({128, 512});
  const int reps = opt.quick ? 2 : 5;
  std::vector<Measure> m;
  // Eager overhead: a fresh output each call, as `c = a + b` does.
  const int iters = opt.quick ? 20000 : 100000;
  m.push_back({"eager_add_8", "ns/op", true, 0.5, 1, [s, iters, reps] {
                 double t = median_seconds(
                     [&] {
                       for (int i = 0; i < iters; ++i) Tensor c = add(s->a8, s->b8);
                     },
                     reps);
                 return t / iters * 1e9;
               }});
  for (int th : opt.threads) {
    const std::string sfx = "_t" + std::to_string(th);
    m.push_back({"add_16M" + sfx, "GB/s", false, 1.0, th, [s, reps] {
                   return 3.0 * 4 * kBig /
                          median_seconds([&] { add_out(s->out, s->x, s->y); }, reps) / 1e9;
                 }});
    m.push_back({"exp_16M" + sfx, "GB/s", false, 1.0, th, [s, reps] {
                   return 2.0 * 4 * kBig / median_seconds([&] { exp_out(s->out, s->x); }, reps) /
                          1e9;
                 }});
    m.push_back({"sum_16M" + sfx, "GB/s", false, 1.0, th, [s, reps] {
                   return 4.0 * kBig / median_seconds([&] { sum(s->x); }, reps) / 1e9;
                 }});
    // The MLP step's two largest products: forward x W^T and the weight gradient G^T x.
    constexpr double kMlpFlop = 2.0 * 128 * 784 * 512;
    m.push_back({"mm_mlp_fwd" + sfx, "GFLOP/s", false, 1.0, th, [s, reps] {
                   return kMlpFlop / median_seconds([&] { mm(s->act, s->w.t()); }, reps) / 1e9;
                 }});
    m.push_back({"mm_mlp_wgrad" + sfx, "GFLOP/s", false, 1.0, th, [s, reps] {
                   return kMlpFlop / median_seconds([&] { mm(s->g.t(), s->act); }, reps) / 1e9;
                 }});
    // Last in its group: OpenBLAS workers spin for a while after a call.
    m.push_back({"matmul_1024" + sfx, "GFLOP/s", false, 1.0, th, [s, reps] {
                   return 2.0 * 1024 * 1024 * 1024 /
                          median_seconds([&] { mm(s->m1, s->m2); }, reps) / 1e9;
                 }});
  }
  return m;
}

const RegisterSuite kCore(Suite{
    "core", "eager overhead, matmul, add/exp/sum throughput vs libtorch", "loom-anchor-torch",
    "libtorch 1.13 (OpenBLAS)", setup_core, nullptr});

}  // namespace
}  // namespace loom::bench
