// The collectives of ProcessGroup, the façade side (Note [Backend per device type] in
// process_group.cpp): argument checks, the backend the tensors' device picks, fingerprints, and the
// call into the backend (cpu_backend.cpp for CPU tensors).
#include <algorithm>
#include <cstdint>

#include "distributed/group/process_group_impl.h"
#include "loom/distributed/rendezvous.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::dist {

namespace {

using WorkPtr = ProcessGroup::WorkPtr;

// Checks a call's tensors and picks its backend: the first tensor's device type chooses it, and
// every other tensor must be on a device type of that same backend.
class Pick {
 public:
  Pick(ProcessGroup::Impl* im, const char* op) : im_(im), op_(op) {}
  void operator()(const Tensor& t, const char* what = "tensor") {
    LOOM_CHECK(t.defined(), "[dist] ", op_, ": ", what, " is undefined");
    Backend& b = im_->backend_for(op_, t, what);
    if (backend_ == nullptr) {
      backend_ = &b;
      first_ = &t;
      first_what_ = what;
      return;
    }
    LOOM_CHECK(&b == backend_, "[dist] ", op_, ": ", what, " is on ", t.device().str(), " but ",
               first_what_, " is on ", first_->device().str(), " (backends ", b.name(), " and ",
               backend_->name(), ")");
  }
  Backend& backend() const { return *backend_; }

 private:
  ProcessGroup::Impl* im_;
  const char* op_;
  Backend* backend_ = nullptr;
  const Tensor* first_ = nullptr;
  const char* first_what_ = "";
};

void check_root(const char* op, int root, int size, const std::string& group) {
  LOOM_CHECK(root >= 0 && root < size, "[dist] ", op, ": root ", root, " is not a rank of group '",
             group, "' (size ", size, ")");
}

void check_op(const char* op, DType dt, ReduceOp r) {
  LOOM_CHECK_TYPE(r != ReduceOp::Avg || is_floating(dt), "[dist] ", op,
                  ": ReduceOp.AVG needs a floating dtype but the tensor is ", dtype_name(dt));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b, const char* what) {
  LOOM_CHECK_TYPE(a.dtype() == b.dtype(), "[dist] ", op, ": ", what, " is ", dtype_name(b.dtype()),
                  " but the input is ", dtype_name(a.dtype()));
}

}  // namespace

WorkPtr ProcessGroup::broadcast(Tensor& tensor, int root, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "broadcast");
  pick(tensor);
  check_root("broadcast", root, size(), name());
  Fingerprint fp = im->fingerprint(CollKind::Broadcast, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), root, -1);
  return im->submit(
      fp, pick.backend(), false, [t = tensor, root](Backend& b) { b.broadcast(t, root); },
      o.async_op);
}

WorkPtr ProcessGroup::allreduce(Tensor& tensor, ReduceOp op, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "allreduce");
  pick(tensor);
  check_op("allreduce", tensor.dtype(), op);
  Fingerprint fp = im->fingerprint(CollKind::Allreduce, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), -1, static_cast<int>(op));
  return im->submit(
      fp, pick.backend(), false, [t = tensor, op](Backend& b) { b.allreduce(t, op); }, o.async_op);
}

WorkPtr ProcessGroup::allreduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op,
                                          CollectiveOptions o) {
  LOOM_CHECK(!tensors.empty(), "[dist] allreduce_coalesced: no tensors");
  Impl* im = impl_.get();
  Pick pick(im, "allreduce_coalesced");
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    pick(tensors[i]);
    check_same_dtype("allreduce_coalesced", tensors[0], tensors[i], "a tensor");
    total += static_cast<uint64_t>(tensors[i].numel());
  }
  DType dt = tensors[0].dtype();
  check_op("allreduce_coalesced", dt, op);
  Fingerprint fp = im->fingerprint(CollKind::Allreduce, dt, {}, total, -1, static_cast<int>(op));
  return im->submit(
      fp, pick.backend(), false, [ts = tensors, op](Backend& b) { b.allreduce_coalesced(ts, op); },
      o.async_op);
}

