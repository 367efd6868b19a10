// CUDA kernels of the reductions (sum, mean, prod, amax/amin, max/min, max.dim/min.dim,
// argmax/argmin, var/std, logsumexp, norm, all/any), dot, equal and allclose. The layout of a
// reduction is the CPU engine's (reduce::make_geometry, Note [Reduction geometry]); the loops are
// in reduce_kernels.cu (Note [Deterministic device reductions] in block_reduce.cuh). As on the
// CPU, 16-bit floats compute in float; float sums accumulate in float (double for float64) and
// integer sums in int64.
#include "loom/cuda.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_structured.h"
#include "ops/cuda/reduce_kernels.h"
#include "ops/op_call.h"
#include "ops/reduce_engine.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::ReduceOp;

struct ReduceCall {
  const char* name;  // "loom::sum", for launch errors
  ReduceOp op;
  int64_t correction = 1;
  cuda_ops::NormKind norm = cuda_ops::NormKind::L2;
  double p = 2;
};

void copy_dims(const DimVector& from, int64_t* to) {
  for (size_t i = 0; i < from.size(); ++i) to[i] = from[i];
}

// Reduces `in` (a CUDA tensor) over `mask` into out0 (and out1 for max.dim's indices), which are
// contiguous and shaped like the kept dims.
void run_reduce(const ReduceCall& call, const Tensor& in, const std::vector<bool>& mask,
                const Tensor& out0, const Tensor& out1 = Tensor()) {
  if (out0.numel() == 0) return;
  const bool indexed = call.op == ReduceOp::ArgMax || call.op == ReduceOp::ArgMin;
  const reduce::Geometry g = reduce::make_geometry(in, mask, /*logical_order=*/indexed);
  LOOM_CHECK(g.kept_sizes.size() <= static_cast<size_t>(cuda_ops::kMaxReduceDims) &&
                 g.red_sizes.size() <= static_cast<size_t>(cuda_ops::kMaxReduceDims),
             "[", call.name + 6, "] a reduction over an input of shape ", in.sizes(),
             " and strides ", in.strides(), " has more than ", cuda_ops::kMaxReduceDims,
             " dims that do not coalesce; make the input contiguous first");
  cuda_ops::ReduceArgs a;
  a.op = call.op;
  a.in_dtype = cuda_ops::code_of(in.dtype());
  a.in = static_cast<const char*>(in.data_ptr());
  a.out0 = static_cast<char*>(out0.data_ptr());
  a.out1 = out1.defined() ? static_cast<char*>(out1.data_ptr()) : nullptr;
  a.num_outputs = out0.numel();
  a.reduce_size = reduce::reduced_count(in.sizes(), mask);
  // Inner: the reduced elements of one output are contiguous; Outer: the outputs are (columns);
  // anything else runs the inner kernel with general offsets (no copy, unlike the CPU).
  a.outer = g.kind == reduce::Geometry::Kind::Outer;
  a.kept_ndim = static_cast<int>(g.kept_sizes.size());
  copy_dims(g.kept_sizes, a.kept_sizes);
  copy_dims(g.kept_in_strides, a.kept_in_strides);
  copy_dims(g.kept_out_strides, a.kept_out_strides);
  if (a.reduce_size > 0) {
    a.red_ndim = static_cast<int>(g.red_sizes.size());
    copy_dims(g.red_sizes, a.red_sizes);
    copy_dims(g.red_strides, a.red_strides);
  }
  a.correction = call.correction;
  a.norm = call.norm;
  a.p = call.p;
  const cuda_ops::ReducePlan plan = cuda_ops::plan_reduce(a);
  Tensor workspace;
  if (plan.workspace_bytes > 0) {
    workspace = empty_tensor({static_cast<int64_t>(plan.workspace_bytes)}, kUInt8, in.device());
  }
  cuda_ops::check_launch(
      cuda_ops::launch_reduce(a, plan, workspace.defined() ? workspace.data_ptr() : nullptr,
                              cuda_ops::stream_of(in)),
      call.name);
}

Tensor cast_to(const Tensor& t, std::optional<DType> dtype) {
  return dtype && *dtype != t.dtype() ? t.to(*dtype) : t;
}
// Where a loop that accumulates into `acc` writes for the result `out` (as on the CPU).
Tensor acc_target(const Tensor& out, DType acc) {
  return out.dtype() == acc ? out : empty_tensor(out.sizes(), acc, out.device());
}
void finish_acc(const Tensor& out, const Tensor& acc) {
  if (acc.impl() != out.impl()) out.copy_(acc);
}

void sum_like(const ReduceCall& call, const char* op, const Tensor& out, const Tensor& self,
              std::optional<IntArrayRef> dim, std::optional<DType> dtype) {
  auto mask = reduce::make_mask(op, self, dim);
  const Tensor in = cast_to(self, dtype);
  const Tensor acc = acc_target(out, reduce::sum_acc_dtype(in.dtype()));
  run_reduce(call, in, mask, acc);
  finish_acc(out, acc);
}

