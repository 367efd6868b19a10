// The CPU backend of ProcessGroup: CPU tensors over the group's links (shared memory to peers on
// this host, TCP to the others) with the algorithms of src/distributed/algorithms/. It converts
// tensors to the contiguous buffers, in the dtype the algorithms reduce in, that they work on, and
// writes the results back.
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "distributed/algorithms/algorithms.h"
#include "distributed/group/backend.h"
#include "distributed/settings.h"
#include "distributed/transport/communicator.h"
#include "distributed/transport/transport.h"
#include "loom/autograd.h"
#include "loom/config.h"
#include "loom/detail/small_vector.h"
#include "loom/distributed/cost_model.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::dist {

namespace {

// bf16 and f16 sums and products are accumulated in f32.
DType work_dtype(DType dt, ReduceOp op) {
  bool half = dt == kFloat16 || dt == kBFloat16;
  return half && (op == ReduceOp::Sum || op == ReduceOp::Prod || op == ReduceOp::Avg) ? kFloat32
                                                                                      : dt;
}

ReduceOp algo_op(ReduceOp op) {
  return op == ReduceOp::Avg ? ReduceOp::Sum : op;
}

void divide(void* data, size_t n, DType dt, int size) {
  if (dt == kFloat32) {
    float* p = static_cast<float*>(data);
    float s = static_cast<float>(size);
    for (size_t i = 0; i < n; ++i) p[i] /= s;
  } else if (dt == kFloat64) {
    double* p = static_cast<double*>(data);
    for (size_t i = 0; i < n; ++i) p[i] /= size;
  } else {
    LOOM_INTERNAL_ASSERT(false, "AVG in ", dtype_name(dt));
  }
}

// Copies a tensor's elements, converted to `dt`, to dst (contiguous).
void read_into(const Tensor& t, void* dst, DType dt) {
  if (t.numel() == 0) return;
  Tensor src = t.dtype() == dt ? t.contiguous() : t.to(dt).contiguous();
  std::memcpy(dst, src.data_ptr(), static_cast<size_t>(src.numel()) * element_size(dt));
}

// Writes contiguous elements of dtype `dt` into a tensor (any layout and dtype).
void write_from(const Tensor& t, const void* src, DType dt) {
  if (t.numel() == 0) return;
  if (t.dtype() == dt && t.is_contiguous()) {
    if (t.data_ptr() != src)
      std::memcpy(t.data_ptr(), src, static_cast<size_t>(t.numel()) * element_size(dt));
    t.storage()->bump_version();
    return;
  }
  Tensor tmp = empty(t.sizes(), TensorOptions(dt));
  std::memcpy(tmp.data_ptr(), src, static_cast<size_t>(t.numel()) * element_size(dt));
  autograd::NoGradGuard no_grad;
  t.copy_(tmp);
}

// A contiguous working copy of a tensor in the dtype the algorithms reduce in (the tensor itself
// when it already qualifies), written back by finish(). Refers to `t`, which the collective's body
// owns: the common case takes no reference count and makes no copy.
struct Buffer {
  const Tensor& user;
  Tensor converted;  // undefined when `user` itself qualifies
  DType dt;
  void* ptr;
  Buffer(const Tensor& t, DType want) : user(t), dt(want) {
    if (t.dtype() == want && t.is_contiguous()) {
      ptr = t.data_ptr();
    } else {
      converted = t.dtype() == want ? t.contiguous() : t.to(want).contiguous();
      ptr = converted.data_ptr();
    }
  }
  void* data() const { return ptr; }
  size_t count() const { return static_cast<size_t>(user.numel()); }
  size_t bytes() const { return count() * element_size(dt); }
  void finish() const { write_from(user, ptr, dt); }
};

// `t` itself when contiguous (no dispatcher call, no reference count), else a contiguous copy kept
// in `tmp`.
const Tensor& contiguous_in(const Tensor& t, Tensor& tmp) {
  if (t.is_contiguous()) return t;
  tmp = t.contiguous();
  return tmp;
}

// Per-rank sizes and pointers without a heap allocation for groups of up to 8 ranks.
template <class T>
using PerRank = detail::SmallVector<T, 8>;
template <class T>
ArrayRef<T> ref(const PerRank<T>& v) {
  return ArrayRef<T>(v.data(), v.size());
}

// True when the bytes of a and b (contiguous) share an address.
bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a && b && a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size());
  size_t o = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    off[i] = o;
    o += bytes[i];
  }
  return off;
}

