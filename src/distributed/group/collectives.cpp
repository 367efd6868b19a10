// The collectives of ProcessGroup: argument checks, fingerprints, buffers in the dtype the algorithms
// reduce in, and the calls into src/distributed/algorithms/.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "distributed/group/process_group_impl.h"
#include "loom/autograd.h"
#include "loom/detail/small_vector.h"
#include "loom/distributed/rendezvous.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::dist {

namespace {

using WorkPtr = ProcessGroup::WorkPtr;

void check_tensor(const char* op, const Tensor& t, const char* what = "tensor") {
  LOOM_CHECK(t.defined(), "[dist] ", op, ": ", what, " is undefined");
  if (!t.is_cpu()) {
    throw NotImplementedError(detail::str_cat("[dist] ", op, ": ", what, " is on ", t.device().str(),
                                              "; GPU tensors need the NCCL backend, which is not "
                                              "available in this build"));
  }
}

void check_root(const char* op, int root, int size, const std::string& group) {
  LOOM_CHECK(root >= 0 && root < size, "[dist] ", op, ": root ", root, " is not a rank of group '", group,
             "' (size ", size, ")");
}

void check_op(const char* op, DType dt, ReduceOp r) {
  if (r == ReduceOp::Avg && !is_floating(dt)) {
    throw TypeError(detail::str_cat("[dist] ", op, ": ReduceOp.AVG needs a floating dtype but the tensor is ",
                                    dtype_name(dt)));
  }
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b, const char* what) {
  if (a.dtype() != b.dtype()) {
    throw TypeError(detail::str_cat("[dist] ", op, ": ", what, " is ", dtype_name(b.dtype()),
                                    " but the input is ", dtype_name(a.dtype())));
  }
}

// bf16 and f16 sums and products are accumulated in f32.
DType work_dtype(DType dt, ReduceOp op) {
  bool half = dt == kFloat16 || dt == kBFloat16;
  return half && (op == ReduceOp::Sum || op == ReduceOp::Prod || op == ReduceOp::Avg) ? kFloat32 : dt;
}

ReduceOp algo_op(ReduceOp op) { return op == ReduceOp::Avg ? ReduceOp::Sum : op; }

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
    if (t.data_ptr() != src) std::memcpy(t.data_ptr(), src, static_cast<size_t>(t.numel()) * element_size(dt));
    t.storage()->bump_version();
    return;
  }
  Tensor tmp = empty(t.sizes(), TensorOptions(dt));
  std::memcpy(tmp.data_ptr(), src, static_cast<size_t>(t.numel()) * element_size(dt));
  autograd::NoGradGuard no_grad;
  t.copy_(tmp);
}

// A contiguous working copy of a tensor in the dtype the algorithms reduce in (the tensor itself when
// it already qualifies), written back by finish(). Refers to `t`, which the collective's body owns:
// the common case takes no reference count and makes no copy.
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

}  // namespace

WorkPtr ProcessGroup::broadcast(Tensor& tensor, int root, CollectiveOptions o) {
  check_tensor("broadcast", tensor);
  check_root("broadcast", root, size(), name());
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Broadcast, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), root, -1);
  return im->submit(fp, false, [t = tensor, root](Comm& c) {
    Buffer b(t, t.dtype());
    broadcast_binomial(c, b.data(), b.bytes(), root);
    c.wait_all();
    if (c.rank() != root) b.finish();
  }, o.async_op);
}

WorkPtr ProcessGroup::allreduce(Tensor& tensor, ReduceOp op, CollectiveOptions o) {
  check_tensor("allreduce", tensor);
  check_op("allreduce", tensor.dtype(), op);
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Allreduce, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), -1, static_cast<int>(op));
  return im->submit(fp, false, [im, t = tensor, op](Comm& c) {
    Buffer b(t, work_dtype(t.dtype(), op));
    Algo a = choose_allreduce(b.bytes(), c.size(), im->algo);
    im->note_allreduce(a, b.bytes());
    dist::allreduce(c, a, b.data(), b.count(), b.dt, algo_op(op));
    c.wait_all();
    if (op == ReduceOp::Avg) divide(b.data(), b.count(), b.dt, c.size());
    b.finish();
  }, o.async_op);
}