WorkPtr ProcessGroup::reduce(Tensor& tensor, int root, ReduceOp op, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "reduce");
  pick(tensor);
  check_root("reduce", root, size(), name());
  check_op("reduce", tensor.dtype(), op);
  Fingerprint fp =
      im->fingerprint(CollKind::Reduce, tensor.dtype(), tensor.sizes(),
                      static_cast<uint64_t>(tensor.numel()), root, static_cast<int>(op));
  return im->submit(
      fp, pick.backend(), false, [t = tensor, root, op](Backend& b) { b.reduce(t, root, op); },
      o.async_op);
}

WorkPtr ProcessGroup::allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "allgather");
  pick(input, "input");
  LOOM_CHECK(static_cast<int>(outputs.size()) == size(), "[dist] allgather: ", outputs.size(),
             " output tensors given but group '", name(), "' has ", size(), " ranks");
  uint64_t total = 0;
  for (int r = 0; r < size(); ++r) {
    const Tensor& out = outputs[static_cast<size_t>(r)];
    pick(out, "an output");
    check_same_dtype("allgather", input, out, "an output");
    total += static_cast<uint64_t>(out.numel());
  }
  LOOM_CHECK(outputs[static_cast<size_t>(rank())].numel() == input.numel(),
             "[dist] allgather: output ", rank(), " has ",
             outputs[static_cast<size_t>(rank())].numel(), " elements but this rank's input has ",
             input.numel());
  Fingerprint fp = im->fingerprint(CollKind::Allgather, input.dtype(), {}, total, -1, -1);
  return im->submit(
      fp, pick.backend(), false,
      [outs = outputs, in = input](Backend& b) { b.allgather(outs, in); }, o.async_op);
}

WorkPtr ProcessGroup::allgather_into_tensor(Tensor& output, const Tensor& input,
                                            CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "allgather_into_tensor");
  pick(input, "input");
  pick(output, "output");
  check_same_dtype("allgather_into_tensor", input, output, "the output");
  LOOM_CHECK(output.numel() == input.numel() * size(), "[dist] allgather_into_tensor: output has ",
             output.numel(), " elements but ", size(), " ranks x ", input.numel(),
             " input elements = ", input.numel() * size(), " are needed");
  Fingerprint fp = im->fingerprint(CollKind::Allgather, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), -1, -1);
  return im->submit(
      fp, pick.backend(), false,
      [out = output, in = input](Backend& b) { b.allgather_into_tensor(out, in); }, o.async_op);
}

WorkPtr ProcessGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                     CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "reduce_scatter");
  pick(output, "output");
  check_op("reduce_scatter", output.dtype(), op);
  LOOM_CHECK(static_cast<int>(inputs.size()) == size(), "[dist] reduce_scatter: ", inputs.size(),
             " input tensors given but group '", name(), "' has ", size(), " ranks");
  uint64_t total = 0;
  for (const Tensor& t : inputs) {
    pick(t, "an input");
    check_same_dtype("reduce_scatter", output, t, "an input");
    total += static_cast<uint64_t>(t.numel());
  }
  const int64_t mine = inputs[static_cast<size_t>(rank())].numel();
  LOOM_CHECK(mine == output.numel(), "[dist] reduce_scatter: output has ", output.numel(),
             " elements but input ", rank(), " (this rank's block) has ", mine);
  Fingerprint fp =
      im->fingerprint(CollKind::ReduceScatter, output.dtype(), {}, total, -1, static_cast<int>(op));
  return im->submit(
      fp, pick.backend(), false,
      [out = output, ins = inputs, op](Backend& b) { b.reduce_scatter(out, ins, op); }, o.async_op);
}

WorkPtr ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                            CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "reduce_scatter_tensor");
  pick(output, "output");
  pick(input, "input");
  check_same_dtype("reduce_scatter_tensor", input, output, "the output");
  check_op("reduce_scatter_tensor", input.dtype(), op);
  LOOM_CHECK(input.numel() == output.numel() * size(), "[dist] reduce_scatter_tensor: input has ",
             input.numel(), " elements but ", size(), " ranks x ", output.numel(),
             " output elements = ", output.numel() * size(), " are needed");
  Fingerprint fp = im->fingerprint(CollKind::ReduceScatter, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), -1, static_cast<int>(op));
  return im->submit(
      fp, pick.backend(), false,
      [out = output, in = input, op](Backend& b) { b.reduce_scatter_tensor(out, in, op); },
      o.async_op);
}

