// Data-parallel training (distributed layer): DistributedDataParallel wraps a module so that every
// rank of a process group keeps identical parameters while training on different data.
//
//   - Construction broadcasts rank 0's parameters and buffers to every rank.
//   - Parameters are grouped into buckets (bucket_cap_bytes, 25 MiB by default), in reverse
//     registration order, which is roughly the order backward produces their gradients. A
//     post-accumulate-grad hook on each parameter counts ready gradients; when a bucket is complete
//     (and every earlier bucket has been launched, so all ranks launch in one order) its gradients
//     are averaged with an asynchronous allreduce while backward goes on computing. When the last
//     gradient is ready the hook waits for every bucket, so backward() returns with averaged
//     gradients.
//   - no_sync(): inside the guard, backward accumulates gradients locally; the first backward after
//     it averages the accumulated gradients.
//   - Every parameter that requires grad must receive a gradient in each synchronised backward; one
//     that did not is named in a ValueError at the next forward (unused parameters are not
//     supported).
//
// Thread-safety: like a Module, one training thread at a time. The hooks hold the reducer weakly,
// so destroying the wrapper leaves the parameters usable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/distributed/process_group.h"
#include "loom/export.h"
#include "loom/nn.h"

namespace loom::dist {

struct DDPOptions {
  size_t bucket_cap_bytes = 25u << 20;
  bool broadcast_buffers = true;  // rank 0's buffers are broadcast before each forward
};

class LOOM_API DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  nn::Module& module() const { return *module_; }
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }

  class LOOM_API NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  // auto guard = ddp.no_sync();  (C++17 guaranteed elision)
  NoSync no_sync() { return NoSync(*this); }

  // Parameter names per bucket, in launch order; and counters for reports.
  std::vector<std::vector<std::string>> bucket_names() const;
  struct Stats {
    int64_t reductions = 0;   // buckets allreduced
    double wait_seconds = 0;  // time backward spent waiting for the last buckets
    int64_t bytes_reduced = 0;
  };
  Stats stats() const;

  struct Reducer;

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace loom::dist
