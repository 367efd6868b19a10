// Pointwise fusion for the inductor backend: the groups of a graph's steps and their kernels (the
// C++ and CUDA sources are generated in compiler/fusion_codegen.cpp, the kernels run in
// compiler/kernel_run.cpp).
//
// Note [Pointwise fusion]
//   A fusion group is a run of consecutive steps, each a pointwise operator this file can write as
//   an expression, over one iteration space: the same output sizes and dtype (float32 or float64),
//   on the CPU or a CUDA device; a group whose results require grad gets a backward kernel (Note
//   [Fused backward]), and a sum, mean or amax over the last dimension may end a group (Note
//   [Reduction fusion]). Taking only consecutive steps keeps the program order, so in-place
//   operators and views elsewhere in the graph need no alias analysis: the group runs where its
//   steps ran.
//
//   The iteration space is the output viewed as [rows, cols] with cols its last size. An operand
//   from outside the group is a 0-dim tensor (a scalar read on the host per call, so a mutated
//   parameter is seen), or a contiguous tensor that broadcasts to the output with one stride per
//   row (its rows collapse) and a column step of 1 or 0: same-shape tensors, biases [cols], row
//   scales [rows, 1]. Anything else ends the group. When every operand is same-shape or scalar, the
//   space is flattened to one row of numel columns, so the inner loop is long and vectorises.
//
//   Each node becomes one line `const T v7 = expr;` in a loop over columns; the values that leave
//   the group (read by a later step or returned) are stored, the rest stay in registers. The
//   float32 math is the eager kernels' own (the prelude is src/ops/unary_math.h), built with the
//   same -march=native and without FP contraction, so fused results match eager ones bit for bit.
//   A group of one node is left to its eager kernel: there is nothing to fuse.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "autograd/autograd_meta.h"
#include "compiler/codecache.h"
#include "compiler/cuda_codegen.h"
#include "compiler/fusion_codegen.h"
#include "compiler/graph.h"
#include "compiler/kernel_math.h"
#include "loom/autograd.h"
#include "loom/derivatives.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "loom/stream.h"

namespace loom::compiler {

namespace {

// How an operand from outside the group is read.
struct Operand {
  enum class Kind { Scalar, Tensor, Internal } kind = Kind::Internal;
  int index = 0;            // into the kernel's scalars or inputs
  int64_t row_stride = 0;   // Tensor: elements per row of the iteration space
  bool column_step = true;  // Tensor: false when it broadcasts along the columns
};

bool is_scalar_value(const Value& v) {
  return v.sizes.empty() && v.device == kCPU &&
         (v.dtype == kFloat32 || v.dtype == kFloat64 || v.dtype == kInt64 || v.dtype == kInt32 ||
          v.dtype == kBool);
}

// The row stride and column step of a contiguous `in` broadcast to `out` viewed as [rows, cols];
// false when its rows do not collapse to one stride.
bool broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                       int64_t* row_stride, bool* column_step) {
  if (in.size() > out.size() || out.empty()) return false;
  const size_t d = out.size(), pad = d - in.size();
  std::vector<int64_t> size(d, 1), stride(d, 0);
  int64_t s = 1;
  for (size_t k = d; k-- > pad;) {
    size[k] = in[k - pad];
    stride[k] = s;
    s *= size[k];
  }
  for (size_t k = 0; k < d; ++k) {
    if (size[k] == out[k]) continue;
    if (size[k] != 1) return false;
    stride[k] = 0;
  }
  for (size_t k = 0; k < d; ++k)
    if (size[k] == 1) stride[k] = 0;
  *column_step = out[d - 1] > 1 && stride[d - 1] == 1;
  if (out[d - 1] > 1 && stride[d - 1] > 1) return false;
  // Leading dims collapse to one row index: stride[k] == rs * prod(out[k+1 .. d-2]).
  int64_t rs = -1, inner = 1;
  for (size_t k = d - 1; k-- > 0;) {
    if (out[k] > 1) {
      if (rs < 0) {
        if (stride[k] % inner != 0) return false;
        rs = stride[k] / inner;
      }
      if (stride[k] != rs * inner) return false;
    }
    inner *= out[k];
  }
  *row_stride = rs < 0 ? 0 : rs;
  return true;
}

}  // namespace