WorkPtr ProcessGroup::alltoall(Tensor& output, const Tensor& input, CollectiveOptions o) {
  LOOM_CHECK(input.defined() && input.numel() % size() == 0, "[dist] alltoall: input has ",
             input.defined() ? input.numel() : 0, " elements, not divisible by the group size ",
             size());
  std::vector<int64_t> splits(static_cast<size_t>(size()), input.numel() / size());
  return alltoallv(output, input, splits, splits, o);
}

WorkPtr ProcessGroup::alltoallv(Tensor& output, const Tensor& input,
                                const std::vector<int64_t>& output_splits,
                                const std::vector<int64_t>& input_splits, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "alltoall");
  pick(input, "input");
  pick(output, "output");
  check_same_dtype("alltoall", input, output, "the output");
  auto check_splits = [&](const std::vector<int64_t>& s, int64_t numel, const char* what) {
    LOOM_CHECK(static_cast<int>(s.size()) == size(), "[dist] alltoall: ", s.size(), " ", what,
               " splits for ", size(), " ranks");
    int64_t sum = 0;
    for (int64_t x : s) {
      LOOM_CHECK(x >= 0, "[dist] alltoall: negative ", what, " split ", x);
      sum += x;
    }
    LOOM_CHECK(sum == numel, "[dist] alltoall: ", what, " splits sum to ", sum, " but the ", what,
               " has ", numel, " elements");
  };
  check_splits(input_splits, input.numel(), "input");
  check_splits(output_splits, output.numel(), "output");
  Fingerprint fp =
      im->fingerprint(CollKind::Alltoall, input.dtype(), {}, static_cast<uint64_t>(size()), -1, -1);
  auto body = [out = output, in = input, os = output_splits, is = input_splits](Backend& b) {
    b.alltoallv(out, in, os, is);
  };
  return im->submit(fp, pick.backend(), false, std::move(body), o.async_op);
}

WorkPtr ProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input, int root,
                             CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "gather");
  pick(input, "input");
  check_root("gather", root, size(), name());
  if (rank() == root) {
    LOOM_CHECK(static_cast<int>(outputs.size()) == size(), "[dist] gather: root got ",
               outputs.size(), " output tensors for ", size(), " ranks");
    for (size_t r = 0; r < outputs.size(); ++r) {
      pick(outputs[r], "an output");
      check_same_dtype("gather", input, outputs[r], "an output");
      LOOM_CHECK(outputs[r].numel() == input.numel(), "[dist] gather: output ", r, " has ",
                 outputs[r].numel(), " elements but the input has ", input.numel());
    }
  }
  Fingerprint fp = im->fingerprint(CollKind::Gather, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), root, -1);
  return im->submit(
      fp, pick.backend(), false,
      [outs = outputs, in = input, root](Backend& b) { b.gather(outs, in, root); }, o.async_op);
}

WorkPtr ProcessGroup::scatter(Tensor& output, const std::vector<Tensor>& inputs, int root,
                              CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "scatter");
  pick(output, "output");
  check_root("scatter", root, size(), name());
  if (rank() == root) {
    LOOM_CHECK(static_cast<int>(inputs.size()) == size(), "[dist] scatter: root got ",
               inputs.size(), " input tensors for ", size(), " ranks");
    for (size_t r = 0; r < inputs.size(); ++r) {
      pick(inputs[r], "an input");
      check_same_dtype("scatter", output, inputs[r], "an input");
      LOOM_CHECK(inputs[r].numel() == output.numel(), "[dist] scatter: input ", r, " has ",
                 inputs[r].numel(), " elements but the output has ", output.numel());
    }
  }
  Fingerprint fp = im->fingerprint(CollKind::Scatter, output.dtype(), output.sizes(),
                                   static_cast<uint64_t>(output.numel()), root, -1);
  return im->submit(
      fp, pick.backend(), false,
      [out = output, ins = inputs, root](Backend& b) { b.scatter(out, ins, root); }, o.async_op);
}

// A barrier has no tensor: it runs on the CPU backend.
WorkPtr ProcessGroup::barrier(CollectiveOptions o) {
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Barrier, kUInt8, {}, 0, -1, -1);
  fp.dtype = -1;
  return im->submit(
      fp, *im->cpu, false, [](Backend& b) { b.barrier(); }, o.async_op);
}

