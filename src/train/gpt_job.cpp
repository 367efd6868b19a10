// `loom train --model gpt`: a GPT-2-style language model (nn/gpt.h) trained on text.
//
// Note [GPT training]
//   Data: the corpus's tokenizer and token windows (Note [Text shards] in data/text.h), read by the
//   loader like any shard dataset (shuffled per epoch from the seed; workers; pinned batches and a
//   device stage on a GPU). A window of seq_len + 1 tokens gives the inputs [0, seq_len) and the
//   targets [1, seq_len].
//   Model: a preset (--gpt tiny|mini|small4|small) with block_size = seq_len and the tokenizer's
//   vocabulary; initialised from Generator(seed) on the CPU, then moved to the device.
//   Step: AdamW (betas 0.9, 0.95, as GPT-2's recipes; --weight-decay decoupled), the learning rate
//   warmed up linearly over --warmup steps then, with --schedule cosine, down to a tenth by the
//   end; gradients clipped to a global norm of --grad-clip (0: off). --compile runs the loss
//   through loom::compile (a joint graph). Reported: the loss (read back from the device only where
//   shown), tokens/s, and on CUDA the model FLOP utilisation (GptConfig::flops_per_token against
//   the device's dense float32 peak, as the model trains in float32); after each epoch the
//   validation loss and perplexity (exp of the mean loss over every validation window); at the end,
//   text sampled from the model. Not yet: checkpoints and resume, several processes, mixed
//   precision.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "loom/autograd.h"
#include "loom/compile.h"
#include "loom/cuda.h"
#include "loom/data/bpe.h"
#include "loom/data/text.h"
#include "loom/nn/gpt.h"
#include "loom/ops.h"
#include "loom/parallel.h"
#include "train/train_internal.h"

namespace loom::train::detail {

namespace {

nn::GptConfig gpt_preset(const std::string& size, int64_t vocab, int64_t seq_len) {
  nn::GptConfig c = nn::GptConfig::gpt2_small();
  if (size == "tiny") {
    c = nn::GptConfig::tiny(vocab);
  } else if (size == "mini") {  // 4 layers, 4 heads, 256 wide
    c.n_layer = 4;
    c.n_head = 4;
    c.n_embd = 256;
  } else if (size == "small4") {  // GPT-2 small's width, 4 blocks (the benchmark's anchor)
    c.n_layer = 4;
  }
  c.vocab_size = vocab;
  c.block_size = seq_len;
  return c;
}

// Dense float32 FLOP/s of the device (no tensor cores: TF32 is off by default), or 0 when unknown.
double float32_peak(const Device& d) {
  if (!d.is_cuda()) return 0;
  const std::string name = cuda::device_properties(d.index()).name;
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos)
    return 67e12;  // SXM: 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz
  if (name.find("A100") != std::string::npos) return 19.5e12;
  return 0;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d);
  return buf;
}

}  // namespace

RunInfo run_info_of(const TrainOptions& o, int64_t train_samples, int64_t test_samples,
                    int64_t steps_per_epoch) {
  RunInfo info;
  info.train_samples = train_samples;
  info.test_samples = test_samples;
  info.batch = o.batch;
  info.epochs = o.epochs;
  info.steps_per_epoch = steps_per_epoch;
  info.threads = get_num_threads();
  info.seed = o.seed;
  return info;
}

// Note [GPT saved model]: --save-final DIR writes what Hugging Face's from_pretrained reads for a
// GPT2LMHeadModel: model.safetensors (hf_state_dict: HF's names, Conv1D weights as (in, out),
// lm_head.weight), config.json, and the tokenizer's vocab.json and merges.txt.
void save_gpt_pretrained(const std::string& dir, const nn::Gpt& model,
                         const std::string& tokenizer_dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LOOM_CHECK_AS(DataError, !ec, "[train] cannot create ", dir, ": ", ec.message());
  io::TensorMap tensors;
  for (auto& [name, t] : model.hf_state_dict()) tensors.emplace_back(name, t.to(kCPU));
  io::save_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  io::atomic_write_file(dir + "/config.json", model.config().hf_config_json());
  for (const char* f : {"vocab.json", "merges.txt"})
    io::atomic_write_file(dir + "/" + f, io::read_file(tokenizer_dir + "/" + f));
}