// (compiler/graph.h)
bool kernel_layout(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& in,
                   int64_t* rows, int64_t* cols, std::vector<int64_t>* rs, std::vector<bool>* cs,
                   bool keep_rows) {
  int64_t numel = 1;
  for (int64_t s : out) numel *= s;
  *cols = out.back();
  *rows = *cols == 0 ? 0 : numel / *cols;
  rs->assign(in.size(), 0);
  cs->assign(in.size(), false);
  bool flat = true;
  for (size_t j = 0; j < in.size(); ++j) {
    bool step = false;
    if (!broadcast_strides(in[j], out, &(*rs)[j], &step)) return false;
    (*cs)[j] = step;
    flat = flat && (((*rs)[j] == *cols && step) || ((*rs)[j] == 0 && !step) || *rows == 1);
  }
  if (flat && *rows > 1 && !keep_rows) {
    rs->assign(in.size(), 0);
    *cols = numel;
    *rows = 1;
  }
  return true;
}

namespace {

class GroupBuilder {
 public:
  GroupBuilder(Graph& g, const std::vector<int64_t>& uses_after, bool autotune)
      : g_(g), uses_after_(uses_after), autotune_(autotune) {
    for (const Step& s : g_.steps) {
      if (s.kernel < 0 && g_.nodes[static_cast<size_t>(s.node)].op.schema().is_mutable()) {
        grad_refusal_ =
            "its result requires grad and the graph writes in place (a fused "
            "kernel's backward recomputes from its inputs, which a write could change)";
      }
    }
  }

