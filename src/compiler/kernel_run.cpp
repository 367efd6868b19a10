// Running generated kernels (compiler layer): FusedKernel::run on the CPU (split over loom's
// pool) and on CUDA (launched on the current stream), the autograd node of a fused kernel's run
// (Note [Fused backward] in compiler/fusion.cpp), and launch-configuration autotuning.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/autograd_meta.h"
#include "compiler/cuda_codegen.h"
#include "compiler/graph.h"
#include "loom/autograd.h"
#include "loom/derivatives.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "loom/stream.h"

namespace loom::compiler {

// Note [Autotuning]: in mode max-autotune a generated kernel's first run times its launch
// configurations on the operands of that run (each candidate three times, the median kept) and
// uses the fastest from then on: on the CPU the grain of the pool's split (elements a task, rows
// for a reduction), on CUDA threads a block and blocks per multiprocessor. The choice and every
// timing are in the report. The kernel is pure, so the extra runs only rewrite its outputs.
struct FusedKernel::Tuning {
  std::once_flag once;
  int64_t grain = 8192;
  int threads = 256, blocks_per_sm = 16;
  int rows_tpr = 32;  // a CUDA reduction: threads a row
  std::string log;
};

std::shared_ptr<FusedKernel::Tuning> FusedKernel::new_tuning() {
  return std::make_shared<Tuning>();
}

std::string FusedKernel::tuning_log() const {
  return tuning ? tuning->log : "";
}

namespace {

// Times `run` with each candidate (the median of three) and returns the fastest's index; `log`
// gets "<chosen>: 0.41 ms (<other>: 0.45 ms, ...)".
size_t pick_fastest(const std::vector<std::string>& names, const std::function<void(size_t)>& run,
                    std::string* log) {
  std::vector<double> ms(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    double t[3];
    for (double& x : t) {
      const auto t0 = std::chrono::steady_clock::now();
      run(i);
      x = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    std::sort(t, t + 3);
    ms[i] = t[1];
  }
  const size_t best = static_cast<size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
  char b[64];
  std::snprintf(b, sizeof(b), ": %.3g ms (", ms[best]);
  *log = names[best] + b;
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i == best) continue;
    std::snprintf(b, sizeof(b), ": %.3g ms", ms[i]);
    *log += (first ? "" : ", ") + names[i] + b;
    first = false;
  }
  *log += ")";
  return best;
}

double scalar_value(const Tensor& t) {
  const void* p = t.data_ptr();
  switch (t.dtype()) {
    case kFloat32:
      return *static_cast<const float*>(p);
    case kFloat64:
      return *static_cast<const double*>(p);
    case kInt64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case kInt32:
      return *static_cast<const int32_t*>(p);
    case kBool:
      return *static_cast<const bool*>(p) ? 1.0 : 0.0;
    default:
      break;
  }
  LOOM_THROW(InternalError, "[compile] a fused kernel's scalar operand has dtype ",
             dtype_name(t.dtype()));
}

}  // namespace

void append_grads(std::vector<Tensor>& in, const std::vector<Tensor>& grads,
                  const autograd::Node& node) {
  for (size_t k = 0; k < grads.size(); ++k) {
    const autograd::Node::InputMeta& m = node.input_meta()[k];
    const Tensor& g = grads[k];
    in.push_back(g.defined() ? g.to(m.dtype).contiguous()
                             : zeros(m.sizes.ref(), TensorOptions(m.dtype).with_device(m.device)));
  }
}

namespace {

// The autograd node of a fused kernel's run (Note [Fused backward]): it holds the run's inputs,
// checks that they were not written in place since, and runs the backward kernel.
class FusedBackward : public autograd::Node {
 public:
  FusedBackward(std::shared_ptr<const FusedKernel> kernel, std::string forward_name,
                std::vector<Tensor> inputs, std::vector<Tensor> scalars,
                std::vector<int64_t> symbols)
      : kernel_(std::move(kernel)),
        forward_name_(std::move(forward_name)),
        inputs_(std::move(inputs)),
        scalars_(std::move(scalars)),
        symbols_(std::move(symbols)) {
    for (const Tensor& t : inputs_) versions_.push_back(t.version());
  }

