// `loom bench gpt`: GPT training steps and causal attention, loom against PyTorch in one run
// (loom-anchor-gpt, a Python script: on the GPU machine python3 has torch 2.11 with CUDA; here
// /usr/bin/python3 has torch 1.13 on the CPU).
//
// Note [gpt suite]
//   Rows on a GPU (CUDA device 0), each loom's and PyTorch's figure and their ratio:
//   - gpt_small4_{eager,compiled}_tok_s: training steps (forward, loss, backward, AdamW with betas
//     0.9/0.95 and weight decay 0.1) of GPT-2 small's width (768 wide, 12 heads, 50304 tokens,
//     1024 positions) with 4 blocks, batch 8 x 1024 tokens, bf16 autocast; tokens/s over a run of
//     steps after warm-up, one synchronisation at its end. Compiled: loom::compile of the loss (a
//     joint graph), torch.compile of the model.
//   - gpt_small4_compile_s: the cold compile, with an empty kernel cache on both sides (loom: a
//     fresh LOOM_CACHE_DIR; torch: fresh inductor and Triton cache folders): torch.compile's first
//     call; loom's first two calls (the first captures and runs eagerly, the second runs the
//     passes and code generation and replays), so each side has compiled and run its code once;
//     measured once, repeated in every round.
//   - gpt2_small_tok_s and gpt2_small_mfu: the 12-layer GPT-2 small, eager, same batch and
//     precision; MFU = tokens/s x GptConfig::flops_per_token(1024) (6 N + 12 L C T, N without the
//     position embedding; the anchor computes the same formula over its own parameters) / 989e12
//     (H100/H200 SXM dense bf16), NaN on other GPUs.
//   - attn_bB_hH_tT_dD: causal attention forward + backward in bf16 of q, k, v of (B, H, T, D), in
//     TFLOP/s of FLOPs = 3.5 x 2 B H T^2 D (forward: two matmuls of 2 B H T^2 D each, halved for
//     the causal mask; backward 2.5 x forward, FlashAttention's convention), device time from CUDA
//     events. loom runs loom::scaled_dot_product_attention(is_causal) (stderr says which path and
//     why: Note [Attention backends]); torch runs F.scaled_dot_product_attention(is_causal=True).
//   Without a GPU the suite runs a small CPU configuration instead (gpt_tiny_*: 2 blocks, 64 wide,
//   2 heads, 512 tokens, batch 4 x 64, float32, 2 threads; attn_cpu_*: float32), against the
//   PyTorch of /usr/bin/python3 (1.13 has no torch.compile or scaled_dot_product_attention: its
//   compiled rows answer NaN and its attention is written out); the GPU rows say "not run".
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/config.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/nn/gpt.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/warning.h"

