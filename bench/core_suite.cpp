// `loom bench core`: eager overhead and kernel throughput against libtorch (anchor process
// loom-anchor-torch, same figures, same sizes). Rows measured at several thread counts get a
// "_tN" suffix.
#include <cmath>

#include "bench.h"
#include "loom/ops.h"
#include "loom/parallel.h"

namespace loom::bench {
namespace {

constexpr int64_t kBig = 16 * 1024 * 1024;  // 16M float32 = 64 MiB per tensor

std::vector<Row> run_core(const SuiteOptions& opt) {
  std::vector<Row> rows;
  const int reps = opt.quick ? 2 : 7;
  const std::string anchor = "libtorch 1.13 (OpenBLAS)";

  // Eager overhead: a fresh output each call, as `c = a + b` does.
  set_num_threads(1);
  {
    Tensor a = rand({8}), b = rand({8});
    const int iters = opt.quick ? 20000 : 200000;
    double t = median_seconds(
        [&] {
          for (int i = 0; i < iters; ++i) {
            Tensor c = add(a, b);
          }
        },
        reps);
    rows.push_back({"eager_add_8", "ns/op", t / iters * 1e9, -1, anchor, true, 0.5});
  }

  Tensor x = rand({kBig}), y = rand({kBig}), out = empty({kBig});
  Tensor m1 = rand({1024, 1024}), m2 = rand({1024, 1024});
  for (int th : opt.threads) {
    set_num_threads(th);
    const std::string sfx = "_t" + std::to_string(th);
    double t = median_seconds([&] { mm(m1, m2); }, opt.quick ? 2 : 5);
    rows.push_back({"matmul_1024" + sfx, "GFLOP/s", 2.0 * 1024 * 1024 * 1024 / t / 1e9, -1, anchor,
                    false, 1.0});
    t = median_seconds([&] { add_out(out, x, y); }, reps);
    rows.push_back({"add_16M" + sfx, "GB/s", 3.0 * 4 * kBig / t / 1e9, -1, anchor, false, 1.0});
    t = median_seconds([&] { exp_out(out, x); }, reps);
    rows.push_back({"exp_16M" + sfx, "GB/s", 2.0 * 4 * kBig / t / 1e9, -1, anchor, false, 1.0});
    t = median_seconds([&] { sum(x); }, reps);
    rows.push_back({"sum_16M" + sfx, "GB/s", 4.0 * kBig / t / 1e9, -1, anchor, false, 1.0});
  }

  // The anchor runs in its own process after loom's figures, so the two never share cores.
  std::string threads;
  for (int th : opt.threads) threads += (threads.empty() ? "" : ",") + std::to_string(th);
  auto a = run_anchor("loom-anchor-torch", std::string("core --threads ") + threads +
                                               (opt.quick ? " --quick" : ""));
  for (Row& r : rows) {
    auto it = a.find(r.name);
    if (it != a.end()) r.anchor = it->second;
  }
  return rows;
}

const RegisterSuite kCore(Suite{"core", "eager overhead, matmul, add/exp/sum throughput vs libtorch",
                                run_core});

}  // namespace
}  // namespace loom::bench
