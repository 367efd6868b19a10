// `loom bench gpu`: loom's CUDA backend against PyTorch on the same GPU (loom-anchor-gpu, a Python
// script: on the GPU machine python3 has torch with CUDA). Eager launch overhead, elementwise and
// reduction bandwidth against a measured copy ceiling, softmax and layer norm forward + backward,
// GEMM (bf16, TF32), a cuDNN convolution, the training steps of `loom train`'s MLP and CNN, and
// host-to-device copies through the loader's device stage. Where no CUDA device is visible every
// row says so and nothing runs. See Note [gpu suite].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench.h"
#include "loom/autograd.h"
#include "loom/build_info.h"
#include "loom/cuda.h"
#include "loom/data/loader.h"
#include "loom/data/staging.h"
#include "loom/device_interface.h"
#include "loom/memory/cuda_memory.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/stream.h"

namespace loom::bench {
namespace {

// Note [gpu suite]
// Timing. A GPU-bound row is timed on the device: after warm-up, each repetition sits between two
// timed CUDA events on the current stream, all repetitions are queued back to back, the host waits
// once for the last event, and the row reports the median repetition. eager_add_overhead is host
// time per call over many calls, one synchronisation at the end (launch included); h2d_loader is
// host time from the first batch asked to the device having finished the last copy. The anchor
// does the same with torch.cuda.Event and torch.cuda.synchronize().
// Parity. TF32 is off on both sides (loom's default; the anchor turns off torch's
// cudnn.allow_tf32, on by default) except in gemm_tf32_8192, where both allow it. cuDNN picks its
// algorithm by heuristics on both sides (torch.backends.cudnn.benchmark off). Sizes are the same.
// The training steps are `loom train`'s models (src/train/models.cpp, same layers, same sizes),
// SGD with momentum 0.9, lr 0.01, gradients set to none, batch 128 already on the device; torch's
// SGD takes its default (multi-tensor) path on CUDA.
// Ratios. Bandwidth counts bytes read + written (add: 3 x 4 bytes x n, exp and copy: 2 x 4 x n,
// sum: 4 x n). Rows ending in _of_copy / _of_pinned are each side's own fraction of its copy
// ceiling measured in the same round (loom's of loom's, torch's of torch's); the target on
// h2d_loader_of_pinned bounds loom's figure. The eager overhead rows' anchor is torch's C++ API
// (ATen, compiled by the anchor against the torch package); eager_add_overhead_py is the same loop
// against Python torch, for information (its interpreter cost dominates).

const Device kCuda(DeviceType::CUDA, 0);
constexpr int64_t k256M = int64_t{256} << 20;   // float32 elements: 1 GiB per tensor
constexpr int64_t kRows = 32768, kCols = 1024;  // softmax and layer norm
constexpr int64_t kGemm = 8192;
constexpr int64_t kStepBatch = 128;
const std::vector<int64_t> kImageBatch = {128, 3, 224, 224};  // h2d rows

TensorOptions on_cuda(DType t = kFloat32) {
  return TensorOptions(t).with_device(kCuda);
}

// Allows TF32 for a scope (or forbids it) and restores the previous setting.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allow) : previous_(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Scope() { cuda::set_allow_tf32(previous_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool previous_;
};

// `loom train`'s models (src/train/models.cpp) on the device. nn modules cannot move to a device in
// this tree (Module::to takes a dtype), so the modules are built on the CPU with their own
// initialisation, their parameters become device leaves in the same order, and forward() calls
// the operators the modules' forward() calls.
struct DeviceModel {
  bool cnn = false;
  std::vector<Tensor> params;  // weight, bias per layer, in the module's order
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;