TrainResult run_gpt(const TrainOptions& o, Reporter* rep) {
  auto say = [&](const std::string& line) {
    if (rep) rep->on_message(line);
  };
  const Device device(o.device);
  const char* ws = std::getenv("WORLD_SIZE");
  LOOM_CHECK_AS(NotImplementedError, ws == nullptr || std::string(ws) == "1",
                "[train] --model gpt trains in one process (WORLD_SIZE is ", ws ? ws : "",
                "): drop --nproc");
  if (o.threads > 0) set_num_threads(o.threads);
  std::optional<DeviceGuard> device_guard;
  if (device.is_cuda()) device_guard.emplace(device);

  data::TextShardsOptions to;
  to.seq_len = o.seq_len;
  to.vocab_size = o.vocab;
  const std::string corpus = o.corpus_dir.empty() ? data::default_fortunes_dir() : o.corpus_dir;
  const data::TextShards text = data::text_shards(corpus, to);
  const data::BpeTokenizer tok = data::BpeTokenizer::load(text.tokenizer);
  auto train_ds = std::make_shared<const data::ShardReader>(text.train);
  auto val_ds = std::make_shared<const data::ShardReader>(text.val);

  const nn::GptConfig config = gpt_preset(o.gpt, text.vocab_size, o.seq_len);
  Generator gen(o.seed);
  nn::Gpt model(config, &gen);
  if (!device.is_cpu()) model.to(device);
  optim::AdamOptions ao;
  ao.lr = o.lr;
  ao.betas = {0.9, 0.95};
  ao.weight_decay = o.weight_decay;
  optim::AdamW opt(model.parameters(), ao);

  data::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.workers = o.workers;
  lo.order.seed = o.seed;
  data::Loader loader(train_ds, lo);
  const int64_t steps_per_epoch = loader.batches_in_epoch();
  const int64_t total_steps = steps_per_epoch * o.epochs;
  if (rep) {
    RunInfo info = run_info_of(o, train_ds->size(), val_ds->size(), steps_per_epoch);
    info.model = "gpt " + o.gpt + ": " + config.str();
    info.optimizer = "AdamW lr " + fmt("%g", o.lr) + ", betas (0.9, 0.95), weight decay " +
                     fmt("%g", o.weight_decay) + ", warmup " + std::to_string(o.warmup) +
                     " steps, schedule " + o.schedule + ", gradient clip " + fmt("%g", o.grad_clip);
    info.dataset = "text windows of " + std::to_string(o.seq_len) + " tokens:";
    info.test_split = "validation";
    info.data =
        "text: " + text.describe() + "; tokenizer: " + tok.describe() + "; " + loader.describe();
    if (device.is_cuda())
      info.device = device.str() + " (" + cuda::device_properties(device.index()).name + ")";
    rep->on_start(info);
  }

  std::optional<CompiledFunction> compiled;
  if (o.compile) {
    compiled = compile(
        [&model](const std::vector<Tensor>& in) -> std::vector<Tensor> {
          return {model.loss(in[0], in[1])};
        },
        {.name = "loom train: gpt loss"});
  }
  // Inputs and targets of a batch of windows, on the model's device.
  auto split = [&](const data::Batch& b) {
    const Tensor w = b["tokens"].to(device).to(kInt64);
    const int64_t t = w.size(1) - 1;
    return std::make_pair(narrow(w, 1, 0, t).contiguous(), narrow(w, 1, 1, t).contiguous());
  };
  auto lr_at = [&](int64_t step) {
    if (o.warmup > 0 && step < o.warmup)
      return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup);
    if (o.schedule != "cosine") return o.lr;
    const double span = static_cast<double>(std::max<int64_t>(1, total_steps - o.warmup));
    const double done = static_cast<double>(step - o.warmup) / span;
    return o.lr * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, done))));
  };
  auto validate = [&]() {
    model.eval();
    autograd::NoGradGuard no_grad;
    data::LoaderOptions vo;
    vo.batch_size = o.batch;
    vo.order.shuffle = data::ShuffleMode::None;
    data::Loader vl(val_ds, vo);
    Tensor sum;
    int64_t windows = 0;
    while (std::optional<data::Batch> b = vl.next()) {
      const auto [x, y] = split(*b);
      const Tensor l = mul(model.loss(x, y).to(kFloat64), static_cast<double>(b->size()));
      sum = sum.defined() ? add(sum, l) : l;
      windows += b->size();
    }
    model.train();
    return sum.item<double>() / static_cast<double>(windows);
  };

  const double peak = float32_peak(device);
  const double flops_per_token = config.flops_per_token(o.seq_len);
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  int64_t step = 0, tokens = 0;
  const int64_t report_every = std::max<int64_t>(1, steps_per_epoch / 5);
  for (int64_t epoch = 0; epoch < o.epochs && !(o.max_steps > 0 && step >= o.max_steps); ++epoch) {
    loader.set_epoch(epoch);
    Tensor loss_sum;  // on the model's device: read once, at the end of the epoch
    int64_t epoch_steps = 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    auto window_start = epoch_start;
    int64_t window_tokens = 0;
    while (std::optional<data::Batch> b = loader.next()) {
      const auto [x, y] = split(*b);
      for (optim::ParamGroup& g : opt.param_groups()) g.set_lr(lr_at(step));
      opt.zero_grad();
      const Tensor loss = compiled ? (*compiled)({x, y})[0] : model.loss(x, y);
      autograd::backward({loss});
      if (o.grad_clip > 0) optim::clip_grad_norm_(model.parameters(), o.grad_clip);
      opt.step();
      const Tensor l64 = loss.detach().to(kFloat64);
      loss_sum = loss_sum.defined() ? add(loss_sum, l64) : l64;
      ++step;
      ++epoch_steps;
      tokens += x.numel();
      window_tokens += x.numel();
      const bool last = epoch_steps == steps_per_epoch;
      if (epoch_steps % report_every == 0 || last || step == 1) {
        const double l = loss.item<double>();  // waits for the device
        LOOM_CHECK(std::isfinite(l), "[train] the loss became ", l, " at step ", step,
                   "; try a smaller --lr");
        result.final_loss = l;
        const auto now = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(now - window_start).count();
        const double tps = static_cast<double>(window_tokens) / std::max(s, 1e-9);
        std::string line = "step " + std::to_string(step) + "/" + std::to_string(total_steps) +
                           fmt(": loss %.4f, lr %.3g, %.0f tokens/s", l, lr_at(step - 1), tps);
        if (peak > 0) line += fmt(", MFU %.1f%% (float32)", 100.0 * tps * flops_per_token / peak);
        say(line);
        window_start = now;
        window_tokens = 0;
      }
      if (o.max_steps > 0 && step >= o.max_steps) break;
    }
    EpochReport er;
    er.epoch = epoch;
    er.train_loss =
        loss_sum.item<double>() / static_cast<double>(std::max<int64_t>(1, epoch_steps));
    er.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    if (rep) rep->on_epoch_end(er);
    if (o.validate) {
      const auto v0 = std::chrono::steady_clock::now();
      er.val_loss = validate();
      result.validation_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - v0).count();
      say(fmt("epoch %.0f: validation loss %.4f, perplexity %.2f (%.0f windows)",
              static_cast<double>(epoch + 1), er.val_loss, std::exp(er.val_loss),
              static_cast<double>(val_ds->size())));
    }
    result.epochs.push_back(er);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
                   result.validation_seconds;
  result.global_step = result.steps_run = step;
  result.samples_per_second = static_cast<double>(tokens) / std::max(result.seconds, 1e-9);
  if (!result.epochs.empty()) result.test_loss = result.epochs.back().val_loss;
  std::string end =
      fmt("trained %.0f steps, %.0f tokens in %.1f s: %.0f tokens/s", static_cast<double>(step),
          static_cast<double>(tokens), result.seconds, result.samples_per_second);
  if (peak > 0)
    end +=
        fmt(", MFU %.1f%% (float32)", 100.0 * result.samples_per_second * flops_per_token / peak);
  if (!std::isnan(result.test_loss))
    end += fmt(" | validation perplexity %.2f", std::exp(result.test_loss));
  say(end);
  if (compiled) {
    const CompileReport cr = compiled->report();
    const std::string summary = cr.str();
    say("compiled: " + summary.substr(0, summary.find('\n')));
    for (const std::string& why : cr.recompile_reasons) say("  recompiled: " + why);
  }
  if (o.sample_tokens > 0) {
    const int32_t eot = *tok.token_id("<|endoftext|>");
    const Tensor prompt = full({1, 1}, eot, TensorOptions(kInt64).with_device(device));
    Generator sample_gen(o.seed + 1);
    const Tensor ids = model.generate(
        prompt,
        {.max_new_tokens = o.sample_tokens, .temperature = 0.8, .top_k = 40, .gen = &sample_gen});
    const std::vector<int64_t> v = to_vector<int64_t>(ids.to(kCPU));
    const std::string text_out = tok.decode(std::vector<int32_t>(v.begin() + 1, v.end()));
    say("sample (" + std::to_string(o.sample_tokens) + " tokens, temperature 0.8, top-k 40):");
    size_t at = 0;
    while (at <= text_out.size()) {
      const size_t nl = text_out.find('\n', at);
      say("  | " + text_out.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  if (!o.save_final.empty()) {
    save_gpt_pretrained(o.save_final, model, text.tokenizer);
    say("model written to " + o.save_final +
        "/ (model.safetensors, config.json, vocab.json, merges.txt: Hugging Face's GPT-2 layout)");
  }
  if (o.max_steps > 0 && step >= o.max_steps && step < total_steps) {
    result.status = TrainResult::Status::Stopped;
    say("stopped at step " + std::to_string(step) + " (--max-steps)");
  }
  return result;
}

}  // namespace loom::train::detail