  std::string name() const override { return "FusedBackward"; }
  std::string forward_op() const override { return forward_name_; }
  void release_variables() override {
    inputs_.clear();
    scalars_.clear();
    released_ = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    LOOM_CHECK(!released_,
               "[autograd] trying to backward through the graph a second time: the "
               "inputs saved by compiled kernel ",
               forward_name_,
               " were freed by the first backward. Pass retain_graph=true to the first backward");
    for (size_t j = 0; j < inputs_.size(); ++j) {
      LOOM_CHECK(inputs_[j].version() == versions_[j],
                 "[autograd] one of the tensors needed for gradient computation has been "
                 "modified by an in-place operation: input ",
                 j, " of compiled kernel ", forward_name_, " (shape ", inputs_[j].shape_str(),
                 ") is at version ", inputs_[j].version(), "; expected version ", versions_[j]);
    }
    for (const Tensor& g : grads) {
      LOOM_CHECK_AS(NotImplementedError, !g.defined() || !g.requires_grad(),
                    "[compile] compiled kernel ", forward_name_,
                    " has no double backward (create_graph); compile with backend eager to "
                    "differentiate twice");
    }
    std::vector<Tensor> in = inputs_;
    append_grads(in, grads, *this);
    std::vector<Tensor> out = kernel_->run(in, scalars_, symbols_);
    std::vector<Tensor> result(next_edges_.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const auto j = static_cast<size_t>(kernel_->grad_inputs[i]);
      if (j >= result.size() || !next_edges_[j].valid()) continue;
      bool reached = false;
      for (size_t k = 0; k < grads.size(); ++k)
        reached = reached || (grads[k].defined() && kernel_->depends[k][i]);
      if (!reached) continue;
      const IntArrayRef want = inputs_[j].sizes();
      result[j] = out[i].sizes() == want ? out[i] : autograd::sum_to(out[i], want);
    }
    return result;
  }

 private:
  std::shared_ptr<const FusedKernel> kernel_;
  std::string forward_name_;
  std::vector<Tensor> inputs_, scalars_;
  std::vector<int64_t> symbols_;
  std::vector<uint32_t> versions_;
  bool released_ = false;
};

}  // namespace

bool FusedKernel::records_backward(const std::vector<Tensor>& in) const {
  if (!backward || !autograd::GradMode::is_enabled()) return false;
  for (const Tensor& t : in)
    if (t.requires_grad()) return true;
  return false;
}

void FusedKernel::record_backward(const std::vector<Tensor>& in,
                                  const std::vector<Tensor>& scalar_in,
                                  const std::vector<int64_t>& symbols,
                                  std::vector<Tensor>& out) const {
  if (!records_backward(in)) return;
  auto node =
      std::make_shared<FusedBackward>(backward, name + " (" + ops + ")", in, scalar_in, symbols);
  for (const Tensor& t : in)
    node->mutable_next_edges().push_back(t.requires_grad() ? autograd::gradient_edge(t)
                                                           : autograd::Edge());
  for (size_t k = 0; k < out.size(); ++k) {
    node->add_input_meta(out[k]);
    if (output_requires_grad[k]) autograd::set_history(out[k], node, static_cast<uint32_t>(k));
  }
}