WorkPtr ProcessGroup::send(const Tensor& tensor, int dst, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "send");
  pick(tensor);
  LOOM_CHECK(dst >= 0 && dst < size() && dst != rank(), "[dist] send: destination ", dst,
             " is not another rank of group '", name(), "' (size ", size(), ", this rank ", rank(),
             ")");
  Fingerprint fp = im->fingerprint(CollKind::Send, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), dst, -1);
  Tensor t = tensor.contiguous();
  return im->submit(
      fp, pick.backend(), true, [t = std::move(t), dst](Backend& b) { b.send(t, dst); },
      o.async_op);
}

WorkPtr ProcessGroup::recv(Tensor& tensor, int src, CollectiveOptions o) {
  Impl* im = impl_.get();
  Pick pick(im, "recv");
  pick(tensor);
  LOOM_CHECK(src >= 0 && src < size() && src != rank(), "[dist] recv: source ", src,
             " is not another rank of group '", name(), "' (size ", size(), ", this rank ", rank(),
             ")");
  Fingerprint fp = im->fingerprint(CollKind::Recv, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), src, -1);
  return im->submit(
      fp, pick.backend(), true, [t = tensor, src](Backend& b) { b.recv(t, src); }, o.async_op);
}

// ---- sub-groups ----

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks,
                                                      ProcessGroupOptions o) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  LOOM_CHECK(!sorted.empty(), "[dist] new_group: no ranks given");
  for (size_t i = 0; i < sorted.size(); ++i) {
    LOOM_CHECK(sorted[i] >= 0 && sorted[i] < size(), "[dist] new_group: rank ", sorted[i],
               " is not in group '", name(), "' (size ", size(), ")");
    LOOM_CHECK(i == 0 || sorted[i] != sorted[i - 1], "[dist] new_group: rank ", sorted[i],
               " is listed twice");
  }
  auto it = std::find(sorted.begin(), sorted.end(), rank());
  if (it == sorted.end()) return nullptr;
  std::string key = "g[";
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i) key += ',';
    key += std::to_string(sorted[i]);
  }
  key += "]";
  int n;
  {
    std::lock_guard<std::mutex> g(impl_->submit_mu);
    n = impl_->subgroup_counts[key]++;
  }
  o.name = name() + "/" + key + (n ? "#" + std::to_string(n) : "");
  if (o.timeout == default_timeout()) o.timeout = impl_->opts.timeout;
  return create(impl_->root_store, static_cast<int>(it - sorted.begin()),
                static_cast<int>(sorted.size()), o);
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, ProcessGroupOptions o) {
  uint64_t seq = sequence_number();
  Tensor mine = empty({2}, TensorOptions(kInt64));
  mine.data_ptr<int64_t>()[0] = color;
  mine.data_ptr<int64_t>()[1] = key;
  Tensor all = empty({2 * static_cast<int64_t>(size())}, TensorOptions(kInt64));
  allgather_into_tensor(all, mine)->wait();
  if (color < 0) return nullptr;
  std::vector<std::pair<int64_t, int>> members;  // (key, rank)
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 0; r < size(); ++r) {
    if (a[2 * r] == color) members.push_back({a[2 * r + 1], r});
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == rank()) new_rank = static_cast<int>(i);
  }
  o.name = name() + "/split" + std::to_string(seq) + ":" + std::to_string(color);
  if (o.timeout == default_timeout()) o.timeout = impl_->opts.timeout;
  return create(impl_->root_store, new_rank, static_cast<int>(members.size()), o);
}

// ---- the default group ----

namespace {
std::mutex g_default_mu;
std::shared_ptr<ProcessGroup> g_default;
}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(const std::string& init_method, int rank,
                                                 int world_size, ProcessGroupOptions options) {
  RendezvousInfo info = rendezvous(init_method, rank, world_size, options.timeout);
  auto pg = ProcessGroup::create(info.store, info.rank, info.world_size, options);
  std::lock_guard<std::mutex> g(g_default_mu);
  g_default = pg;
  return pg;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> g(g_default_mu);
  LOOM_CHECK_AS(DistError, g_default != nullptr,
                "[dist] no default process group: call init_process_group() first");
  return g_default;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> g(g_default_mu);
  g_default.reset();
}

}  // namespace loom::dist
