// DistributedDataParallel across real processes: two ranks training on halves of each batch end
// with the parameters of one process training on whole batches; no_sync accumulates; several
// buckets; initial parameters broadcast; an unused parameter is named.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "dist/multiprocess.h"
#include "loom/autograd.h"
#include "loom/dist/ddp.h"
#include "loom/error.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::make_group;
using loom::testing::run_processes;

std::shared_ptr<nn::Sequential> small_mlp(uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(12, 16, true, &gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(16, 8, true, &gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(8, 3, true, &gen));
  return m;
}

// Batch `step`: 8 samples of 12 features and their regression targets, the same on every rank.
std::pair<Tensor, Tensor> batch(int step) {
  Generator g(1000 + static_cast<uint64_t>(step));
  return {randn({8, 12}, TensorOptions(kFloat64), g), randn({8, 3}, TensorOptions(kFloat64), g)};
}

std::vector<double> flat_params(nn::Module& m) {
  std::vector<double> out;
  for (auto& p : m.parameters()) {
    Tensor c = p.detach().to(kFloat64).contiguous();
    for (int64_t i = 0; i < c.numel(); ++i) out.push_back(c.data_ptr<double>()[i]);
  }
  return out;
}

std::vector<double> reference_training(int steps) {
  auto m = small_mlp(7);
  m->to(kFloat64);
  optim::SGDOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  optim::SGD opt(m->parameters(), so);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    nn::mse_loss(m->forward(x), y).backward();
    opt.step();
  }
  return flat_params(*m);
}

TEST(DistributedDataParallel, TwoRanksOnHalfBatchesMatchOneProcessOnWholeBatches) {
  const int steps = 6;
  std::vector<double> want = reference_training(steps);
  for (size_t cap : {size_t{25} << 20, size_t{200}}) {  // one bucket; then one per parameter or so
    auto res = run_processes(2, [&](int rank, const std::string& path) {
      auto pg = make_group(rank, 2, path);
      auto m = small_mlp(rank == 0 ? 7 : 99);  // rank 1 starts elsewhere: the broadcast fixes it
      m->to(kFloat64);
      DDPOptions o;
      o.bucket_cap_bytes = cap;
      DistributedDataParallel ddp(m, pg, o);
      if (cap < 1000) CHILD_CHECK(ddp.bucket_names().size() >= 4, ddp.bucket_names().size());
      CHILD_CHECK(ddp.bucket_names()[0][0] == "4.bias",
                  ddp.bucket_names()[0][0]);  // last layer first
      optim::SGDOptions so;
      so.lr = 0.05;
      so.momentum = 0.9;
      optim::SGD opt(ddp.parameters(), so);
      for (int s = 0; s < steps; ++s) {
        auto [x, y] = batch(s);
        opt.zero_grad();
        Tensor xs = x.narrow(0, rank * 4, 4), ys = y.narrow(0, rank * 4, 4);
        nn::mse_loss(ddp.forward(xs), ys).backward();
        opt.step();
      }
      std::vector<double> got = flat_params(*m);
      CHILD_CHECK(got.size() == want.size(), got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CHILD_CHECK(std::fabs(got[i] - want[i]) < 1e-12,
                    "param " << i << ": " << got[i] << " vs " << want[i]);
      }
      CHILD_CHECK(ddp.stats().reductions == static_cast<int64_t>(steps * ddp.bucket_names().size()),
                  ddp.stats().reductions);
    });
    for (size_t r = 0; r < res.size(); ++r)
      EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].output;
  }
}

TEST(DistributedDataParallel, NoSyncAccumulatesThenAverages) {
  // Two micro-batches per step: the first under no_sync, the second synchronised. The averaged
  // accumulated gradient equals the whole-batch gradient times two (sum of two means).
  auto res = run_processes(2, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, 2, path);
    auto m = small_mlp(7);
    m->to(kFloat64);
    DistributedDataParallel ddp(m, pg);
    auto [x, y] = batch(0);
    {
      auto guard = ddp.no_sync();
      nn::mse_loss(ddp.forward(x.narrow(0, rank * 2, 2)), y.narrow(0, rank * 2, 2)).backward();
    }
    CHILD_CHECK(ddp.stats().reductions == 0, "no reduction under no_sync");
    nn::mse_loss(ddp.forward(x.narrow(0, 4 + rank * 2, 2)), y.narrow(0, 4 + rank * 2, 2))
        .backward();
    // Reference on this process: the four micro-batches' gradients summed, averaged over 2 ranks.
    auto ref = small_mlp(7);
    ref->to(kFloat64);
    for (int k = 0; k < 4; ++k) {
      int lo = k < 2 ? k * 2 : 4 + (k - 2) * 2;
      nn::mse_loss(ref->forward(x.narrow(0, lo, 2)), y.narrow(0, lo, 2)).backward();
    }
    auto ps = m->parameters(), rs = ref->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor diff = sub(autograd::grad(ps[i]), div(autograd::grad(rs[i]), 2.0));
      Tensor d = max(mul(diff, diff));
      CHILD_CHECK(d.item<double>() < 1e-24, "grad " << i << " differs by " << d.item<double>());
    }
  });
  for (size_t r = 0; r < res.size(); ++r)
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].output;
}

TEST(DistributedDataParallel, UnusedParameterIsNamed) {
  auto res = run_processes(2, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, 2, path);
    auto m = small_mlp(7);
    m->to(kFloat64);
    DistributedDataParallel ddp(m, pg);
    auto [x, y] = batch(0);
    // A loss that skips the last layer: its parameters get no gradient.
    Tensor hidden = m->named_children()[0].second->forward(x);
    sum(hidden).backward();
    std::string err = loom::testing::error_of<ValueError>([&] { ddp.forward(x); });
    CHILD_CHECK(
        err.find("4.weight") != std::string::npos && err.find("unused") != std::string::npos, err);
  });
  for (size_t r = 0; r < res.size(); ++r)
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].output;
}

}  // namespace
}  // namespace loom::dist