  // Whether node k can join (or start) the group, and its line of code when it can.
  bool try_add(size_t k, std::string* why_not) {
    const Node& n = g_.nodes[k];
    if (n.returns.size() != 1 || n.returns[0].size() != 1) return false;
    if (reduce_ != 0) return try_add_epilogue(k);  // only per-row work follows a reduction
    if (try_add_reduction(k)) return true;
    const Value& out = g_.values[static_cast<size_t>(n.returns[0][0])];
    if ((out.dtype != kFloat32 && out.dtype != kFloat64) || !out.contiguous || out.sizes.empty())
      return false;
    if (out.device.type() != DeviceType::CPU) {
      if (out.device.type() != DeviceType::CUDA) return false;
      const std::string why = cuda_codegen_unavailable(out.device.index());
      if (!why.empty()) {
        *why_not = "no CUDA code generator: " + why;
        return false;
      }
    }
    // Autograd recorded this node (grad mode on and an operand requires grad): the kernel needs
    // a backward (Note [Fused backward]).
    if (out.requires_grad && !grad_refusal_.empty()) {
      *why_not = grad_refusal_;
      return false;
    }
    if (nodes_.empty()) {
      sizes_ = out.sizes;
      dtype_ = out.dtype;
      device_ = out.device;
    } else if (out.sizes != sizes_ || out.dtype != dtype_ || out.device != device_) {
      return false;
    }
    // Operands first, without committing, so that a refusal leaves the group as it was.
    std::vector<std::string> exprs, grads;  // per tensor operand: expression, accumulator
    std::vector<std::pair<ValueId, Operand>> fresh;
    for (const Arg& a : n.args) {
      if (a.kind == Arg::Kind::TensorList || a.kind == Arg::Kind::NoneTensor) return false;
      if (a.kind != Arg::Kind::Tensor) continue;
      const Value& v = g_.values[static_cast<size_t>(a.value)];
      auto it = operands_.find(a.value);
      Operand o;
      if (it != operands_.end()) {
        o = it->second;
      } else {
        for (const auto& [id, f] : fresh)
          if (id == a.value) o = f;
        bool seen = false;
        for (const auto& p : fresh) seen = seen || p.first == a.value;
        if (!seen) {
          if (is_scalar_value(v)) {
            o.kind = Operand::Kind::Scalar;
            o.index = static_cast<int>(scalars_.size() + count(fresh, Operand::Kind::Scalar));
          } else if (v.device == device_ && v.dtype == dtype_ && v.contiguous &&
                     broadcast_strides(v.sizes, sizes_, &o.row_stride, &o.column_step)) {
            o.kind = Operand::Kind::Tensor;
            o.index = static_cast<int>(inputs_.size() + count(fresh, Operand::Kind::Tensor));
          } else {
            return false;
          }
          fresh.emplace_back(a.value, o);
        }
      }
      exprs.push_back(expr_of(a.value, o));
      if (o.kind == Operand::Kind::Internal) {
        grads.push_back("g" + std::to_string(a.value));
      } else if (v.requires_grad && o.kind == Operand::Kind::Tensor) {
        grads.push_back("gi" + std::to_string(o.index));
      } else if (v.requires_grad && out.requires_grad) {
        *why_not = "a 0-dim operand requires grad";
        return false;
      } else {
        grads.emplace_back();
      }
    }
    const std::string e = pointwise_expr(n, exprs, dtype_);
    if (e.empty()) return false;
    std::string derivative;
    const ValueId r = n.returns[0][0];
    if (out.requires_grad && !derivative_code(n, exprs, grads, "v" + std::to_string(r),
                                              "g" + std::to_string(r), dtype_, &derivative)) {
      *why_not = "its result requires grad and " + n.op.name() + " has no fused derivative";
      return false;
    }
    for (const auto& [id, o] : fresh) {
      operands_[id] = o;
      if (o.kind == Operand::Kind::Scalar) scalars_.push_back(id);
      if (o.kind == Operand::Kind::Tensor) {
        inputs_.push_back(id);
        row_strides_.push_back(o.row_stride);
        column_steps_.push_back(o.column_step);
      }
    }
    Operand internal;
    internal.kind = Operand::Kind::Internal;
    operands_[r] = internal;
    grad_ = grad_ || out.requires_grad;
    derivatives_.push_back(std::move(derivative));
    body_ +=
        "      const " + std::string(ctype(dtype_)) + " v" + std::to_string(r) + " = " + e + ";\n";
    nodes_.push_back(k);
    std::string name = n.op.schema().op_name();
    ops_ += (ops_.empty() ? "" : ", ") + name;
    return true;
  }