  explicit DeviceModel(bool is_cnn) : cnn(is_cnn) {
    Generator gen(0);
    nn::Sequential m;
    if (cnn) {
      nn::Conv2dOptions c1(1, 16, 3), c2(16, 32, 3);
      c1.padding = 1;
      c2.padding = 1;
      m.push_back(std::make_shared<nn::Conv2d>(c1, &gen));
      m.push_back(std::make_shared<nn::Conv2d>(c2, &gen));
      m.push_back(std::make_shared<nn::Linear>(32 * 7 * 7, 128, true, &gen));
      m.push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
    } else {
      m.push_back(std::make_shared<nn::Linear>(784, 256, true, &gen));
      m.push_back(std::make_shared<nn::Linear>(256, 128, true, &gen));
      m.push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
    }
    for (const auto& [name, p] : m.named_parameters()) {
      params.push_back(p.detach().to(kCuda).requires_grad_());
    }
    optim::SGDOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    opt = std::make_unique<optim::SGD>(params, o);
    x = rand({kStepBatch, 1, 28, 28}, on_cuda(), gen);
    y = randint(0, 10, {kStepBatch}, DType::Int64, gen).to(kCuda);
  }

  Tensor forward() const {
    const std::vector<Tensor>& p = params;
    if (!cnn) {
      Tensor h = x.flatten(1);
      h = relu(linear(h, p[0], p[1]));
      h = relu(linear(h, p[2], p[3]));
      return linear(h, p[4], p[5]);
    }
    Tensor h = max_pool2d(relu(conv2d(x, p[0], p[1], {1, 1}, {1, 1})), {2, 2});
    h = max_pool2d(relu(conv2d(h, p[2], p[3], {1, 1}, {1, 1})), {2, 2});
    h = relu(linear(h.flatten(1), p[4], p[5]));
    return linear(h, p[6], p[7]);
  }

  void step() {
    opt->zero_grad(/*set_to_none=*/true);
    Tensor loss = cross_entropy(forward(), y);
    loss.backward();
    opt->step();
  }
};

// Tensors of the rows, made when a row first runs (so that --only allocates only what it needs)
// and kept for the later rounds; `last` holds this round's figures for the _of_ rows.
struct GpuState {
  Tensor a1, b1, c1;              // eager overhead rows
  Tensor x, y, out;               // 256M elements each
  Tensor sm_x, sm_g, ln_w, ln_b;  // softmax and layer norm
  Tensor bf_a, bf_b, tf_a, tf_b;  // GEMM
  Tensor conv_x, conv_w;          // conv2d_fwd
  std::unique_ptr<DeviceModel> mlp, cnn;
  DataPtr pinned;  // h2d_pinned_copy's host buffer
  Tensor h2d_dst;
  std::shared_ptr<data::HostBufferPool> pool;  // h2d_loader's host batches
  std::map<std::string, double> last;