WorkPtr ProcessGroup::allreduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op, CollectiveOptions o) {
  LOOM_CHECK(!tensors.empty(), "[dist] allreduce_coalesced: no tensors");
  uint64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor("allreduce_coalesced", tensors[i]);
    check_same_dtype("allreduce_coalesced", tensors[0], tensors[i], "a tensor");
    total += static_cast<uint64_t>(tensors[i].numel());
  }
  DType dt = tensors[0].dtype();
  check_op("allreduce_coalesced", dt, op);
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Allreduce, dt, {}, total, -1, static_cast<int>(op));
  return im->submit(fp, false, [im, ts = tensors, op, dt, total](Comm& c) {
    DType wdt = work_dtype(dt, op);
    size_t es = element_size(wdt);
    char* buf = c.scratch(total * es, 1);
    size_t off = 0;
    for (const Tensor& t : ts) {
      read_into(t, buf + off, wdt);
      off += static_cast<size_t>(t.numel()) * es;
    }
    Algo a = choose_allreduce(total * es, c.size(), im->algo);
    im->note_allreduce(a, total * es);
    dist::allreduce(c, a, buf, total, wdt, algo_op(op));
    c.wait_all();
    if (op == ReduceOp::Avg) divide(buf, total, wdt, c.size());
    off = 0;
    for (const Tensor& t : ts) {
      write_from(t, buf + off, wdt);
      off += static_cast<size_t>(t.numel()) * es;
    }
  }, o.async_op);
}

WorkPtr ProcessGroup::reduce(Tensor& tensor, int root, ReduceOp op, CollectiveOptions o) {
  check_tensor("reduce", tensor);
  check_root("reduce", root, size(), name());
  check_op("reduce", tensor.dtype(), op);
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Reduce, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), root, static_cast<int>(op));
  return im->submit(fp, false, [t = tensor, root, op](Comm& c) {
    Buffer b(t, work_dtype(t.dtype(), op));
    reduce_binomial(c, b.data(), b.count(), b.dt, algo_op(op), root);
    c.wait_all();
    if (c.rank() == root) {
      if (op == ReduceOp::Avg) divide(b.data(), b.count(), b.dt, c.size());
      b.finish();
    }
  }, o.async_op);
}

WorkPtr ProcessGroup::allgather(std::vector<Tensor>& outputs, const Tensor& input, CollectiveOptions o) {
  check_tensor("allgather", input, "input");
  LOOM_CHECK(static_cast<int>(outputs.size()) == size(), "[dist] allgather: ", outputs.size(),
             " output tensors given but group '", name(), "' has ", size(), " ranks");
  uint64_t total = 0;
  std::vector<size_t> bytes;
  for (int r = 0; r < size(); ++r) {
    const Tensor& out = outputs[static_cast<size_t>(r)];
    check_tensor("allgather", out, "an output");
    check_same_dtype("allgather", input, out, "an output");
    total += static_cast<uint64_t>(out.numel());
    bytes.push_back(static_cast<size_t>(out.numel()) * input.element_size());
  }
  LOOM_CHECK(outputs[static_cast<size_t>(rank())].numel() == input.numel(), "[dist] allgather: output ",
             rank(), " has ", outputs[static_cast<size_t>(rank())].numel(), " elements but this rank's input has ",
             input.numel());
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Allgather, input.dtype(), {}, total, -1, -1);
  return im->submit(fp, false, [outs = outputs, in = input, bytes = std::move(bytes)](Comm& c) {
    std::vector<size_t> off = offsets_of(bytes);
    char* buf = c.scratch(sum_of(bytes), 1);
    Tensor tmp;
    allgather_ring(c, contiguous_in(in, tmp).data_ptr(), buf, bytes);
    c.wait_all();
    for (size_t r = 0; r < outs.size(); ++r) write_from(outs[r], buf + off[r], in.dtype());
  }, o.async_op);
}