  // Note [Reduction fusion]: a sum, mean or amax over the last dimension of a value of the group
  // (nothing requiring grad): the kernel keeps the rows of its iteration space and reduces each
  // while computing it, so the value reduced need not be written (unless used elsewhere). On the
  // CPU a row is a task's work and sums accumulate in double, as the eager kernels do, with 16
  // partial sums a row; on CUDA a warp or a block takes a row and float sums accumulate in float,
  // as the eager CUDA kernels do. Pointwise nodes over the reduced values and 0-dim operands (an
  // epilogue: `rsqrt(mean + eps)`, `sum * 0.5`) may follow, computed once a row from the row's
  // result; the reduced values read later are the kernel's last outputs.
  bool try_add_reduction(size_t k) {
    const Node& n = g_.nodes[k];
    const std::string op = n.op.schema().full_name();
    const int kind = op == "loom::sum" ? 1 : op == "loom::mean" ? 2 : op == "loom::amax" ? 3 : 0;
    if (kind == 0 || nodes_.empty() || grad_) return false;
    const ValueId r = n.returns[0][0];
    const Value& out = g_.values[static_cast<size_t>(r)];
    if (out.requires_grad || out.dtype != dtype_ || n.args.size() < 3) return false;
    const Arg& self = n.args[0];
    if (self.kind != Arg::Kind::Tensor) return false;
    auto it = operands_.find(self.value);
    if (it == operands_.end() || it->second.kind != Operand::Kind::Internal) return false;
    if (g_.values[static_cast<size_t>(self.value)].sizes != sizes_ || sizes_.back() < 1)
      return false;
    const Arg& dims = n.args[1];
    if (dims.kind != Arg::Kind::Constant || !dims.constant.is_int_list() || !dims.sym.empty())
      return false;
    const std::vector<int64_t>& d = dims.constant.to_int_list();
    const auto rank = static_cast<int64_t>(sizes_.size());
    if (d.size() != 1 || (d[0] != rank - 1 && d[0] != -1)) return false;
    if (n.args.size() > 3 &&
        !(n.args[3].kind == Arg::Kind::Constant && n.args[3].constant.is_none()))
      return false;  // a dtype
    reduce_ = kind;
    reduce_in_ = self.value;
    reduce_out_ = r;
    reduced_sizes_ = out.sizes;
    epilogue_values_ = {r};
    nodes_.push_back(k);
    ops_ += ", " + n.op.schema().op_name();
    return true;
  }

  // Note [Reduction fusion]: a pointwise node over the reduced values (and 0-dim operands) after
  // the reduction; its line runs once a row.
  bool try_add_epilogue(size_t k) {
    const Node& n = g_.nodes[k];
    const ValueId r = n.returns[0][0];
    const Value& out = g_.values[static_cast<size_t>(r)];
    if (out.sizes != reduced_sizes_ || out.dtype != dtype_ || !out.contiguous ||
        out.requires_grad || out.device != device_)
      return false;
    std::vector<std::string> exprs;
    std::vector<ValueId> fresh;  // 0-dim operands new to the kernel
    for (const Arg& a : n.args) {
      if (a.kind == Arg::Kind::TensorList || a.kind == Arg::Kind::NoneTensor) return false;
      if (a.kind != Arg::Kind::Tensor) continue;
      if (epilogue_values_.count(a.value) != 0) {
        exprs.push_back("v" + std::to_string(a.value));
        continue;
      }
      auto it = operands_.find(a.value);
      if (it != operands_.end() && it->second.kind == Operand::Kind::Scalar) {
        exprs.push_back(expr_of(a.value, it->second));
        continue;
      }
      if (it != operands_.end() || !is_scalar_value(g_.values[static_cast<size_t>(a.value)]))
        return false;  // a full-size value, or a tensor the epilogue cannot index per row
      auto at = static_cast<size_t>(std::find(fresh.begin(), fresh.end(), a.value) - fresh.begin());
      if (at == fresh.size()) fresh.push_back(a.value);
      exprs.push_back("s" + std::to_string(scalars_.size() + at));
    }
    const std::string e = pointwise_expr(n, exprs, dtype_);
    if (e.empty()) return false;
    for (ValueId id : fresh) {
      Operand o;
      o.kind = Operand::Kind::Scalar;
      o.index = static_cast<int>(scalars_.size());
      operands_[id] = o;
      scalars_.push_back(id);
    }
    epilogue_ +=
        "    const " + std::string(ctype(dtype_)) + " v" + std::to_string(r) + " = " + e + ";\n";
    epilogue_values_.insert(r);
    nodes_.push_back(k);
    ops_ += ", " + n.op.schema().op_name();
    return true;
  }

  size_t size() const { return nodes_.size(); }
  const std::vector<size_t>& nodes() const { return nodes_; }