  void need_big() {
    if (x.defined()) return;
    x = rand({k256M}, on_cuda());
    y = rand({k256M}, on_cuda());
    out = empty({k256M}, on_cuda());
  }
  void need_rows() {
    if (sm_x.defined()) return;
    sm_x = randn({kRows, kCols}, on_cuda()).requires_grad_();
    sm_g = randn({kRows, kCols}, on_cuda());
    ln_w = ones({kCols}, on_cuda()).requires_grad_();
    ln_b = zeros({kCols}, on_cuda()).requires_grad_();
  }
  void need_gemm() {
    if (bf_a.defined()) return;
    tf_a = randn({kGemm, kGemm}, on_cuda());
    tf_b = randn({kGemm, kGemm}, on_cuda());
    bf_a = tf_a.to(kBFloat16);
    bf_b = tf_b.to(kBFloat16);
  }
  void need_conv() {
    if (conv_x.defined()) return;
    conv_x = randn({64, 128, 56, 56}, on_cuda());
    conv_w = randn({128, 128, 3, 3}, on_cuda());
  }
};

size_t image_batch_bytes() {
  size_t n = sizeof(float);
  for (int64_t d : kImageBatch) n *= static_cast<size_t>(d);
  return n;
}

// Host-to-device GB/s of `batches` pinned image batches through a DeviceStage (host time until the
// last copy has finished). The batches are not refilled: the row measures the copy path.
double loader_gbps(GpuState& s, int batches) {
  const size_t bytes = image_batch_bytes();
  // keep = 8: the stage holds up to depth + 2 batches (in flight, handed out, retiring), and a
  // buffer the pool cannot keep is unregistered and a new one registered on the next pass.
  if (!s.pool) s.pool = data::HostBufferPool::create(bytes, /*keep=*/8, /*pin=*/true);
  auto pool = s.pool;
  int made = 0;
  data::DeviceStage::Source source = [pool, batches, &made]() -> std::optional<data::Batch> {
    if (made == batches) return std::nullopt;
    DataPtr buf = pool->acquire();
    Storage st = make_intrusive<StorageImpl>(std::move(buf), pool->buffer_bytes(), nullptr);
    data::Batch b;
    b.names = {"image"};
    b.fields = {make_tensor(st, kFloat32, kImageBatch, {3 * 224 * 224, 224 * 224, 224, 1}, 0)};
    b.ids = {made};
    b.index = made++;
    return b;
  };
  synchronize_gpu();
  const int64_t mallocs0 = cuda::caching_allocator(0).stats().num_device_mallocs;
  const int64_t host0 = pool->stats().allocated;
  const auto t0 = std::chrono::steady_clock::now();
  double secs = 0;
  {
    data::DeviceStage stage(source, kCuda, /*depth=*/2);
    while (auto b = stage.next()) {
    }
    synchronize_gpu();
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Where the time went, for the reader of the log: the copies' own bandwidth (device time)
    // against the pass's, and what was allocated during the pass.
    const data::DeviceStageMetrics dm = stage.metrics();
    std::fprintf(
        stderr,
        "bench gpu: h2d_loader pass: %.1f GB/s overall, copies %.1f GB/s while running, "
        "%lld of %lld batches waited, next() %.0f us per batch, %lld device mallocs, "
        "%lld host buffers allocated\n",
        static_cast<double>(bytes) * batches / secs / 1e9, dm.copy_gbps(),
        static_cast<long long>(dm.copies_waited), static_cast<long long>(dm.batches),
        dm.next_seconds / std::max<int64_t>(dm.batches, 1) * 1e6,
        static_cast<long long>(cuda::caching_allocator(0).stats().num_device_mallocs - mallocs0),
        static_cast<long long>(pool->stats().allocated - host0));
  }
  if (!pool->stats().pinned) std::fprintf(stderr, "bench gpu: h2d_loader's buffers are pageable\n");
  return static_cast<double>(bytes) * batches / secs / 1e9;
}

std::vector<Measure> setup_gpu(const SuiteOptions& opt) {
  const std::string no_gpu = why_no_gpu();
  auto s = std::make_shared<GpuState>();
  const bool quick = opt.quick;
  const int reps = quick ? 3 : 10;
  std::vector<Measure> m;
  // Each row: its loom side, run with TF32 as Note [gpu suite] says, its figure kept in `last`.
  auto row = [&](const std::string& name, const std::string& unit, bool lower, double target,
                 std::function<double()> fn, bool tf32 = false) {
    Measure r;
    r.name = name;
    r.unit = unit;
    r.lower_is_better = lower;
    r.target = target;
    r.threads = 1;  // device rows: intra-op threads play no part
    r.skip = no_gpu.empty() ? "" : "no CUDA device is visible";
    r.loom = [s, name, fn = std::move(fn), tf32] {
      Tf32Scope scope(tf32);
      const double v = fn();
      s->last[name] = v;
      return v;
    };
    m.push_back(std::move(r));
    return &m.back();
  };
  auto fraction = [s](const std::string& part, const std::string& whole) {
    return [s, part, whole] {
      auto p = s->last.find(part), w = s->last.find(whole);
      return p == s->last.end() || w == s->last.end() ? NAN : p->second / w->second;
    };
  };
  // Host microseconds per call of `call`, many calls and one synchronisation per repetition.
  const int calls = quick ? 2000 : 20000;
  auto per_call_us = [calls, quick](const std::function<void()>& call) {
    call();
    synchronize_gpu();
    const double t = median_seconds(
        [&] {
          for (int i = 0; i < calls; ++i) call();
          synchronize_gpu();
        },
        quick ? 2 : 5);
    return t / calls * 1e6;
  };
  auto need_small = [s] {
    if (s->a1.defined()) return;
    s->a1 = rand({1}, on_cuda());
    s->b1 = rand({1}, on_cuda());
    s->c1 = empty({1}, on_cuda());
  };
  row("eager_add_overhead", "us/op", true, 0.5, [need_small, per_call_us, s] {
    need_small();
    return per_call_us([s] { Tensor c = add(s->a1, s->b1); });
  });
  row("eager_add_out_overhead", "us/op", true, 0.5, [need_small, per_call_us, s] {
    need_small();
    return per_call_us([s] { add_out(s->c1, s->a1, s->b1); });
  });
  // The same loop as eager_add_overhead against Python torch; its target bounds loom's own figure.
  row("eager_add_overhead_py", "us/op", true, 0, [need_small, per_call_us, s] {
    need_small();
    return per_call_us([s] { Tensor c = add(s->a1, s->b1); });
  })->value_target = 3;

  constexpr double kBig = static_cast<double>(k256M);
  row("copy_256m", "GB/s", false, 0.95, [s, reps] {
    s->need_big();
    return 2 * 4 * kBig / (device_ms([&] { s->out.copy_(s->x); }, 2, reps) * 1e-3) / 1e9;
  });
  row("add_256m", "GB/s", false, 0.95, [s, reps] {
    s->need_big();
    return 3 * 4 * kBig / (device_ms([&] { add_out(s->out, s->x, s->y); }, 2, reps) * 1e-3) / 1e9;
  });
  row("exp_256m", "GB/s", false, 0.95, [s, reps] {
    s->need_big();
    return 2 * 4 * kBig / (device_ms([&] { exp_out(s->out, s->x); }, 2, reps) * 1e-3) / 1e9;
  });
  row("sum_256m", "GB/s", false, 0.95, [s, reps] {
    s->need_big();
    return 4 * kBig / (device_ms([&] { Tensor r = sum(s->x); }, 2, reps) * 1e-3) / 1e9;
  });
  for (const char* part : {"add_256m", "exp_256m", "sum_256m"}) {
    row(std::string(part) + "_of_copy", "of copy", false, 0, fraction(part, "copy_256m"));
  }

  // Bandwidth-bound: the bandwidth target (>= 0.95x) as time.
  row("softmax_fwd_bwd", "ms", true, 1.05, [s, reps] {
    s->need_rows();
    return device_ms(
        [&] {
          Tensor y = softmax(s->sm_x, -1);
          auto g = autograd::grad({y}, {s->sm_x}, {s->sm_g});
        },
        2, reps);
  });
  row("layer_norm_fwd_bwd", "ms", true, 1.05, [s, reps] {
    s->need_rows();
    return device_ms(
        [&] {
          Tensor y = layer_norm(s->sm_x, {kCols}, s->ln_w, s->ln_b, 1e-5);
          auto g = autograd::grad({y}, {s->sm_x, s->ln_w, s->ln_b}, {s->sm_g});
        },
        2, reps);
  });

  constexpr double kGemmFlop = 2.0 * kGemm * kGemm * kGemm;
  row("gemm_bf16_8192", "TFLOP/s", false, 0.98, [s, reps] {
    s->need_gemm();
    return kGemmFlop / (device_ms([&] { Tensor c = mm(s->bf_a, s->bf_b); }, 3, reps) * 1e-3) / 1e12;
  });
  row(
      "gemm_tf32_8192", "TFLOP/s", false, 0.98,
      [s, reps] {
        s->need_gemm();
        return kGemmFlop / (device_ms([&] { Tensor c = mm(s->tf_a, s->tf_b); }, 3, reps) * 1e-3) /
               1e12;
      },
      /*tf32=*/true);
  // cuDNN on both sides: the GEMM target as time.
  row("conv2d_fwd", "ms", true, 1.02, [s, reps] {
    s->need_conv();
    return device_ms(
        [&] {
          Tensor y = conv2d(s->conv_x, s->conv_w, std::nullopt, {1, 1}, {1, 1});
        },
        3, reps);
  });

  const int steps = quick ? 5 : 20;
  row("mlp_step", "ms/step", true, 1.0, [s, steps] {
    if (!s->mlp) s->mlp = std::make_unique<DeviceModel>(false);
    return device_ms([&] { s->mlp->step(); }, 5, steps);
  });
  row("cnn_step", "ms/step", true, 1.0, [s, steps] {
    if (!s->cnn) s->cnn = std::make_unique<DeviceModel>(true);
    return device_ms([&] { s->cnn->step(); }, 5, steps);
  });

  const int batches = quick ? 6 : 24;
  row("h2d_pinned_copy", "GB/s", false, 0.95, [s, reps] {
    const size_t bytes = image_batch_bytes();
    if (!s->pinned) {
      s->pinned = cuda::pinned_allocator()->allocate(bytes);
      s->h2d_dst = empty(kImageBatch, on_cuda());
    }
    DeviceInterface& cuda_if = device_interface(DeviceType::CUDA);
    const Stream stream = current_stream(kCuda);
    const double ms = device_ms(
        [&] {
          cuda_if.copy(s->h2d_dst.data_ptr(), kCuda, s->pinned.get(), kCPU, bytes, stream,
                       /*non_blocking=*/true);
        },
        2, reps);
    return static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  });
  row("h2d_loader", "GB/s", false, 0, [s, batches, quick] {
    // Warm-up with as many batches: the pool reaches the number of pinned buffers the stage
    // keeps busy (allocating one is a cudaHostAlloc, which must not be timed), device blocks too.
    loader_gbps(*s, batches);
    std::vector<double> v;
    for (int i = 0; i < (quick ? 2 : 5); ++i) v.push_back(loader_gbps(*s, batches));
    return median(v);
  });
  row("h2d_loader_of_pinned", "of pinned", false, 0, fraction("h2d_loader", "h2d_pinned_copy"))
      ->value_target = 0.9;
  return m;
}

std::vector<std::pair<std::string, std::string>> gpu_machine() {
  const std::string no_gpu = why_no_gpu();
  if (!no_gpu.empty()) return {{"gpu", "none: " + no_gpu}};
  const cuda::DeviceProperties p = cuda::device_properties(0);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.0f GiB, %d SMs), driver %d, runtime %d",
                p.name.c_str(), p.major, p.minor,
                static_cast<double>(p.total_memory) / (1024.0 * 1024 * 1024), p.multiprocessors,
                cuda::driver_version(), cuda::runtime_version());
  char floor[160];
  std::snprintf(floor, sizeof(floor),
                "%.2f us of host time per empty-kernel launch (the floor under the eager rows)",
                cuda::launch_floor_us());
  return {{"gpu", buf}, {"launch floor", floor}};
}

const RegisterSuite kGpu([] {
  Suite s;
  s.name = "gpu";
  s.description =
      "CUDA: launch overhead, bandwidth, softmax/layer norm, GEMM, conv, training steps, H2D vs "
      "PyTorch";
  s.anchor_binary = "loom-anchor-gpu";
  s.anchor_name = "PyTorch (python3, CUDA)";
  s.setup = setup_gpu;
  s.machine = gpu_machine;
  return s;
}());

}  // namespace
}  // namespace loom::bench