void sum_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
              std::optional<DType> dtype) {
  sum_like({"loom::sum", ReduceOp::Sum}, "sum", out, self, dim, dtype);
}
void mean_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
               std::optional<DType> dtype) {
  sum_like({"loom::mean", ReduceOp::Mean}, "mean", out, self, dim, dtype);
}
void prod_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool,
               std::optional<DType> dtype) {
  sum_like({"loom::prod", ReduceOp::Prod}, "prod", out, self, dim, dtype);
}

template <bool kMax>
void extreme(const char* op, const char* name, const Tensor& out, const Tensor& self,
             std::optional<IntArrayRef> dim) {
  run_reduce({name, kMax ? ReduceOp::Max : ReduceOp::Min}, self, reduce::make_mask(op, self, dim),
             out);
}
void amax_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  extreme<true>("amax", "loom::amax", out, self, dim);
}
void amin_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  extreme<false>("amin", "loom::amin", out, self, dim);
}
template <bool kMax>
void extreme_all_loop(const Tensor& out, const Tensor& self) {
  extreme<kMax>(kMax ? "max" : "min", kMax ? "loom::max" : "loom::min", out, self, std::nullopt);
}
template <bool kMax>
void extreme_dim_loop(const std::array<Tensor, 2>& outs, const Tensor& self, int64_t dim, bool) {
  const char* op = kMax ? "max" : "min";
  run_reduce({kMax ? "loom::max.dim" : "loom::min.dim", kMax ? ReduceOp::ArgMax : ReduceOp::ArgMin},
             self, reduce::make_mask_one(op, self, dim), outs[0], outs[1]);
}
template <bool kMax>
void arg_extreme_loop(const Tensor& out, const Tensor& self, std::optional<int64_t> dim, bool) {
  const char* op = kMax ? "argmax" : "argmin";
  const std::vector<bool> mask =
      dim ? reduce::make_mask_one(op, self, *dim) : reduce::make_mask(op, self, std::nullopt);
  run_reduce({kMax ? "loom::argmax" : "loom::argmin", kMax ? ReduceOp::ArgMax : ReduceOp::ArgMin},
             self, mask, out);
}
template <bool kStd>
void var_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim,
              int64_t correction, bool) {
  ReduceCall call{kStd ? "loom::std" : "loom::var", kStd ? ReduceOp::Std : ReduceOp::Var};
  call.correction = correction;
  run_reduce(call, self, reduce::make_mask(kStd ? "std" : "var", self, dim), out);
}
void logsumexp_loop(const Tensor& out, const Tensor& self, IntArrayRef dim, bool) {
  auto mask = reduce::make_mask("logsumexp", self, dim);
  const Tensor in = is_floating(self.dtype()) ? self : self.to(default_dtype());
  run_reduce({"loom::logsumexp", ReduceOp::LogSumExp}, in, mask, out);
}
void norm_loop(const Tensor& out, const Tensor& self, const Scalar& p,
               std::optional<IntArrayRef> dim, bool) {
  using cuda_ops::NormKind;
  const double pv = p.to<double>();
  ReduceCall call{"loom::norm", ReduceOp::Norm};
  call.p = pv;
  if (pv == 2.0) {
    call.norm = NormKind::L2;
  } else if (pv == 1.0) {
    call.norm = NormKind::L1;
  } else if (pv == 0.0) {
    call.norm = NormKind::L0;
  } else if (std::isinf(pv)) {
    call.norm = pv > 0 ? NormKind::Inf : NormKind::NegInf;
  } else {
    call.norm = NormKind::P;
  }
  run_reduce(call, self, reduce::make_mask("norm", self, dim), out);
}
template <bool kAll>
void all_any_loop(const Tensor& out, const Tensor& self, std::optional<IntArrayRef> dim, bool) {
  // The result is bool, or uint8 for uint8 inputs: one byte either way.
  run_reduce({kAll ? "loom::all" : "loom::any", kAll ? ReduceOp::All : ReduceOp::Any}, self,
             reduce::make_mask(kAll ? "all" : "any", self, dim), out);
}

void dot_loop(const Tensor& out, const Tensor& self, const Tensor& other) {
  const int64_t n = self.numel();
  const cuda_ops::ScalarCode dt = cuda_ops::code_of(self.dtype());
  const size_t bytes = cuda_ops::dot_workspace_bytes(dt, n);
  Tensor workspace;
  if (bytes > 0) workspace = empty_tensor({static_cast<int64_t>(bytes)}, kUInt8, self.device());
  cuda_ops::check_launch(
      cuda_ops::launch_dot(dt, static_cast<const char*>(self.data_ptr()), self.stride(0),
                           static_cast<const char*>(other.data_ptr()), other.stride(0), n,
                           static_cast<char*>(out.data_ptr()),
                           workspace.defined() ? workspace.data_ptr() : nullptr,
                           cuda_ops::stream_of(out)),
      "loom::dot");
}