  // The kernel for the group, its source generated and built, and when a result requires grad
  // its backward kernel too.
  FusedKernel finish(int number, size_t last_step) {
    FusedKernel f;
    f.name = "fused_" + std::to_string(number);
    f.ops = ops_;
    f.inputs = inputs_;
    f.scalars = scalars_;
    std::vector<ValueId> reduced;  // read later, of the reduced sizes: the last outputs
    for (size_t k : nodes_) {
      const ValueId r = g_.nodes[k].returns[0][0];
      if (uses_after_[static_cast<size_t>(r)] <= static_cast<int64_t>(last_step)) continue;
      if (epilogue_values_.count(r) != 0) {
        reduced.push_back(r);
        continue;
      }
      f.outputs.push_back(r);
      f.output_requires_grad.push_back(g_.values[static_cast<size_t>(r)].requires_grad);
    }
    if (reduce_ != 0 && reduced.empty()) reduced.push_back(reduce_out_);
    for (ValueId r : reduced) {
      f.outputs.push_back(r);
      f.output_requires_grad.push_back(false);
    }
    f.reduced_outputs = static_cast<int>(reduced.size());
    std::vector<std::vector<int64_t>> in_sizes;
    for (ValueId id : inputs_) in_sizes.push_back(g_.values[static_cast<size_t>(id)].sizes);
    build(f, in_sizes);
    if (grad_) f.backward = std::make_shared<FusedKernel>(backward_of(f, in_sizes));
    return f;
  }

 private:
  // Lays out the iteration space of `f` (its operands of `in_sizes`), generates its source from
  // the group's state and builds it.
  void build(FusedKernel& f, const std::vector<std::vector<int64_t>>& in_sizes) {
    if (autotune_) f.tuning = FusedKernel::new_tuning();
    f.dtype = dtype_;
    f.out_sizes = sizes_;
    std::vector<bool> steps;
    f.reduce = reduce_;
    f.reduced_sizes = reduced_sizes_;
    if (reduce_ != 0) f.reduced_sym_sizes = g_.values[static_cast<size_t>(reduce_out_)].sym_sizes;
    LOOM_INTERNAL_ASSERT(
        kernel_layout(sizes_, in_sizes, &f.rows, &f.cols, &f.row_strides, &steps, reduce_ != 0),
        "[compile] ", f.name, ": operands do not broadcast as when grouped");
    f.column_steps = steps;
    const ValueId first = g_.nodes[nodes_.front()].returns[0][0];
    f.out_sym_sizes = g_.values[static_cast<size_t>(first)].sym_sizes;
    f.device = device_;
    if (device_.type() == DeviceType::CUDA) {
      f.source = reduce_ != 0 ? fusion_detail::cuda_reduce_source(f, code())
                              : fusion_detail::cuda_source(f, code());
      const CudaModule m = build_cuda_module(f.source, device_.index());
      f.cuda_kernel = m.kernel;
      f.cuda_kernel_vec4 = m.kernel_vec4;
      f.cuda_multiprocessors = m.multiprocessors;
      f.library_path = m.path;
      f.cache_hit = m.cache_hit;
      f.build_ms = m.build_ms;
      return;
    }
    f.source = reduce_ != 0 ? fusion_detail::cpu_reduce_source(f, code())
                            : fusion_detail::cpu_source(f, code());
    SharedObject so = build_shared_object(f.source);
    f.fn = reinterpret_cast<FusedKernel::Fn>(find_symbol(so, "loom_kernel"));
    f.library = so.handle;
    f.library_path = so.path;
    f.cache_hit = so.cache_hit;
    f.build_ms = so.build_ms;
  }