WorkPtr ProcessGroup::allgather_into_tensor(Tensor& output, const Tensor& input, CollectiveOptions o) {
  check_tensor("allgather_into_tensor", input, "input");
  check_tensor("allgather_into_tensor", output, "output");
  check_same_dtype("allgather_into_tensor", input, output, "the output");
  LOOM_CHECK(output.numel() == input.numel() * size(), "[dist] allgather_into_tensor: output has ",
             output.numel(), " elements but ", size(), " ranks x ", input.numel(), " input elements = ",
             input.numel() * size(), " are needed");
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Allgather, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), -1, -1);
  return im->submit(fp, false, [out = output, in = input](Comm& c) {
    // This rank's block is sent from the input and copied into the output by the algorithm, unless the
    // input overlaps the output other than exactly at this rank's place: then it is copied first.
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
  }, o.async_op);
}

namespace {

// Shared by reduce_scatter and reduce_scatter_tensor: block r of this rank's contribution (counts[r]
// elements of wdt) is at in_blocks[r], read in place. The ring reduces straight into `output` when it
// is contiguous, of wdt and clear of the input; otherwise into scratch slot 1 at `staged` (room for
// this rank's block), then converted.
void run_reduce_scatter(Comm& c, ArrayRef<const void*> in_blocks, ArrayRef<size_t> counts, DType wdt,
                        ReduceOp op, const Tensor& output, char* staged) {
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

}  // namespace

WorkPtr ProcessGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                     CollectiveOptions o) {
  check_tensor("reduce_scatter", output, "output");
  check_op("reduce_scatter", output.dtype(), op);
  LOOM_CHECK(static_cast<int>(inputs.size()) == size(), "[dist] reduce_scatter: ", inputs.size(),
             " input tensors given but group '", name(), "' has ", size(), " ranks");
  std::vector<size_t> counts;
  uint64_t total = 0;
  for (const Tensor& t : inputs) {
    check_tensor("reduce_scatter", t, "an input");
    check_same_dtype("reduce_scatter", output, t, "an input");
    counts.push_back(static_cast<size_t>(t.numel()));
    total += static_cast<uint64_t>(t.numel());
  }
  LOOM_CHECK(static_cast<int64_t>(counts[static_cast<size_t>(rank())]) == output.numel(),
             "[dist] reduce_scatter: output has ", output.numel(), " elements but input ", rank(),
             " (this rank's block) has ", counts[static_cast<size_t>(rank())]);
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::ReduceScatter, output.dtype(), {}, total, -1, static_cast<int>(op));
  return im->submit(fp, false, [out = output, ins = inputs, counts = std::move(counts), op](Comm& c) {
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
    char* stage = packed > 0 || !out_direct ? c.scratch(packed + (out_direct ? 0 : out_bytes), 1) : nullptr;
    size_t off = 0;
    for (size_t r = 0; r < ins.size(); ++r) {
      if (direct[r]) continue;
      read_into(ins[r], stage + off, wdt);
      blocks[r] = stage + off;
      off += counts[r] * es;
    }
    run_reduce_scatter(c, blocks, counts, wdt, op, out, out_direct ? nullptr : stage + packed);
  }, o.async_op);
}