namespace loom::bench {
namespace {

constexpr double kH100Bf16Peak = 989e12;

// What a training row trains.
struct GptShape {
  nn::GptConfig config;
  int64_t batch = 8, seq = 1024;
  bool gpu = true;  // CUDA device 0 with bf16 autocast; else the CPU in float32
};

GptShape gpt_shape(int64_t layers, bool gpu) {
  GptShape s;
  s.gpu = gpu;
  if (gpu) {
    s.config.vocab_size = 50304;
    s.config.n_layer = layers;
  } else {
    s.config = nn::GptConfig::tiny(512);
    s.config.n_head = 2;
    s.batch = 4;
    s.seq = 64;
  }
  s.config.block_size = s.seq;
  return s;
}

// A model, its optimizer and one batch, stepping eagerly or through loom::compile.
class GptRun {
 public:
  GptRun(const GptShape& s, bool compiled) : shape_(s) {
    Generator gen(0);
    model_ = std::make_unique<nn::Gpt>(s.config, &gen);
    const Device dev = s.gpu ? Device(DeviceType::CUDA, 0) : kCPU;
    if (s.gpu) model_->to(dev);
    optim::AdamOptions ao;
    ao.lr = 6e-4;
    ao.betas = {0.9, 0.95};
    ao.weight_decay = 0.1;
    opt_ = std::make_unique<optim::AdamW>(model_->parameters(), ao);
    const Tensor w = randint(0, s.config.vocab_size, {s.batch, s.seq + 1}, DType::Int64, gen);
    x_ = narrow(w, 1, 0, s.seq).contiguous().to(dev);
    y_ = narrow(w, 1, 1, s.seq).contiguous().to(dev);
    if (compiled) {
      nn::Gpt* m = model_.get();
      fn_ = compile(
          [m](const std::vector<Tensor>& in) -> std::vector<Tensor> {
            return {m->loss(in[0], in[1])};
          },
          {.name = "bench gpt loss"});
      // The first call, cold: an empty kernel cache (Note [gpt suite]).
      std::string dir = (std::filesystem::temp_directory_path() / "loom-bench-gpt-XXXXXX").string();
      LOOM_CHECK(::mkdtemp(dir.data()) != nullptr, "[bench gpt] mkdtemp failed");
      config::set("LOOM_CACHE_DIR", dir);
      // loom's first call captures and runs eagerly; the second builds the graph's kernels (passes,
      // code generation) and replays it: both, to compare with torch.compile's first call.
      const auto t0 = std::chrono::steady_clock::now();
      step();
      step();
      sync();
      first_call_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      config::set("LOOM_CACHE_DIR", "");
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    for (int i = 0; i < 2; ++i) step();  // warm-up
    sync();
  }

  void step() {
    opt_->zero_grad();
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (shape_.gpu) autocast.emplace(DeviceType::CUDA, kBFloat16);
      loss = fn_ ? (*fn_)({x_, y_})[0] : model_->loss(x_, y_);
    }
    autograd::backward({loss});
    opt_->step();
  }
  void sync() const {
    if (shape_.gpu) synchronize_gpu();
  }
  double tokens_per_second(int steps) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    sync();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(shape_.batch * shape_.seq * steps) / s;
  }
  double first_call_seconds() const { return first_call_s_; }

 private:
  GptShape shape_;
  std::unique_ptr<nn::Gpt> model_;
  std::unique_ptr<optim::AdamW> opt_;
  Tensor x_, y_;
  std::optional<CompiledFunction> fn_;
  double first_call_s_ = 0;
};

// Causal attention forward + backward, TFLOP/s (Note [gpt suite]).
class AttentionRun {
 public:
  AttentionRun(int64_t b, int64_t h, int64_t t, int64_t d, bool gpu) : gpu_(gpu) {
    Generator gen(1);
    auto make = [&] {
      const Tensor r = randn({b, h, t, d}, {}, gen);
      return gpu ? r.to(kBFloat16).to(Device(DeviceType::CUDA, 0)) : r;
    };
    q_ = make().requires_grad_();
    k_ = make().requires_grad_();
    v_ = make().requires_grad_();
    dout_ = make();
    flops_ = 3.5 * 2.0 * static_cast<double>(b * h * t * t * d);
    const AttentionBackend path = attention_backend(q_, k_, v_);
    warn_once("bench.gpt.attention",
              "[bench gpt] attention rows run "
              "loom::scaled_dot_product_attention(is_causal=true): " +
                  path.reason);
  }
  void run() {
    const Tensor out = scaled_dot_product_attention(q_, k_, v_, 0.0, /*is_causal=*/true);
    // The three gradients, without accumulating into .grad() (torch.autograd.grad in the anchor).
    const std::vector<Tensor> g = autograd::grad({out}, {q_, k_, v_}, {dout_});
    LOOM_CHECK(g.size() == 3 && g[0].defined(), "[bench gpt] attention gave no gradient");
  }
  double tflops(bool quick) {
    const double ms = gpu_ ? device_ms([this] { run(); }, 2, quick ? 3 : 10)
                           : median_seconds([this] { run(); }, quick ? 2 : 5) * 1e3;
    return flops_ / (ms * 1e-3) / 1e12;
  }

