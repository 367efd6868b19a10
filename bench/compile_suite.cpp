// `loom bench compile`: loom::compile against eager loom in the same run. Rows come in pairs, the
// same function run eagerly and compiled, and a ratio row per pair; torch.compile's figures on the
// H200 machine (issue 19's anchors) are in docs/benchmarks.md beside them.
//
// Note [compile suite]
//   The function is a chain of 7 pointwise operators (mul, add, sigmoid, mul, neg, exp, add) over
//   one float32 input: on a 16-element input its time is the per-call overhead (guards, replay,
//   dispatch), on 16M elements with 2 threads its effective bandwidth (input + output bytes over
//   the time). row_sum_16m is sum(sigmoid(2x + b)^2, dim -1) over [4096, 4096] on 2 threads,
//   bytes = x read once (a pointwise prologue fused into a row reduction, Note [Reduction fusion]).
//   guard_16_inputs is a compiled function of 16 inputs that records no operator: its
//   call is the guard check plus the smallest replay. dynamic_40_lengths counts the graphs
//   captured for 40 sequence lengths ([8, L, 64], L = 16 .. 55) with dynamic=auto, and
//   dynamic_40_lengths_time the seconds those 40 first calls took (compiles included).
//   cold_first_call is a new function's first call with an empty kernel cache (capture, passes,
//   the C++ compiler); warm_cache_first_call the same with the kernel built on disk by another
//   function but not loaded in this process (what a new process's first call costs).
//   The GPU rows (skipped without a GPU) run the chain over 256M float32 on CUDA device 0, eager
//   and compiled (one NVRTC kernel), against a copy in the same round.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom::bench {
namespace {

using Tensors = std::vector<Tensor>;

Tensors chain(const Tensors& in) {
  const Tensor& x = in[0];
  const Tensor a = sigmoid(add(mul(x, 1.5), 0.5));
  return {add(exp(neg(mul(a, x))), x)};
}

// A row reduction after a pointwise prologue: sum(sigmoid(2x + b)^2, dim -1) (Note [Reduction
// fusion] makes it one pass over x).
Tensors row_sum(const Tensors& in) {
  const Tensor y = sigmoid(add(mul(in[0], 2.0), in[1]));
  return {sum(mul(y, y), IntArrayRef{-1})};
}

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A kernel cache folder of its own while it lives (LOOM_CACHE_DIR), empty or a copy of another.
struct TempCacheDir {
  std::string path;
  explicit TempCacheDir(const std::string& copy_of = "") {
    std::string tmpl = (std::filesystem::temp_directory_path() / "loom-bench-XXXXXX").string();
    LOOM_CHECK(::mkdtemp(tmpl.data()) != nullptr, "[bench compile] mkdtemp failed");
    path = tmpl;
    if (!copy_of.empty()) {
      std::filesystem::copy(copy_of, path,
                            std::filesystem::copy_options::recursive |
                                std::filesystem::copy_options::overwrite_existing);
    }
    config::set("LOOM_CACHE_DIR", path);
  }
  ~TempCacheDir() {
    config::set("LOOM_CACHE_DIR", "");
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

struct CompileState {
  Tensor tiny, big, rows, bias;
  CompiledFunction row_sum_fn = compile(row_sum, {.name = "bench row sum (16M)"});
  Tensor gpu_x, gpu_out, gpu_tiny, gpu_tiny2;
  int64_t gpu_calls = 0;
  CompiledFunction gpu_fn = compile(chain, {.name = "bench chain (GPU, 256M)"});
  CompiledFunction gpu_tiny_fn = compile(chain, {.name = "bench chain (GPU, tiny)"});
  CompiledFunction gpu_tiny_graphed = compile(
      chain, {.mode = CompileMode::ReduceOverhead, .name = "bench chain (GPU, tiny, CUDA graph)"});
  // A small MLP's inference on the GPU (Note [CUDA graphs]): 4 layers of x @ W + b, tanh.
  Tensors gpu_mlp_w;
  Tensor gpu_mlp_x;
  TensorFunction mlp = [this](const Tensors& in) -> Tensors {
    Tensor h = in[0];
    for (size_t l = 0; l + 1 < gpu_mlp_w.size(); l += 2)
      h = tanh(add(mm(h, gpu_mlp_w[l]), gpu_mlp_w[l + 1]));
    return {h};
  };
  CompiledFunction gpu_mlp_fn = compile(mlp, {.name = "bench mlp (GPU)"});
  CompiledFunction gpu_mlp_graphed =
      compile(mlp, {.mode = CompileMode::ReduceOverhead, .name = "bench mlp (GPU, CUDA graph)"});
  Tensors sixteen;
  std::map<std::string, double> last;
  CompiledFunction tiny_fn = compile(chain, {.name = "bench chain (tiny)"});
  // A training step's forward and loss (Fashion-MNIST's MLP: 784-256-128-10, relu, batch 128),
  // eager and compiled (a joint graph: its backward is one node), then backward.
  // The same on the GPU (rows mlp_train_step_gpu_*).
  Tensors mlp_params, gpu_train_params;
  Tensor mlp_x, mlp_y, gpu_train_x, gpu_train_y;
  static Tensors mlp_loss_of(const Tensors& params, const Tensors& in) {
    Tensor h = in[0];
    for (size_t l = 0; l < params.size(); l += 2) {
      h = add(mm(h, params[l]), params[l + 1]);
      if (l + 2 < params.size()) h = relu(h);
    }
    return {cross_entropy(h, in[1])};
  }
  TensorFunction mlp_loss = [this](const Tensors& in) { return mlp_loss_of(mlp_params, in); };
  TensorFunction gpu_train_loss = [this](const Tensors& in) {
    return mlp_loss_of(gpu_train_params, in);
  };
  CompiledFunction mlp_loss_fn = compile(mlp_loss, {.name = "bench mlp train step"});
  CompiledFunction gpu_train_fn = compile(gpu_train_loss, {.name = "bench mlp train step (GPU)"});
  CompiledFunction big_fn = compile(chain, {.name = "bench chain (16M)"});
  CompiledFunction guard_fn =
      compile([](const Tensors& in) -> Tensors { return {in[0]}; }, {.name = "bench 16 inputs"});
};

std::vector<Measure> setup_compile(const SuiteOptions& opt) {
  auto s = std::make_shared<CompileState>();
  s->tiny = randn({16});
  s->big = randn({int64_t{16} << 20});
  s->rows = randn({4096, 4096});
  s->bias = randn({4096});
  for (int i = 0; i < 16; ++i) s->sixteen.push_back(randn({4, 4}));
  const int calls = opt.quick ? 2000 : 20000;
  const int reps = opt.quick ? 2 : 5;
  std::vector<Measure> m;
  auto row = [&](const std::string& name, const std::string& unit, bool lower, int threads,
                 std::function<double()> fn) {
    Measure r;
    r.name = name;
    r.unit = unit;
    r.lower_is_better = lower;
    r.threads = threads;
    r.loom = [s, name, fn = std::move(fn)] {
      const double v = fn();
      s->last[name] = v;
      return v;
    };
    m.push_back(std::move(r));
    return &m.back();
  };
  auto ratio = [s](const std::string& a, const std::string& b) {
    return [s, a, b] {
      auto x = s->last.find(a), y = s->last.find(b);
      return x == s->last.end() || y == s->last.end() ? NAN : x->second / y->second;
    };
  };
  auto per_call_us = [calls, reps](const std::function<void()>& call) {
    return median_seconds(
               [&] {
                 for (int i = 0; i < calls; ++i) call();
               },
               reps) /
           calls * 1e6;
  };
  row("guard_16_inputs", "us/call", true, 1, [s, per_call_us] {
    return per_call_us([s] { s->guard_fn(s->sixteen); });
  })->value_target = 1.0;
  row("tiny_chain_eager", "us/call", true, 1,
      [s, per_call_us] { return per_call_us([s] { chain({s->tiny}); }); });
  row("tiny_chain_compiled", "us/call", true, 1, [s, per_call_us] {
    return per_call_us([s] { s->tiny_fn({s->tiny}); });
  })->value_target = 2.0;
  row("tiny_chain_compiled_of_eager", "of eager", true, 1,
      ratio("tiny_chain_compiled", "tiny_chain_eager"));
  const double big_bytes = 2.0 * 4 * static_cast<double>(s->big.numel());
  row("chain_16m_eager", "GB/s", false, 2, [s, reps, big_bytes] {
    return big_bytes / median_seconds([s] { chain({s->big}); }, reps) / 1e9;
  });
  row("chain_16m_compiled", "GB/s", false, 2, [s, reps, big_bytes] {
    return big_bytes / median_seconds([s] { s->big_fn({s->big}); }, reps) / 1e9;
  });
  row("chain_16m_compiled_of_eager", "of eager", false, 2,
      ratio("chain_16m_compiled", "chain_16m_eager"))
      ->value_target = 1.0;
  // Bytes: x read once (the ideal; eager also writes and reads four intermediates).
  const double rows_bytes = 4.0 * static_cast<double>(s->rows.numel());
  row("row_sum_16m_eager", "GB/s", false, 2, [s, reps, rows_bytes] {
    return rows_bytes / median_seconds([s] { row_sum({s->rows, s->bias}); }, reps) / 1e9;
  });
  row("row_sum_16m_compiled", "GB/s", false, 2, [s, reps, rows_bytes] {
    return rows_bytes / median_seconds([s] { s->row_sum_fn({s->rows, s->bias}); }, reps) / 1e9;
  });
  row("row_sum_16m_compiled_of_eager", "of eager", false, 2,
      ratio("row_sum_16m_compiled", "row_sum_16m_eager"))
      ->value_target = 1.0;
  // A training step on 2 threads: forward, loss and backward (gradients accumulate; no optimizer).
  auto make_mlp = [](Tensors* params, Tensor* x, Tensor* y, Device d) {
    const int64_t dims[] = {784, 256, 128, 10};
    for (int l = 0; l < 3; ++l) {
      params->push_back(
          mul(randn({dims[l], dims[l + 1]}), 1.0 / std::sqrt(static_cast<double>(dims[l])))
              .to(d)
              .requires_grad_(true));
      params->push_back(zeros({dims[l + 1]}).to(d).requires_grad_(true));
    }
    *x = randn({128, 784}).to(d);
    *y = randint(0, 10, {128}).to(d);
  };
  auto train_step = [s, make_mlp](bool compiled) {
    if (!s->mlp_x.defined()) make_mlp(&s->mlp_params, &s->mlp_x, &s->mlp_y, kCPU);
    const Tensor loss =
        compiled ? s->mlp_loss_fn({s->mlp_x, s->mlp_y})[0] : s->mlp_loss({s->mlp_x, s->mlp_y})[0];
    autograd::backward({loss});
  };
  row("mlp_train_step_eager", "ms/step", true, 2, [train_step, reps] {
    train_step(false);
    return median_seconds(
               [&] {
                 for (int i = 0; i < 20; ++i) train_step(false);
               },
               reps) /
           20 * 1e3;
  });
  row("mlp_train_step_compiled", "ms/step", true, 2, [train_step, reps] {
    train_step(true);  // the capture and the joint graph
    return median_seconds(
               [&] {
                 for (int i = 0; i < 20; ++i) train_step(true);
               },
               reps) /
           20 * 1e3;
  });
  row("mlp_train_step_compiled_of_eager", "of eager", true, 2,
      ratio("mlp_train_step_compiled", "mlp_train_step_eager"))
      ->value_target = 1.0;
  row("dynamic_40_lengths", "graphs", true, 1, [] {
    WarningsToStderr quiet(false);  // the recompile limit's warning: the row counts it
    CompiledFunction f =
        compile([](const Tensors& in) -> Tensors { return {softmax(mul(in[0], 0.125), -1)}; },
                {.recompile_limit = 64, .name = "bench dynamic"});
    for (int64_t len = 16; len < 56; ++len) f({randn({8, len, 64})});
    return static_cast<double>(f.report().graphs.size());
  })->value_target = 2.0;
  row("dynamic_40_lengths_time", "s wall", true, 1, [] {
    WarningsToStderr quiet(false);
    CompiledFunction f =
        compile([](const Tensors& in) -> Tensors { return {softmax(mul(in[0], 0.125), -1)}; },
                {.recompile_limit = 64, .name = "bench dynamic (timed)"});
    return seconds([&] {
      for (int64_t len = 16; len < 56; ++len) f({randn({8, len, 64})});
    });
  });
  // The first call of a new function whose kernel is in no cache (the C++ compiler runs), then of
  // another with the built kernel on disk but not yet loaded by this process (a new process's
  // first call with a warm cache).
  row("cold_first_call", "ms wall", true, 1, [s] {
    TempCacheDir cold;
    CompiledFunction f = compile(chain, {.name = "bench cold"});
    const double ms = seconds([&] { f({s->tiny}); }) * 1e3;
    TempCacheDir warm(cold.path);
    CompiledFunction g = compile(chain, {.name = "bench warm"});
    s->last["warm_cache_first_call"] = seconds([&] { g({s->tiny}); }) * 1e3;
    return ms;
  })->value_target = 1000;
  row("warm_cache_first_call", "ms wall", true, 1, [s] {
    return s->last.count("warm_cache_first_call") ? s->last["warm_cache_first_call"] : NAN;
  })->value_target = 20;

  // The same chain on the GPU: 256M float32 (1 GiB a tensor), device time from CUDA events; the
  // compiled chain is one generated kernel (NVRTC), measured against this round's copy.
  const std::string no_gpu = why_no_gpu();
  auto gpu_row = [&](const std::string& name, const std::string& unit, bool lower,
                     std::function<double()> fn) {
    Measure* r = row(name, unit, lower, 1, std::move(fn));
    r->skip = no_gpu;
    return r;
  };
  auto need_gpu = [s] {
    if (s->gpu_x.defined()) return;
    const TensorOptions o = TensorOptions(kFloat32).with_device(Device(DeviceType::CUDA, 0));
    s->gpu_x = randn({int64_t{256} << 20}, o);
    s->gpu_out = empty({int64_t{256} << 20}, o);
    s->gpu_tiny = randn({16}, o);
    s->gpu_tiny2 = randn({16}, o);
    for (int l = 0; l < 4; ++l) {
      s->gpu_mlp_w.push_back(mul(randn({64, 64}, o), 0.125));
      s->gpu_mlp_w.push_back(randn({64}, o));
    }
    s->gpu_mlp_x = randn({32, 64}, o);
  };
  const double gpu_bytes = 2.0 * 4 * static_cast<double>(int64_t{256} << 20);
  gpu_row("copy_256m_gpu", "GB/s", false, [s, need_gpu, reps, gpu_bytes] {
    need_gpu();
    return gpu_bytes / (device_ms([s] { s->gpu_out.copy_(s->gpu_x); }, 2, reps) * 1e-3) / 1e9;
  });
  gpu_row("chain_256m_gpu_eager", "GB/s", false, [s, need_gpu, reps, gpu_bytes] {
    need_gpu();
    return gpu_bytes / (device_ms([s] { chain({s->gpu_x}); }, 2, reps) * 1e-3) / 1e9;
  });
  gpu_row("chain_256m_gpu_compiled", "GB/s", false, [s, need_gpu, reps, gpu_bytes] {
    need_gpu();
    return gpu_bytes / (device_ms([s] { s->gpu_fn({s->gpu_x}); }, 2, reps) * 1e-3) / 1e9;
  });
  gpu_row("chain_256m_gpu_compiled_of_copy", "of copy", false,
          ratio("chain_256m_gpu_compiled", "copy_256m_gpu"))
      ->value_target = 0.8;
  gpu_row("chain_256m_gpu_compiled_of_eager", "of eager", false,
          ratio("chain_256m_gpu_compiled", "chain_256m_gpu_eager"));
  // Host time per call on the GPU: the compiled chain on 16 elements (guards and one kernel
  // launch), the same in mode reduce-overhead (one CUDA graph launch, its input copy a node of
  // the graph), and a 4-layer MLP's inference (8 steps a call) eager, compiled and in mode
  // reduce-overhead.
  auto gpu_per_call = [&](const std::string& name, std::function<void()> call) {
    return gpu_row(name, "us/call", true, [need_gpu, per_call_us, call = std::move(call)] {
      need_gpu();
      call();  // the first calls capture and record
      call();
      const double us = per_call_us(call);
      synchronize_gpu();
      return us;
    });
  };
  gpu_per_call("tiny_chain_gpu_compiled", [s] { s->gpu_tiny_fn({s->gpu_tiny}); });
  gpu_per_call("tiny_chain_gpu_reduce_overhead", [s] {
    s->gpu_tiny_graphed({s->gpu_tiny});
  })->value_target = 5.0;
  // Another input than the previous call's every call (two tensors in turn): the graph's copy
  // node is pointed at it before the launch.
  gpu_per_call("tiny_chain_gpu_reduce_overhead_new_input", [s] {
    s->gpu_tiny_graphed({++s->gpu_calls % 2 == 0 ? s->gpu_tiny : s->gpu_tiny2});
  })->value_target = 5.0;
  // The training step above on the GPU (forward, loss, backward; host time a step, the device's
  // work included by a synchronization at the end of each timed run).
  auto gpu_train_step = [s, make_mlp](bool compiled) {
    if (!s->gpu_train_x.defined())
      make_mlp(&s->gpu_train_params, &s->gpu_train_x, &s->gpu_train_y, Device(DeviceType::CUDA, 0));
    const Tensors in = {s->gpu_train_x, s->gpu_train_y};
    autograd::backward({compiled ? s->gpu_train_fn(in)[0] : s->gpu_train_loss(in)[0]});
  };
  for (bool compiled : {false, true}) {
    gpu_row(compiled ? "mlp_train_step_gpu_compiled" : "mlp_train_step_gpu_eager", "us/step", true,
            [gpu_train_step, compiled, reps] {
              gpu_train_step(compiled);  // the capture and the joint graph
              gpu_train_step(compiled);
              synchronize_gpu();
              return median_seconds(
                         [&] {
                           for (int i = 0; i < 50; ++i) gpu_train_step(compiled);
                           synchronize_gpu();
                         },
                         reps) /
                     50 * 1e6;
            });
  }
  gpu_row("mlp_train_step_gpu_compiled_of_eager", "of eager", true,
          ratio("mlp_train_step_gpu_compiled", "mlp_train_step_gpu_eager"))
      ->value_target = 1.0;
  gpu_per_call("mlp4_gpu_eager", [s] { s->mlp({s->gpu_mlp_x}); });
  gpu_per_call("mlp4_gpu_compiled", [s] { s->gpu_mlp_fn({s->gpu_mlp_x}); });
  gpu_per_call("mlp4_gpu_reduce_overhead", [s] { s->gpu_mlp_graphed({s->gpu_mlp_x}); });
  return m;
}

const RegisterSuite kCompile(Suite{
    "compile",
    "loom::compile vs eager loom: per-call overhead on a tiny input, a 7-operator pointwise "
    "chain over 16M floats, the guard check of 16 inputs, graphs for 40 sequence lengths",
    "", "", setup_compile, nullptr,
    "this suite has none: each compiled row has its eager row beside it (torch.compile's figures "
    "are in docs/benchmarks.md)"});

}  // namespace
}  // namespace loom::bench