WorkPtr ProcessGroup::reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                            CollectiveOptions o) {
  check_tensor("reduce_scatter_tensor", output, "output");
  check_tensor("reduce_scatter_tensor", input, "input");
  check_same_dtype("reduce_scatter_tensor", input, output, "the output");
  check_op("reduce_scatter_tensor", input.dtype(), op);
  LOOM_CHECK(input.numel() == output.numel() * size(), "[dist] reduce_scatter_tensor: input has ",
             input.numel(), " elements but ", size(), " ranks x ", output.numel(), " output elements = ",
             output.numel() * size(), " are needed");
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::ReduceScatter, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), -1, static_cast<int>(op));
  return im->submit(fp, false, [out = output, in = input, op](Comm& c) {
    // The input is read in place when contiguous and of the working dtype, else converted into scratch
    // slot 1 (followed by room for a staged output).
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
    char* stage = packed > 0 || !out_direct ? c.scratch(packed + (out_direct ? 0 : each * es), 1) : nullptr;
    if (!in_direct) {
      read_into(in, stage, wdt);
      for (size_t r = 0; r < blocks.size(); ++r) blocks[r] = stage + r * each * es;
    }
    run_reduce_scatter(c, ref(blocks), ref(counts), wdt, op, out, out_direct ? nullptr : stage + packed);
  }, o.async_op);
}

WorkPtr ProcessGroup::alltoall(Tensor& output, const Tensor& input, CollectiveOptions o) {
  LOOM_CHECK(input.defined() && input.numel() % size() == 0, "[dist] alltoall: input has ",
             input.defined() ? input.numel() : 0, " elements, not divisible by the group size ", size());
  std::vector<int64_t> splits(static_cast<size_t>(size()), input.numel() / size());
  return alltoallv(output, input, splits, splits, o);
}

WorkPtr ProcessGroup::alltoallv(Tensor& output, const Tensor& input, const std::vector<int64_t>& output_splits,
                                const std::vector<int64_t>& input_splits, CollectiveOptions o) {
  check_tensor("alltoall", input, "input");
  check_tensor("alltoall", output, "output");
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
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Alltoall, input.dtype(), {}, static_cast<uint64_t>(size()), -1, -1);
  size_t es = input.element_size();
  std::vector<size_t> sb, rb;
  for (int64_t x : input_splits) sb.push_back(static_cast<size_t>(x) * es);
  for (int64_t x : output_splits) rb.push_back(static_cast<size_t>(x) * es);
  auto body = [out = output, in = input, sb = std::move(sb), rb = std::move(rb)](Comm& c) {
    char* src = c.scratch(sum_of(sb), 0);
    read_into(in, src, in.dtype());
    Buffer b(out, out.dtype());
    alltoallv_pairwise(c, src, sb, offsets_of(sb), b.data(), rb, offsets_of(rb));
    c.wait_all();
    b.finish();
  };
  return im->submit(fp, false, std::move(body), o.async_op);
}

WorkPtr ProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input, int root, CollectiveOptions o) {
  check_tensor("gather", input, "input");
  check_root("gather", root, size(), name());
  size_t es = input.element_size();
  std::vector<size_t> bytes(static_cast<size_t>(size()), static_cast<size_t>(input.numel()) * es);
  if (rank() == root) {
    LOOM_CHECK(static_cast<int>(outputs.size()) == size(), "[dist] gather: root got ", outputs.size(),
               " output tensors for ", size(), " ranks");
    for (size_t r = 0; r < outputs.size(); ++r) {
      check_tensor("gather", outputs[r], "an output");
      check_same_dtype("gather", input, outputs[r], "an output");
      LOOM_CHECK(outputs[r].numel() == input.numel(), "[dist] gather: output ", r, " has ",
                 outputs[r].numel(), " elements but the input has ", input.numel());
    }
  }
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Gather, input.dtype(), input.sizes(),
                                   static_cast<uint64_t>(input.numel()), root, -1);
  return im->submit(fp, false, [outs = outputs, in = input, root, bytes = std::move(bytes)](Comm& c) {
    std::vector<size_t> off = offsets_of(bytes);
    char* src = c.scratch(bytes[0], 0);
    read_into(in, src, in.dtype());
    char* dst = c.rank() == root ? c.scratch(sum_of(bytes), 1) : nullptr;
    gather_linear(c, src, dst, bytes, root);
    c.wait_all();
    if (c.rank() == root) {
      for (size_t r = 0; r < outs.size(); ++r) write_from(outs[r], dst + off[r], in.dtype());
    }
  }, o.async_op);
}

