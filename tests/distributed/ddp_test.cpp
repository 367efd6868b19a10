// DistributedDataParallel across real processes: two ranks training on halves of each batch end
// with the parameters of one process training on whole batches; no_sync accumulates; several
// buckets; initial parameters broadcast; an unused parameter is named.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "distributed/multiprocess.h"
#include "loom/autograd.h"
#include "loom/distributed/ddp.h"
#include "loom/error.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/profiler.h"
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

// Rank 1 joins late, so rank 0's backward blocks in its last AccumulateGrad until the allreduce of
// the gradients is done. Rank 0's profile shows that time as a comm_wait range
// ("ddp::wait_allreduce") inside AccumulateGrad: excluded from AccumulateGrad's self time and
// counted as communication, not compute, in the step breakdown.
TEST(DistributedDataParallel, ProfilerShowsTheAllreduceWaitAsCommunication) {
  auto res = run_processes(2, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, 2, path);
    auto m = small_mlp(7);
    m->to(kFloat64);
    DistributedDataParallel ddp(m, pg);
    auto [x, y] = batch(0);
    Tensor xs = x.narrow(0, rank * 4, 4), ys = y.narrow(0, rank * 4, 4);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the wait rank 0 must show
      nn::mse_loss(ddp.forward(xs), ys).backward();
      return;
    }
    profiler::Profile prof;
    prof.start();
    nn::mse_loss(ddp.forward(xs), ys).backward();
    prof.step();
    prof.stop();
    const profiler::Trace& t = prof.trace();
    const profiler::Event* wait = nullptr;
    const profiler::Event* acc = nullptr;  // the AccumulateGrad the wait happened in
    for (const profiler::Event& e : t.events) {
      if (e.name == "ddp::wait_allreduce") {
        CHILD_CHECK(wait == nullptr, "two waits in one backward");
        wait = &e;
      }
    }
    CHILD_CHECK(wait != nullptr, "no ddp::wait_allreduce in the trace:\n"
                                     << profiler::summarize(t));
    CHILD_CHECK(wait->kind == profiler::EventKind::CommWait, static_cast<int>(wait->kind));
    // Rank 1 came at least ~300 ms late; rank 0's own forward and backward take a few ms.
    CHILD_CHECK(wait->duration_ns() > 100'000'000, wait->duration_ns());
    for (const profiler::Event& e : t.events) {
      if (e.name == "AccumulateGrad" && e.tid == wait->tid && e.start_ns <= wait->start_ns &&
          e.end_ns >= wait->end_ns) {
        acc = &e;
      }
    }
    CHILD_CHECK(acc != nullptr, "the wait is not inside an AccumulateGrad");
    int64_t acc_self = -1, acc_total = -1;
    for (const profiler::OpStats& s : profiler::key_averages(t)) {
      if (s.name == "AccumulateGrad") {
        acc_self = s.self_ns;
        acc_total = s.total_ns;
      }
    }
    CHILD_CHECK(acc_self >= 0 && acc_self + wait->duration_ns() <= acc_total,
                "AccumulateGrad self " << acc_self << " ns includes the wait of "
                                       << wait->duration_ns() << " ns");
    const auto steps = profiler::step_breakdown(t);
    CHILD_CHECK(steps.size() == 1, steps.size());
    CHILD_CHECK(steps[0].communication_ns >= wait->duration_ns(),
                steps[0].communication_ns << " ns of communication, wait " << wait->duration_ns());
    CHILD_CHECK(steps[0].compute_ns < wait->duration_ns(), steps[0].compute_ns);
    CHILD_CHECK(profiler::dominant_part(steps).rfind("communication", 0) == 0,
                profiler::dominant_part(steps));
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