std::vector<Tensor> FusedKernel::run_cuda(const std::vector<Tensor>& in,
                                          const std::vector<Tensor>& scalar_in,
                                          const std::vector<int64_t>& sizes,
                                          const std::vector<int64_t>& reduced_now, int64_t rows_now,
                                          int64_t cols_now, const std::vector<int64_t>& rs,
                                          const std::vector<Tensor>* preset) const {
  const int64_t total = rows_now * cols_now;
  std::vector<Tensor> out;
  std::vector<void*> ptrs;
  bool aligned = true;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (preset != nullptr && (*preset)[k].defined()) {
      out.push_back((*preset)[k]);
    } else {
      out.push_back(empty(is_reduced_output(k) ? reduced_now : sizes,
                          TensorOptions(dtype).with_device(device)));
    }
    ptrs.push_back(out.back().data_ptr());
  }
  for (size_t j = 0; j < in.size(); ++j) {
    ptrs.push_back(in[j].data_ptr());
    if (column_steps[j]) aligned = aligned && reinterpret_cast<uintptr_t>(ptrs.back()) % 16 == 0;
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    aligned = aligned && reinterpret_cast<uintptr_t>(ptrs[k]) % 16 == 0;
  if (total == 0) return out;
  std::vector<double> sv;
  for (const Tensor& t : scalar_in) sv.push_back(scalar_value(t));
  std::vector<long long> rsv(rs.begin(), rs.end());
  long long c = cols_now, n = reduce != 0 ? rows_now : total, tpr = 0;
  std::vector<void*> args;
  for (void*& p : ptrs) args.push_back(&p);
  for (double& d : sv) args.push_back(&d);
  for (long long& r : rsv) args.push_back(&r);
  args.push_back(&c);
  args.push_back(&n);
  if (reduce != 0) {
    // Note [Reduction fusion] on CUDA: a warp a row for short rows, else a block a row.
    args.push_back(&tpr);
    auto launch_rows = [&](int threads, int per_sm) {
      const int64_t per_block = threads / tpr;
      const int64_t blocks = std::min<int64_t>((rows_now + per_block - 1) / per_block,
                                               int64_t{std::max(cuda_multiprocessors, 1)} * per_sm);
      launch_cuda_kernel(cuda_kernel, blocks, threads, args.data(), device.index());
    };
    if (tuning) {
      std::call_once(tuning->once, [&] {
        const std::vector<std::pair<int, int>> configs = {
            {32, 256}, {128, 128}, {256, 256}, {512, 512}, {1024, 1024}};
        std::vector<std::string> names;
        for (const auto& [t, b] : configs)
          names.push_back(std::to_string(t) + " threads a row, " + std::to_string(b) +
                          " threads, 8 blocks/SM");
        const Stream stream = current_stream(device);
        const size_t best = pick_fastest(
            names,
            [&](size_t i) {
              tpr = configs[i].first;
              launch_rows(configs[i].second, 8);
              stream.synchronize();
            },
            &tuning->log);
        tuning->rows_tpr = configs[best].first;
        tuning->threads = configs[best].second;
      });
    }
    if (rows_now == 0) return out;
    tpr = tuning ? tuning->rows_tpr : (cols_now <= 512 ? 32 : 256);
    launch_rows(tuning ? tuning->threads : 256, 8);
    return out;
  }
  const bool vec4 = cuda_kernel_vec4 != nullptr && cols_now == total && aligned;
  const int64_t work = vec4 ? (total + 3) / 4 : total;
  auto launch = [&](int threads, int per_sm) {
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads,
                                             int64_t{std::max(cuda_multiprocessors, 1)} * per_sm);
    launch_cuda_kernel(vec4 ? cuda_kernel_vec4 : cuda_kernel, blocks, threads, args.data(),
                       device.index());
  };
  if (tuning) {
    std::call_once(tuning->once, [&] {
      const std::vector<std::pair<int, int>> configs = {{128, 16}, {256, 8}, {256, 16},
                                                        {256, 32}, {512, 8}, {512, 16}};
      std::vector<std::string> names;
      for (const auto& [t, b] : configs)
        names.push_back(std::to_string(t) + " threads, " + std::to_string(b) + " blocks/SM");
      const Stream stream = current_stream(device);
      const size_t best = pick_fastest(
          names,
          [&](size_t i) {
            launch(configs[i].first, configs[i].second);
            stream.synchronize();
          },
          &tuning->log);
      tuning->threads = configs[best].first;
      tuning->blocks_per_sm = configs[best].second;
    });
  }
  launch(tuning ? tuning->threads : 256, tuning ? tuning->blocks_per_sm : 16);
  return out;
}

std::vector<Tensor> FusedKernel::run(const std::vector<Tensor>& in,
                                     const std::vector<Tensor>& scalar_in,
                                     const std::vector<int64_t>& symbols,
                                     const std::vector<Tensor>* preset) const {
  std::vector<Tensor> out = compute(in, scalar_in, symbols, preset);
  record_backward(in, scalar_in, symbols, out);
  return out;
}