WorkPtr ProcessGroup::scatter(Tensor& output, const std::vector<Tensor>& inputs, int root, CollectiveOptions o) {
  check_tensor("scatter", output, "output");
  check_root("scatter", root, size(), name());
  size_t es = output.element_size();
  std::vector<size_t> bytes(static_cast<size_t>(size()), static_cast<size_t>(output.numel()) * es);
  if (rank() == root) {
    LOOM_CHECK(static_cast<int>(inputs.size()) == size(), "[dist] scatter: root got ", inputs.size(),
               " input tensors for ", size(), " ranks");
    for (size_t r = 0; r < inputs.size(); ++r) {
      check_tensor("scatter", inputs[r], "an input");
      check_same_dtype("scatter", output, inputs[r], "an input");
      LOOM_CHECK(inputs[r].numel() == output.numel(), "[dist] scatter: input ", r, " has ",
                 inputs[r].numel(), " elements but the output has ", output.numel());
    }
  }
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Scatter, output.dtype(), output.sizes(),
                                   static_cast<uint64_t>(output.numel()), root, -1);
  return im->submit(fp, false, [out = output, ins = inputs, root, bytes = std::move(bytes)](Comm& c) {
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
  }, o.async_op);
}

WorkPtr ProcessGroup::barrier(CollectiveOptions o) {
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Barrier, kUInt8, {}, 0, -1, -1);
  fp.dtype = -1;
  return im->submit(fp, false, [](Comm& c) {
    barrier_dissemination(c);
    c.wait_all();
  }, o.async_op);
}

WorkPtr ProcessGroup::send(const Tensor& tensor, int dst, CollectiveOptions o) {
  check_tensor("send", tensor);
  LOOM_CHECK(dst >= 0 && dst < size() && dst != rank(), "[dist] send: destination ", dst,
             " is not another rank of group '", name(), "' (size ", size(), ", this rank ", rank(), ")");
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Send, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), dst, -1);
  Tensor t = tensor.contiguous();
  return im->submit(fp, true, [t = std::move(t), dst](Comm& c) {
    c.send(dst, t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  }, o.async_op);
}

WorkPtr ProcessGroup::recv(Tensor& tensor, int src, CollectiveOptions o) {
  check_tensor("recv", tensor);
  LOOM_CHECK(src >= 0 && src < size() && src != rank(), "[dist] recv: source ", src,
             " is not another rank of group '", name(), "' (size ", size(), ", this rank ", rank(), ")");
  Impl* im = impl_.get();
  Fingerprint fp = im->fingerprint(CollKind::Recv, tensor.dtype(), tensor.sizes(),
                                   static_cast<uint64_t>(tensor.numel()), src, -1);
  return im->submit(fp, true, [t = tensor, src](Comm& c) {
    Buffer b(t, t.dtype());
    c.recv(src, b.data(), b.bytes());
    b.finish();
  }, o.async_op);
}

// ---- sub-groups ----

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks, ProcessGroupOptions o) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  LOOM_CHECK(!sorted.empty(), "[dist] new_group: no ranks given");
  for (size_t i = 0; i < sorted.size(); ++i) {
    LOOM_CHECK(sorted[i] >= 0 && sorted[i] < size(), "[dist] new_group: rank ", sorted[i],
               " is not in group '", name(), "' (size ", size(), ")");
    LOOM_CHECK(i == 0 || sorted[i] != sorted[i - 1], "[dist] new_group: rank ", sorted[i], " is listed twice");
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
  return create(impl_->root_store, static_cast<int>(it - sorted.begin()), static_cast<int>(sorted.size()), o);
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

std::shared_ptr<ProcessGroup> init_process_group(const std::string& init_method, int rank, int world_size,
                                                 ProcessGroupOptions options) {
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