  // Note [Fused backward]: one kernel over the forward's operands and the gradients of its
  // outputs (full size) that recomputes the group's values, sweeps its nodes in reverse adding
  // each one's contribution to its operands' gradients, and writes the gradient of each operand
  // that requires grad at the full size of the iteration space (the caller sums a broadcast
  // operand's down to its own sizes).
  FusedKernel backward_of(const FusedKernel& f, std::vector<std::vector<int64_t>> in_sizes) {
    const std::string T = ctype(dtype_);
    constexpr ValueId kGradOut = 1 << 30;  // names of the gradients it writes: v<kGradOut + i>
    FusedKernel b;
    b.name = f.name + "_backward";
    b.ops = "backward of " + ops_;
    b.scalars = scalars_;
    std::string sweep;
    for (size_t k : nodes_)
      sweep +=
          "      " + T + " g" + std::to_string(g_.nodes[k].returns[0][0]) + " = " + T + "(0);\n";
    for (size_t j = 0; j < inputs_.size(); ++j) {
      if (!g_.values[static_cast<size_t>(inputs_[j])].requires_grad) continue;
      sweep += "      " + T + " gi" + std::to_string(j) + " = " + T + "(0);\n";
      b.grad_inputs.push_back(static_cast<int>(j));
    }
    std::vector<ValueId> in = inputs_;
    for (size_t k = 0; k < f.outputs.size(); ++k) {
      sweep += "      g" + std::to_string(f.outputs[k]) + " += in" +
               std::to_string(inputs_.size() + k) + ";\n";
      in.push_back(kGradOut - 1 - static_cast<ValueId>(k));
      in_sizes.push_back(sizes_);
    }
    for (size_t m = nodes_.size(); m-- > 0;) sweep += derivatives_[m];
    // Which inputs each value depends on, through the group's nodes.
    std::map<ValueId, std::vector<bool>> deps;
    for (size_t j = 0; j < inputs_.size(); ++j) {
      std::vector<bool> d(inputs_.size(), false);
      d[j] = true;
      deps[inputs_[j]] = d;
    }
    for (size_t k : nodes_) {
      std::vector<bool> d(inputs_.size(), false);
      for (const Arg& a : g_.nodes[k].args) {
        if (a.kind != Arg::Kind::Tensor) continue;
        auto it = deps.find(a.value);
        if (it == deps.end()) continue;  // a scalar
        for (size_t j = 0; j < d.size(); ++j) d[j] = d[j] || it->second[j];
      }
      deps[g_.nodes[k].returns[0][0]] = d;
    }
    for (ValueId out : f.outputs) {
      std::vector<bool> d;
      for (int j : b.grad_inputs) d.push_back(deps[out][static_cast<size_t>(j)]);
      b.depends.push_back(d);
    }
    for (size_t i = 0; i < b.grad_inputs.size(); ++i) {
      b.outputs.push_back(kGradOut + static_cast<ValueId>(i));
      sweep += "      const " + T + " v" + std::to_string(kGradOut + i) + " = gi" +
               std::to_string(b.grad_inputs[i]) + ";\n";
    }
    b.inputs = in;
    // The generators read the group's state: lend them the backward's for the build.
    std::vector<int64_t> rs;
    std::vector<bool> steps;
    int64_t rows = 0, cols = 0;
    kernel_layout(sizes_, in_sizes, &rows, &cols, &rs, &steps);
    std::swap(inputs_, in);
    std::swap(column_steps_, steps);
    const std::string forward_body = body_;
    body_ += sweep;
    build(b, in_sizes);
    body_ = forward_body;
    std::swap(inputs_, in);
    std::swap(column_steps_, steps);
    return b;
  }

 private:
  static size_t count(const std::vector<std::pair<ValueId, Operand>>& v, Operand::Kind k) {
    size_t n = 0;
    for (const auto& p : v) n += p.second.kind == k;
    return n;
  }

  std::string expr_of(ValueId id, const Operand& o) const {
    switch (o.kind) {
      case Operand::Kind::Scalar:
        return "s" + std::to_string(o.index);
      case Operand::Kind::Tensor:
        return "in" + std::to_string(o.index);
      case Operand::Kind::Internal:
        break;
    }
    return "v" + std::to_string(id);
  }