std::vector<Tensor> FusedKernel::compute(const std::vector<Tensor>& in,
                                         const std::vector<Tensor>& scalar_in,
                                         const std::vector<int64_t>& symbols,
                                         const std::vector<Tensor>* preset) const {
  // A dynamic graph's kernel: this call's sizes, and its operands' strides for them.
  std::vector<int64_t> sizes_now;
  int64_t rows_now = rows, cols_now = cols;
  std::vector<int64_t> rs_now;
  const bool dynamic = !out_sym_sizes.empty() && !symbols.empty();
  if (dynamic) {
    for (const SymExpr& e : out_sym_sizes) sizes_now.push_back(e.eval(symbols));
    std::vector<std::vector<int64_t>> in_sizes;
    for (const Tensor& t : in) in_sizes.push_back(t.sizes().vec());
    std::vector<bool> steps;
    LOOM_INTERNAL_ASSERT(
        kernel_layout(sizes_now, in_sizes, &rows_now, &cols_now, &rs_now, &steps, reduce != 0) &&
            steps == column_steps,
        "[compile] ", name, ": the operands no longer broadcast as the kernel was written for");
  }
  const std::vector<int64_t>& osizes = dynamic ? sizes_now : out_sizes;
  std::vector<int64_t> reduced_now = reduced_sizes;
  if (dynamic && reduce != 0) {
    reduced_now.clear();
    for (const SymExpr& e : reduced_sym_sizes) reduced_now.push_back(e.eval(symbols));
  }
  if (device.type() == DeviceType::CUDA)
    return run_cuda(in, scalar_in, osizes, reduced_now, rows_now, cols_now,
                    dynamic ? rs_now : row_strides, preset);
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  std::vector<char*> data;
  data.reserve(outputs.size() + in.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const bool reduced = is_reduced_output(k);
    if (preset != nullptr && (*preset)[k].defined()) {
      out.push_back((*preset)[k]);
    } else {
      out.push_back(empty_tensor(reduced ? reduced_now : osizes, dtype, kCPU));
    }
    data.push_back(static_cast<char*>(out.back().data_ptr()));
  }
  for (const Tensor& t : in) data.push_back(static_cast<char*>(t.data_ptr()));
  double s[16];
  std::vector<double> more;
  double* sp = s;
  if (scalar_in.size() > 16) {
    more.resize(scalar_in.size());
    sp = more.data();
  }
  for (size_t i = 0; i < scalar_in.size(); ++i) sp[i] = scalar_value(scalar_in[i]);
  const int64_t total = rows_now * cols_now;
  if (total == 0) return out;
  char* const* d = data.data();
  const int64_t* rs = dynamic ? rs_now.data() : row_strides.data();
  const int64_t c = cols_now;
  Fn f = fn;
  // About 32 KiB of float32 output a task: enough to hide the pool's wake-up. A reduction's
  // kernel takes rows.
  const int64_t n = reduce != 0 ? rows_now : total;
  auto launch = [&](int64_t grain) {
    if (reduce != 0) grain = std::max<int64_t>(1, grain / std::max<int64_t>(c, 1));
    parallel_for(0, n, grain, [&](int64_t b, int64_t e) { f(d, sp, rs, c, b, e); });
  };
  if (tuning) {
    std::call_once(tuning->once, [&] {
      const int64_t threads = std::max(1, get_num_threads());
      std::vector<int64_t> grains = {2048, 8192, 32768, std::max<int64_t>(total / threads, 1)};
      std::sort(grains.begin(), grains.end());
      grains.erase(std::unique(grains.begin(), grains.end()), grains.end());
      std::vector<std::string> names;
      for (int64_t g : grains) names.push_back("grain " + std::to_string(g));
      tuning->grain = grains[pick_fastest(
          names, [&](size_t i) { launch(grains[i]); }, &tuning->log)];
    });
  }
  launch(tuning ? tuning->grain : 8192);
  return out;
}

}  // namespace loom::compiler