 private:
  bool gpu_;
  Tensor q_, k_, v_, dout_;
  double flops_ = 0;
};

std::vector<Measure> setup_gpt(const SuiteOptions& opt) {
  const std::string no_gpu = why_no_gpu();
  const bool gpu = no_gpu.empty();
  const int steps = opt.quick ? 2 : (gpu ? 10 : 5);
  std::vector<Measure> m;
  // Training rows of one configuration: eager and compiled tokens/s, the cold compile.
  auto training_rows = [&](const std::string& prefix, const GptShape& shape,
                           const std::string& skip, int threads) {
    auto eager = std::make_shared<std::unique_ptr<GptRun>>();
    auto compiled = std::make_shared<std::unique_ptr<GptRun>>();
    auto get = [shape](std::shared_ptr<std::unique_ptr<GptRun>> r, bool c) -> GptRun& {
      if (!*r) *r = std::make_unique<GptRun>(shape, c);
      return **r;
    };
    // The targets hold on the GPU: eager >= 1.0x torch, compiled >= 1.1x torch.compile,
    // a cold compile within 1 s.
    const bool targets = shape.gpu;
    m.push_back({prefix + "_eager_tok_s", "tokens/s", false, targets ? 1.0 : 0.0, threads,
                 [=] { return get(eager, false).tokens_per_second(steps); }, 0, skip});
    m.push_back({prefix + "_compile_s", "s", true, 0, threads,
                 [=] { return get(compiled, true).first_call_seconds(); }, targets ? 1.0 : 0.0,
                 skip});
    m.push_back({prefix + "_compiled_tok_s", "tokens/s", false, targets ? 1.1 : 0.0, threads,
                 [=] { return get(compiled, true).tokens_per_second(steps); }, 0, skip});
  };
  auto attention_row = [&](int64_t b, int64_t h, int64_t t, int64_t d, bool on_gpu,
                           const std::string& skip, int threads) {
    const std::string name = std::string(on_gpu ? "attn" : "attn_cpu") + "_b" + std::to_string(b) +
                             "_h" + std::to_string(h) + "_t" + std::to_string(t) + "_d" +
                             std::to_string(d);
    auto run = std::make_shared<std::unique_ptr<AttentionRun>>();
    const bool quick = opt.quick;
    m.push_back({name, "TFLOP/s", false, on_gpu ? 0.9 : 0.0, threads,
                 [=] {
                   if (!*run) *run = std::make_unique<AttentionRun>(b, h, t, d, on_gpu);
                   return (*run)->tflops(quick);
                 },
                 0, skip});
  };
  if (!gpu) {
    // Note [gpt suite]: the CPU configuration, so the suite runs (and is tested) without a GPU.
    training_rows("gpt_tiny", gpt_shape(2, false), "", 2);
    attention_row(2, 4, 256, 32, false, "", 2);
  }
  training_rows("gpt_small4", gpt_shape(4, true), no_gpu, 1);
  const GptShape small = gpt_shape(12, true);
  auto gpt2 = std::make_shared<std::unique_ptr<GptRun>>();
  auto gpt2_run = [gpt2, small]() -> GptRun& {
    if (!*gpt2) *gpt2 = std::make_unique<GptRun>(small, false);
    return **gpt2;
  };
  m.push_back({"gpt2_small_tok_s", "tokens/s", false, 0, 1,
               [=] { return gpt2_run().tokens_per_second(steps); }, 0, no_gpu});
  m.push_back({"gpt2_small_mfu", "% MFU", false, 0, 1,
               [=] {
                 const std::string name = cuda::device_properties(0).name;
                 const bool known = name.find("H100") != std::string::npos ||
                                    name.find("H200") != std::string::npos;
                 const double tps = gpt2_run().tokens_per_second(steps);
                 return known
                            ? 100.0 * tps * small.config.flops_per_token(small.seq) / kH100Bf16Peak
                            : NAN;
               },
               0, no_gpu});
  attention_row(8, 12, 1024, 64, true, no_gpu, 1);
  attention_row(2, 12, 4096, 64, true, no_gpu, 1);
  attention_row(4, 16, 2048, 128, true, no_gpu, 1);
  return m;
}

const RegisterSuite kGpt([] {
  Suite s;
  s.name = "gpt";
  s.description =
      "GPT training steps (GPT-2 small's width with 4 blocks, eager and compiled; GPT-2 small's "
      "tokens/s and MFU) and causal attention, vs PyTorch (a tiny CPU configuration without a GPU)";
  s.anchor_binary = "loom-anchor-gpt";
  s.anchor_name = "PyTorch (python3)";
  s.setup = setup_gpt;
  return s;
}());

}  // namespace
}  // namespace loom::bench
