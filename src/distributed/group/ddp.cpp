// DistributedDataParallel: bucketing, gradient hooks and the overlap of allreduce with backward.
#include "loom/distributed/ddp.h"

#include <chrono>
#include <mutex>
#include <optional>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/record_function.h"

namespace loom::dist {

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;
    std::vector<std::string> names;
    size_t bytes = 0;
    int pending = 0;
    std::shared_ptr<Work> work;
  };

  std::shared_ptr<ProcessGroup> group;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  std::vector<bool> ready;
  size_t ready_count = 0;
  size_t next_launch = 0;
  bool sync = true;
  Stats stats;
  std::mutex mu;

  void reset() {
    for (Bucket& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.work.reset();
    }
    std::fill(ready.begin(), ready.end(), false);
    ready_count = 0;
    next_launch = 0;
  }

  void launch(Bucket& b) {
    std::vector<Tensor> grads;
    for (size_t i : b.params) grads.push_back(autograd::grad(params[i]));
    b.work = group->allreduce_coalesced(grads, ReduceOp::Avg, CollectiveOptions{true});
    ++stats.reductions;
    stats.bytes_reduced += static_cast<int64_t>(b.bytes);
  }

  void on_ready(size_t i) {
    std::lock_guard<std::mutex> g(mu);
    if (!sync || ready[i]) return;
    ready[i] = true;
    ++ready_count;
    --buckets[bucket_of[i]].pending;
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0)
      launch(buckets[next_launch++]);
    if (ready_count == params.size()) {
      // The profiler's "ddp::wait_allreduce": backward blocks here (inside the last AccumulateGrad)
      // until every bucket is averaged. A comm_wait range, so that tables and the step breakdown
      // count it as communication, not as AccumulateGrad's self time or compute.
      std::optional<RecordFunctionGuard> wait_scope;
      if (LOOM_UNLIKELY(record_function_active()))
        wait_scope.emplace(OpEvent::Kind::CommWait, "ddp::wait_allreduce");
      auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr err;
      for (Bucket& b : buckets) {
        try {
          if (b.work) b.work->wait();
        } catch (...) {
          if (!err) err = std::current_exception();
        }
      }
      stats.wait_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      reset();
      if (err) std::rethrow_exception(err);
    }
  }

  void check_finished() {
    std::lock_guard<std::mutex> g(mu);
    if (ready_count == 0) return;
    std::string missing;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!ready[i]) missing += (missing.empty() ? "" : ", ") + names[i];
    }
    reset();
    LOOM_THROW(
        ValueError,
        "[DistributedDataParallel] the last backward did not produce gradients for: ", missing,
        ". Every parameter that requires grad must take part in the loss (unused "
        "parameters are not supported); its bucket was never reduced");
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  LOOM_CHECK(module_ && group_, "[DistributedDataParallel] needs a module and a process group");
  register_module("module", module_);
  // Same starting point everywhere.
  for (auto& [name, p] : module_->named_parameters()) {
    Tensor t = p;
    group_->broadcast(t, 0);
  }
  for (auto& [name, b] : module_->named_buffers()) {
    Tensor t = b;
    group_->broadcast(t, 0);
  }
  reducer_ = std::make_shared<Reducer>();
  Reducer& r = *reducer_;
  r.group = group_;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!autograd::requires_grad(p)) continue;
    r.params.push_back(p);
    r.names.push_back(name);
  }
  // Buckets in reverse registration order, one dtype per bucket.
  r.bucket_of.assign(r.params.size(), 0);
  for (size_t k = r.params.size(); k-- > 0;) {
    const Tensor& p = r.params[k];
    size_t bytes = static_cast<size_t>(p.numel()) * p.element_size();
    bool fits = !r.buckets.empty() && r.buckets.back().bytes + bytes <= options_.bucket_cap_bytes &&
                r.params[r.buckets.back().params[0]].dtype() == p.dtype();
    if (!fits) r.buckets.emplace_back();
    Reducer::Bucket& b = r.buckets.back();
    b.params.push_back(k);
    b.names.push_back(r.names[k]);
    b.bytes += bytes;
    r.bucket_of[k] = r.buckets.size() - 1;
  }
  r.ready.assign(r.params.size(), false);
  r.reset();
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t k = 0; k < r.params.size(); ++k) {
    autograd::register_post_accumulate_grad_hook(r.params[k], [weak, k](const Tensor&) {
      if (auto red = weak.lock()) red->on_ready(k);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& input) {
  reducer_->check_finished();
  if (options_.broadcast_buffers && group_->size() > 1) {
    for (auto& [name, b] : module_->named_buffers()) {
      Tensor t = b;
      group_->broadcast(t, 0);
    }
  }
  return module_->forward(input);
}

std::string DistributedDataParallel::name() const {
  return "DistributedDataParallel(" + module_->name() + ", world " +
         std::to_string(group_->size()) + ")";
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& d) : d_(d) {
  std::lock_guard<std::mutex> g(d.reducer_->mu);
  prev_ = d.reducer_->sync;
  d.reducer_->sync = false;
}

DistributedDataParallel::NoSync::~NoSync() {
  std::lock_guard<std::mutex> g(d_.reducer_->mu);
  d_.reducer_->sync = prev_;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.names);
  return out;
}

DistributedDataParallel::Stats DistributedDataParallel::stats() const {
  std::lock_guard<std::mutex> g(reducer_->mu);
  return reducer_->stats;
}

}  // namespace loom::dist