  // The group's state as the source generators read it (compiler/fusion_codegen.h).
  fusion_detail::GroupCode code() const {
    return {.dtype = dtype_,
            .num_inputs = inputs_.size(),
            .num_scalars = scalars_.size(),
            .column_steps = column_steps_,
            .body = body_,
            .reduce = reduce_,
            .reduce_in = reduce_in_,
            .reduce_out = reduce_out_,
            .epilogue = epilogue_};
  }

  Graph& g_;
  const std::vector<int64_t>& uses_after_;
  bool autotune_ = false;
  std::vector<size_t> nodes_;
  std::vector<int64_t> sizes_;
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  std::map<ValueId, Operand> operands_;
  std::vector<ValueId> inputs_, scalars_;
  std::vector<int64_t> row_strides_;
  std::vector<bool> column_steps_;
  std::string body_, ops_;
  int reduce_ = 0;  // Note [Reduction fusion]: 0, or 1 sum, 2 mean, 3 amax
  ValueId reduce_in_ = -1, reduce_out_ = -1;
  std::vector<int64_t> reduced_sizes_;
  std::set<ValueId> epilogue_values_;     // the reduction's result and the epilogue's values
  std::string epilogue_;                  // the epilogue's lines, once a row
  bool grad_ = false;                     // some result requires grad: a backward kernel is built
  std::vector<std::string> derivatives_;  // per node: its part of the reverse sweep
  std::string grad_refusal_;              // why results that require grad cannot be fused here
};

}  // namespace

// Forms the groups over the graph's steps and replaces each (of two nodes or more) by its kernel.
void fuse_pointwise(Graph& g, bool autotune) {
  // The last step that reads each value (outputs count as read after the end).
  std::vector<int64_t> uses_after(g.values.size(), -1);
  for (size_t k = 0; k < g.steps.size(); ++k)
    for (ValueId id : g.step_reads(g.steps[k]))
      uses_after[static_cast<size_t>(id)] = static_cast<int64_t>(k);
  for (ValueId id : g.outputs) uses_after[static_cast<size_t>(id)] = INT64_MAX;

  std::vector<Step> steps;
  int fused_nodes = 0, kernels_built = 0, hits = 0, backwards = 0;
  double build_ms = 0;
  std::string grad_note;
  size_t k = 0;
  while (k < g.steps.size()) {
    if (g.steps[k].kernel >= 0) {
      steps.push_back(g.steps[k++]);
      continue;
    }
    GroupBuilder b(g, uses_after, autotune);
    size_t j = k;
    std::string why;
    while (j < g.steps.size() && g.steps[j].kernel < 0 &&
           b.try_add(static_cast<size_t>(g.steps[j].node), &why))
      ++j;
    if (!why.empty() && grad_note.empty()) {
      grad_note =
          "fusion: " + std::string(g.nodes[static_cast<size_t>(g.steps[j].node)].op.name()) +
          " not fused: " + why;
    }
    if (b.size() >= 2) {
      FusedKernel f = b.finish(static_cast<int>(g.kernels.size()), j - 1);
      fused_nodes += static_cast<int>(b.size());
      ++kernels_built;
      hits += f.cache_hit;
      build_ms += f.build_ms;
      if (f.backward) {
        ++backwards;
        build_ms += f.backward->build_ms;
      }
      g.kernels.push_back(std::move(f));
      steps.push_back(Step{-1, static_cast<int32_t>(g.kernels.size() - 1)});
      k = j;
    } else {
      steps.push_back(g.steps[k++]);
    }
  }
  g.steps = std::move(steps);
  if (kernels_built > 0) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "fusion: %d nodes into %d kernel(s) (%d with a backward kernel); %d from the "
                  "kernel cache, %.0f ms compiling",
                  fused_nodes, kernels_built, backwards, hits, build_ms);
    g.pass_log.push_back(line);
  } else {
    g.pass_log.push_back("fusion: no run of two or more fusible pointwise nodes");
  }
  if (!grad_note.empty()) g.pass_log.push_back(grad_note);
}

}  // namespace loom::compiler