// ---- equal / allclose: a device flag, read back (they return a C++ bool) ----

void check_pair(const char* op, const Tensor& self, const Tensor& other) {
  LOOM_CHECK_TYPE(self.dtype() == other.dtype(), "[", op,
                  "] expected both tensors to have the same dtype but got ", self.dtype(), " and ",
                  other.dtype());
  LOOM_CHECK(self.device() == other.device(), "[", op,
             "] expected both tensors on one device but got ", self.device(), " and ",
             other.device());
}

bool all_pairs(const char* op, const char* name, const Tensor& self, const Tensor& other,
               bool close, double rtol, double atol, bool equal_nan) {
  cuda_ops::KernelGuard guard(self);
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.inputs = {self, other};
  cfg.promote_inputs = false;
  cfg.compute_dtype = self.dtype();
  TensorIterator it(std::move(cfg));
  if (it.numel() == 0) return true;
  const cuda_ops::IterArgs a = cuda_ops::make_iter_args(it);
  cudaStream_t stream = cuda_ops::stream_of(self);
  Tensor flag = empty_tensor({1}, kInt32, self.device());
  LOOM_CUDA_CHECK(cudaMemsetAsync(flag.data_ptr(), 0, sizeof(int), stream), name);
  cuda_ops::check_launch(cuda_ops::launch_compare_all(a, close, rtol, atol, equal_nan,
                                                      static_cast<int*>(flag.data_ptr()), stream),
                         name);
  int mismatch = 0;
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(&mismatch, flag.data_ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream),
      name);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream), name);
  return mismatch == 0;
}

bool allclose_cuda(const Tensor& self, const Tensor& other, double rtol, double atol,
                   bool equal_nan) {
  check_pair("allclose", self, other);
  LOOM_CHECK(rtol >= 0, "[allclose] rtol must be greater than or equal to zero but got ", rtol);
  LOOM_CHECK(atol >= 0, "[allclose] atol must be greater than or equal to zero but got ", atol);
  return all_pairs("allclose", "loom::allclose", self, other, true, rtol, atol, equal_nan);
}

bool equal_cuda(const Tensor& self, const Tensor& other) {
  check_pair("equal", self, other);
  if (self.sizes() != other.sizes()) return false;
  if (self.is_same(other) && !is_floating(self.dtype())) return true;
  return all_pairs("equal", "loom::equal", self, other, false, 0, 0, false);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  using cuda_ops::CudaStructured;
  CudaStructured<&sum_shape, &sum_loop>::register_cuda(m, "sum");
  CudaStructured<&mean_shape, &mean_loop>::register_cuda(m, "mean");
  CudaStructured<&prod_shape, &prod_loop>::register_cuda(m, "prod");
  CudaStructured<&amax_shape, &amax_loop>::register_cuda(m, "amax");
  CudaStructured<&amin_shape, &amin_loop>::register_cuda(m, "amin");
  CudaStructured<&extreme_all_shape<true>, &extreme_all_loop<true>>::register_cuda(m, "max");
  CudaStructured<&extreme_all_shape<false>, &extreme_all_loop<false>>::register_cuda(m, "min");
  CudaStructured<&extreme_dim_shape<true>, &extreme_dim_loop<true>>::register_cuda(m, "max.dim");
  CudaStructured<&extreme_dim_shape<false>, &extreme_dim_loop<false>>::register_cuda(m, "min.dim");
  CudaStructured<&arg_extreme_shape<true>, &arg_extreme_loop<true>>::register_cuda(m, "argmax");
  CudaStructured<&arg_extreme_shape<false>, &arg_extreme_loop<false>>::register_cuda(m, "argmin");
  CudaStructured<&var_shape<false>, &var_loop<false>>::register_cuda(m, "var");
  CudaStructured<&var_shape<true>, &var_loop<true>>::register_cuda(m, "std");
  CudaStructured<&logsumexp_shape, &logsumexp_loop>::register_cuda(m, "logsumexp");
  CudaStructured<&norm_shape, &norm_loop>::register_cuda(m, "norm");
  CudaStructured<&all_any_shape<true>, &all_any_loop<true>>::register_cuda(m, "all");
  CudaStructured<&all_any_shape<false>, &all_any_loop<false>>::register_cuda(m, "any");
  CudaStructured<&dot_shape, &dot_loop>::register_cuda(m, "dot");
  m.impl("allclose", allclose_cuda);
  m.impl("equal", equal_cuda);
}

}  // namespace loom