size_t sum_of(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

// Shared by reduce_scatter and reduce_scatter_tensor: block r of this rank's contribution
// (counts[r] elements of wdt) is at in_blocks[r], read in place. The ring reduces straight into
// `output` when it is contiguous, of wdt and clear of the input; otherwise into scratch slot 1 at
// `staged` (room for this rank's block), then converted.
void run_reduce_scatter(Comm& c, ArrayRef<const void*> in_blocks, ArrayRef<size_t> counts,
                        DType wdt, ReduceOp op, const Tensor& output, char* staged) {
  const size_t n = counts[static_cast<size_t>(c.rank())];
  char* dst = staged ? staged : static_cast<char*>(output.data_ptr());
  reduce_scatter_ring(c, in_blocks, dst, counts, wdt, algo_op(op));
  c.wait_all();
  if (op == ReduceOp::Avg) divide(dst, n, wdt, c.size());
  write_from(output, dst, wdt);
}

// Whether the ring can write the output tensor directly (see run_reduce_scatter).
bool output_direct(const Tensor& output, DType wdt, ArrayRef<const void*> in_blocks,
                   ArrayRef<size_t> counts) {
  if (output.dtype() != wdt || !output.is_contiguous()) return false;
  const size_t es = element_size(wdt), out_bytes = static_cast<size_t>(output.numel()) * es;
  for (size_t r = 0; r < in_blocks.size(); ++r) {
    if (overlaps(output.data_ptr(), out_bytes, in_blocks[r], counts[r] * es)) return false;
  }
  return true;
}

// Note [Choosing by the cost model]
// With LOOM_ALGO=model (ProcessGroupOptions::algo "model") the group learns its topology when it
// is made: every rank publishes its host's topology through the store (exchange_topology) and
// rank 0 publishes its cost model (its host's calibration from `loom tune`, or defaults from its
// hardware); every rank then predicts with the same constants over the same cluster, so all ranks
// choose the same algorithm for the same call without talking. An allreduce takes the fastest
// prediction at the transport's channel count and the pipeline's chunk size; the choice is cached
// per size. LOOM_LOGS=algo prints, for each new size, the candidates with their predicted times
// and the winner; the flight recorder keeps the algorithm of every call.
class ModelChooser {
 public:
  ModelChooser(Store& store, int rank, int size, bool shared_memory, int channels) {
    TopologyOptions to;
    to.gpus = false;
    const HostTopology host = detect_topology(to);
    cluster_ = exchange_topology(store, rank, size, host, "topo/");
    if (rank == 0) store.set("topo/model", CostModel::load_or_defaults(host).to_json().dump());
    store.wait({"topo/model"});
    model_ = CostModel::from_json(Json::parse(store.get("topo/model"), "topo/model"));
    options_.shared_memory = shared_memory;
    options_.channels = {std::max(channels, 1)};
  }

  Algo allreduce(size_t bytes, int rank) {
    auto it = cache_.find(bytes);
    if (it != cache_.end()) return it->second;
    options_.chunks = {pipeline_chunk_bytes()};
    const std::vector<Prediction> all =
        predict(model_, cluster_, Collective::Allreduce, bytes, options_);
    const Algo a = all.front().algo == "none" ? Algo::Ring : parse_algo(all.front().algo);
    if (cache_.size() >= 4096) cache_.clear();
    cache_.emplace(bytes, a);
    if (rank == 0 && config::log_enabled("algo")) {
      std::string line =
          detail::str_cat("[dist] allreduce of ", bytes, " bytes on ", cluster_.ranks.size(),
                          " ranks (", cluster_.hosts.size(), " host(s)): ", algo_name(a),
                          " by the cost model (", model_.source, "); predicted:");
      for (const Prediction& p : all) {
        char item[96];
        std::snprintf(item, sizeof(item), " %s %.1f us (%s);", p.algo.c_str(), p.seconds * 1e6,
                      p.link.c_str());
        line += item;
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    return a;
  }

  std::string describe() const {
    return detail::str_cat("cost model over ", cluster_.hosts.size(), " host(s): ", model_.source);
  }

 private:
  CostModel model_;
  ClusterTopology cluster_;
  PredictOptions options_;
  std::map<size_t, Algo> cache_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendContext& ctx)
      : Backend("cpu"),
        algo_(parse_algo(ctx.options.algo.empty() ? settings::kAlgo.get() : ctx.options.algo)) {
    TransportOptions to = transport_options_from_env();
    if (!ctx.options.transport.empty()) to.transport = ctx.options.transport;
    if (ctx.options.tcp_channels > 0) to.tcp_channels = ctx.options.tcp_channels;
    to.deadline = Clock::now() + ctx.options.timeout;
    int local_ranks = 1;
    std::vector<int> host_of;
    auto links =
        connect_links(*ctx.store, ctx.rank, ctx.size, to, &transport_desc_, &local_ranks, &host_of);
    comm_ = std::make_unique<Comm>(ctx.rank, ctx.size, std::move(links));
    comm_->set_host_of(std::move(host_of));
    hosts_even_ = host_layout(*comm_).even;
    // Oversubscribed when the host's ranks outnumber the cores this process may run on.
    cpu_set_t cpus;
    int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    comm_->set_oversubscribed(local_ranks > cores);
    if (local_ranks > cores) {
      transport_desc_ += " (" + std::to_string(local_ranks) + " ranks on " + std::to_string(cores) +
                         " cores: waits yield)";
    }
    if (ctx.failure_probe) comm_->set_failure_probe(ctx.failure_probe, ctx.failure_probe_arg);
    if (algo_ == Algo::Model) {
      model_ = std::make_unique<ModelChooser>(*ctx.store, ctx.rank, ctx.size, to.transport != "tcp",
                                              to.tcp_channels);
    }
  }
  ~CpuBackend() override { comm_->close_all(); }

  bool supports(DeviceType type) const override { return type == DeviceType::CPU; }

  std::string describe() const override {
    std::string s = transport_desc_;
    const Comm& c = *comm_;
    if (c.doorbell_sleeps() > 0) {
      s += detail::str_cat("; waits slept ", c.doorbell_sleeps(), " times on the doorbell (",
                           c.doorbell_timeouts(), " unwoken)");
    }
    if (c.bytes_helped() > 0) {
      s += detail::str_cat("; copied ", c.bytes_helped(),
                           " bytes into peers' receives while waiting");
    }
    if (model_) s += "; " + model_->describe();
    if (last_algo_ != Algo::Auto) {
      std::string why = "chosen by the cost model";
      if (!model_) choose_allreduce(last_algo_bytes_, c.size(), algo_, &why);
      s += "; last allreduce: " + std::string(algo_name(last_algo_)) + " for " +
           std::to_string(last_algo_bytes_) + " bytes (" + why + ")";
    }
    return s;
  }

  void begin_call(std::string (*what)(const void*), const void* arg,
                  Clock::time_point deadline) override {
    comm_->reset();
    comm_->set_context(what, arg, deadline);
  }
  void end_call() override { comm_->wait_all(); }

  void allgather_records(void* all, size_t each) override {
    allgather_ring(*comm_, all, std::vector<size_t>(static_cast<size_t>(comm_->size()), each));
    comm_->wait_all();
    comm_->reset();
  }

  void request_abort(const std::string& reason) override { comm_->request_abort(reason); }
  void close() override { comm_->close_all(); }
  bool closed() const override { return comm_->closed(); }
  std::string abort_reason() const override { return comm_->abort_reason(); }

  const char* algorithm_used() const override { return used_; }

  void broadcast(const Tensor& t, int root) override;
  void allreduce(const Tensor& t, ReduceOp op) override;
  void allreduce_coalesced(const std::vector<Tensor>& ts, ReduceOp op) override;
  void reduce(const Tensor& t, int root, ReduceOp op) override;
  void allgather(const std::vector<Tensor>& outs, const Tensor& in) override;
  void allgather_into_tensor(const Tensor& out, const Tensor& in) override;
  void reduce_scatter(const Tensor& out, const std::vector<Tensor>& ins, ReduceOp op) override;
  void reduce_scatter_tensor(const Tensor& out, const Tensor& in, ReduceOp op) override;
  void alltoallv(const Tensor& out, const Tensor& in, const std::vector<int64_t>& output_splits,
                 const std::vector<int64_t>& input_splits) override;
  void gather(const std::vector<Tensor>& outs, const Tensor& in, int root) override;
  void scatter(const Tensor& out, const std::vector<Tensor>& ins, int root) override;
  void barrier() override;
  void send(const Tensor& t, int dst) override;
  void recv(const Tensor& t, int src) override;

 private:
  std::unique_ptr<Comm> comm_;
  std::string transport_desc_;
  Algo algo_;  // forced allreduce algorithm, or Auto
  // The last allreduce's algorithm and size; described in words only by describe().
  Algo last_algo_ = Algo::Auto;
  size_t last_algo_bytes_ = 0;
  const char* used_ = "";                // the last call's algorithm (a literal)
  std::unique_ptr<ModelChooser> model_;  // LOOM_ALGO=model only
  bool hosts_even_ = true;               // every host runs as many ranks (host_layout)

  // The allreduce algorithm for `bytes` (Note [Allreduce thresholds], Note [Choosing by the cost
  // model]); remembered for describe() and the flight recorder.
  Algo choose(size_t bytes) {
    Algo a = model_ ? model_->allreduce(bytes, comm_->rank())
                    : choose_allreduce(bytes, comm_->size(), algo_);
    // Note [Hierarchical allreduce]: uneven hosts run the tree variant; say so.
    if (a == Algo::Hierarchical && !hosts_even_) a = Algo::HierarchicalTree;
    if (!model_ && comm_->rank() == 0 && config::log_enabled("algo") && bytes != last_algo_bytes_) {
      std::string why;
      choose_allreduce(bytes, comm_->size(), algo_, &why);
      std::fprintf(stderr, "[dist] allreduce of %zu bytes on %d ranks: %s\n", bytes, comm_->size(),
                   why.c_str());
    }
    last_algo_ = a;
    last_algo_bytes_ = bytes;
    used_ = algo_name(a);
    return a;
  }
};

void CpuBackend::broadcast(const Tensor& t, int root) {
  used_ = "binomial";
  Comm& c = *comm_;
  Buffer b(t, t.dtype());
  broadcast_binomial(c, b.data(), b.bytes(), root);
  c.wait_all();
  if (c.rank() != root) b.finish();
}

void CpuBackend::allreduce(const Tensor& t, ReduceOp op) {
  Comm& c = *comm_;
  Buffer b(t, work_dtype(t.dtype(), op));
  const Algo a = choose(b.bytes());
  dist::allreduce(c, a, b.data(), b.count(), b.dt, algo_op(op));
  c.wait_all();
  if (op == ReduceOp::Avg) divide(b.data(), b.count(), b.dt, c.size());
  b.finish();
}

void CpuBackend::allreduce_coalesced(const std::vector<Tensor>& ts, ReduceOp op) {
  Comm& c = *comm_;
  const DType dt = ts[0].dtype();
  uint64_t total = 0;
  for (const Tensor& t : ts) total += static_cast<uint64_t>(t.numel());
  DType wdt = work_dtype(dt, op);
  size_t es = element_size(wdt);
  char* buf = c.scratch(total * es, 1);
  size_t off = 0;
  for (const Tensor& t : ts) {
    read_into(t, buf + off, wdt);
    off += static_cast<size_t>(t.numel()) * es;
  }
  const Algo a = choose(total * es);
  dist::allreduce(c, a, buf, total, wdt, algo_op(op));
  c.wait_all();
  if (op == ReduceOp::Avg) divide(buf, total, wdt, c.size());
  off = 0;
  for (const Tensor& t : ts) {
    write_from(t, buf + off, wdt);
    off += static_cast<size_t>(t.numel()) * es;
  }
}

void CpuBackend::reduce(const Tensor& t, int root, ReduceOp op) {
  used_ = "binomial";
  Comm& c = *comm_;
  Buffer b(t, work_dtype(t.dtype(), op));
  reduce_binomial(c, b.data(), b.count(), b.dt, algo_op(op), root);
  c.wait_all();
  if (c.rank() == root) {
    if (op == ReduceOp::Avg) divide(b.data(), b.count(), b.dt, c.size());
    b.finish();
  }
}

void CpuBackend::allgather(const std::vector<Tensor>& outs, const Tensor& in) {
  used_ = "ring";
  Comm& c = *comm_;
  std::vector<size_t> bytes;
  bytes.reserve(outs.size());
  for (const Tensor& out : outs)
    bytes.push_back(static_cast<size_t>(out.numel()) * in.element_size());
  std::vector<size_t> off = offsets_of(bytes);
  char* buf = c.scratch(sum_of(bytes), 1);
  Tensor tmp;
  allgather_ring(c, contiguous_in(in, tmp).data_ptr(), buf, bytes);
  c.wait_all();
  for (size_t r = 0; r < outs.size(); ++r) write_from(outs[r], buf + off[r], in.dtype());
}

void CpuBackend::allgather_into_tensor(const Tensor& out, const Tensor& in) {
  used_ = "ring";
  Comm& c = *comm_;
  // This rank's block is sent from the input and copied into the output by the algorithm, unless
  // the input overlaps the output other than exactly at this rank's place: then it is copied first.
  Buffer b(out, out.dtype());
  size_t each = static_cast<size_t>(in.numel()) * in.element_size();
  char* place = static_cast<char*>(b.data()) + each * static_cast<size_t>(c.rank());
  Tensor tmp;
  const Tensor& mine = contiguous_in(in, tmp);
  const void* src = mine.data_ptr();
  if (src != place && overlaps(src, each, b.data(), b.bytes())) {
    read_into(mine, place, mine.dtype());
    src = place;
  }
  PerRank<size_t> bytes;
  bytes.resize(static_cast<size_t>(c.size()));
  for (size_t& x : bytes) x = each;
  allgather_ring(c, src, b.data(), ref(bytes));
  c.wait_all();
  b.finish();
}

void CpuBackend::reduce_scatter(const Tensor& out, const std::vector<Tensor>& ins, ReduceOp op) {
  used_ = "ring";
  Comm& c = *comm_;
  std::vector<size_t> counts;
  counts.reserve(ins.size());
  for (const Tensor& t : ins) counts.push_back(static_cast<size_t>(t.numel()));
  // Inputs that are contiguous and of the working dtype are read where they are; only the others
  // are packed (converted) into scratch slot 1, followed by room for a staged output.
  DType wdt = work_dtype(out.dtype(), op);
  size_t es = element_size(wdt), packed = 0;
  std::vector<bool> direct(ins.size());
  for (size_t r = 0; r < ins.size(); ++r) {
    direct[r] = ins[r].dtype() == wdt && ins[r].is_contiguous();
    if (!direct[r]) packed += counts[r] * es;
  }
  std::vector<const void*> blocks(ins.size());
  for (size_t r = 0; r < ins.size(); ++r) blocks[r] = direct[r] ? ins[r].data_ptr() : nullptr;
  bool out_direct = output_direct(out, wdt, blocks, counts);
  size_t out_bytes = counts[static_cast<size_t>(c.rank())] * es;
  char* stage =
      packed > 0 || !out_direct ? c.scratch(packed + (out_direct ? 0 : out_bytes), 1) : nullptr;
  size_t off = 0;
  for (size_t r = 0; r < ins.size(); ++r) {
    if (direct[r]) continue;
    read_into(ins[r], stage + off, wdt);
    blocks[r] = stage + off;
    off += counts[r] * es;
  }
  run_reduce_scatter(c, blocks, counts, wdt, op, out, out_direct ? nullptr : stage + packed);
}

void CpuBackend::reduce_scatter_tensor(const Tensor& out, const Tensor& in, ReduceOp op) {
  used_ = "ring";
  Comm& c = *comm_;
  // The input is read in place when contiguous and of the working dtype, else converted into
  // scratch slot 1 (followed by room for a staged output).
  DType wdt = work_dtype(in.dtype(), op);
  size_t es = element_size(wdt), each = static_cast<size_t>(out.numel());
  PerRank<size_t> counts;
  counts.resize(static_cast<size_t>(c.size()));
  for (size_t& x : counts) x = each;
  bool in_direct = in.dtype() == wdt && in.is_contiguous();
  size_t packed = in_direct ? 0 : static_cast<size_t>(in.numel()) * es;
  const char* src = in_direct ? static_cast<const char*>(in.data_ptr()) : nullptr;
  PerRank<const void*> blocks;
  blocks.resize(counts.size());
  for (size_t r = 0; r < blocks.size(); ++r) blocks[r] = src ? src + r * each * es : nullptr;
  bool out_direct = output_direct(out, wdt, ref(blocks), ref(counts));
  char* stage =
      packed > 0 || !out_direct ? c.scratch(packed + (out_direct ? 0 : each * es), 1) : nullptr;
  if (!in_direct) {
    read_into(in, stage, wdt);
    for (size_t r = 0; r < blocks.size(); ++r) blocks[r] = stage + r * each * es;
  }
  run_reduce_scatter(c, ref(blocks), ref(counts), wdt, op, out,
                     out_direct ? nullptr : stage + packed);
}

void CpuBackend::alltoallv(const Tensor& out, const Tensor& in,
                           const std::vector<int64_t>& output_splits,
                           const std::vector<int64_t>& input_splits) {
  used_ = "pairwise";
  Comm& c = *comm_;
  size_t es = in.element_size();
  std::vector<size_t> sb, rb;
  sb.reserve(input_splits.size());
  rb.reserve(output_splits.size());
  for (int64_t x : input_splits) sb.push_back(static_cast<size_t>(x) * es);
  for (int64_t x : output_splits) rb.push_back(static_cast<size_t>(x) * es);
  char* src = c.scratch(sum_of(sb), 0);
  read_into(in, src, in.dtype());
  Buffer b(out, out.dtype());
  alltoallv_pairwise(c, src, sb, offsets_of(sb), b.data(), rb, offsets_of(rb));
  c.wait_all();
  b.finish();
}

void CpuBackend::gather(const std::vector<Tensor>& outs, const Tensor& in, int root) {
  used_ = "linear";
  Comm& c = *comm_;
  std::vector<size_t> bytes(static_cast<size_t>(c.size()),
                            static_cast<size_t>(in.numel()) * in.element_size());
  std::vector<size_t> off = offsets_of(bytes);
  char* src = c.scratch(bytes[0], 0);
  read_into(in, src, in.dtype());
  char* dst = c.rank() == root ? c.scratch(sum_of(bytes), 1) : nullptr;
  gather_linear(c, src, dst, bytes, root);
  c.wait_all();
  if (c.rank() == root) {
    for (size_t r = 0; r < outs.size(); ++r) write_from(outs[r], dst + off[r], in.dtype());
  }
}

void CpuBackend::scatter(const Tensor& out, const std::vector<Tensor>& ins, int root) {
  used_ = "linear";
  Comm& c = *comm_;
  std::vector<size_t> bytes(static_cast<size_t>(c.size()),
                            static_cast<size_t>(out.numel()) * out.element_size());
  char* src = nullptr;
  if (c.rank() == root) {
    src = c.scratch(sum_of(bytes), 1);
    std::vector<size_t> off = offsets_of(bytes);
    for (size_t r = 0; r < ins.size(); ++r) read_into(ins[r], src + off[r], out.dtype());
  }
  Buffer b(out, out.dtype());
  scatter_linear(c, src, b.data(), bytes, root);
  c.wait_all();
  b.finish();
}

void CpuBackend::barrier() {
  used_ = "dissemination";
  barrier_dissemination(*comm_);
  comm_->wait_all();
}

void CpuBackend::send(const Tensor& t, int dst) {
  used_ = "p2p";
  Tensor tmp;
  const Tensor& mine = contiguous_in(t, tmp);
  comm_->send(dst, mine.data_ptr(), static_cast<size_t>(mine.numel()) * mine.element_size());
}

void CpuBackend::recv(const Tensor& t, int src) {
  used_ = "p2p";
  Buffer b(t, t.dtype());
  comm_->recv(src, b.data(), b.bytes());
  b.finish();
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendContext& context) {
  return std::make_unique<CpuBackend>(context);
}

}  // namespace loom::dist
