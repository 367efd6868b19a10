// The loom rank of `loom bench collectives`: a ProcessGroup over a FileStore, and the op of the
// sweep on f32 tensors through its public API (what a user's program pays, argument checks
// included).
#include <memory>

#include "collectives.h"
#include "loom/distributed/process_group.h"
#include "loom/ops.h"

namespace loom::bench {
namespace {

using coll::Op;

class LoomBackend final : public coll::Backend {
 public:
  LoomBackend(std::shared_ptr<dist::ProcessGroup> pg, Op op) : pg_(std::move(pg)), op_(op) {}

  std::string config() const override { return "loom"; }

  void prepare(int64_t count) override {
    coll::Layout l = coll::layout_for(op_, count, pg_->size());
    in_ = empty({l.in_count}, TensorOptions(kFloat32));
    out_ = l.in_place ? in_ : empty({l.out_count}, TensorOptions(kFloat32));
  }
  float* in() override { return in_.data_ptr<float>(); }
  float* out() override { return out_.data_ptr<float>(); }

  void run() override {
    switch (op_) {
      case Op::kAllreduce:
        pg_->allreduce(in_)->wait();
        break;
      case Op::kAllgather:
        pg_->allgather_into_tensor(out_, in_)->wait();
        break;
      case Op::kReduceScatter:
        pg_->reduce_scatter_tensor(out_, in_)->wait();
        break;
      case Op::kBroadcast:
        pg_->broadcast(in_, 0)->wait();
        break;
    }
  }

  void barrier() override { pg_->barrier()->wait(); }

  double max_over_ranks(double value) override {
    Tensor t = full({1}, value, TensorOptions(kFloat64));
    pg_->allreduce(t, dist::ReduceOp::Max)->wait();
    return t.data_ptr<double>()[0];
  }

  // describe() names the allreduce algorithm it last chose ("...; last allreduce: ring (why)"); the
  // other collectives have one algorithm each (src/distributed/group/collectives.cpp).
  std::string algorithm() override {
    switch (op_) {
      case Op::kAllreduce: {
        std::string d = pg_->describe();
        const std::string key = "last allreduce: ";
        auto at = d.find(key);
        if (at == std::string::npos) return "?";
        std::string a = d.substr(at + key.size());
        return a.substr(0, a.find(' '));
      }
      case Op::kAllgather:
      case Op::kReduceScatter:
        return "ring";
      case Op::kBroadcast:
        return "binomial";
    }
    return "?";
  }

 private:
  std::shared_ptr<dist::ProcessGroup> pg_;
  Op op_;
  Tensor in_, out_;
};

// "group 'world' rank 0/2: shm x1; last ..." -> "shm x1".
std::string transport_of(const std::string& describe) {
  auto at = describe.find(": ");
  if (at == std::string::npos) return describe;
  std::string t = describe.substr(at + 2);
  return t.substr(0, t.find(';'));
}

}  // namespace

int run_loom_rank(const coll::SweepOptions& o, int rank, const LoomRankOptions& lo) {
  auto store = std::make_shared<dist::FileStore>(lo.store_path);
  dist::ProcessGroupOptions po;
  po.name = "bench";
  po.algo = lo.algo;
  po.transport = lo.transport;
  po.timeout = dist::Duration(static_cast<int64_t>(lo.timeout_s * 1000));
  store->set_timeout(po.timeout);
  auto pg = dist::ProcessGroup::create(store, rank, o.np, po);
  if (rank == 0) coll::emit("info transport " + transport_of(pg->describe()));
  LoomBackend backend(pg, o.op);
  int failures = coll::run_sweep(o, rank, {&backend});
  pg->barrier()->wait();  // nobody tears down links a peer still reads
  return failures > 0 ? 3 : 0;
}

}  // namespace loom::bench
