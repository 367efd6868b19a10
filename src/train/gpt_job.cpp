// `loom train --model gpt`: a GPT-2-style language model (nn/gpt.h) trained on text.
//
// Note [GPT training]
//   Data: the corpus's tokenizer and token windows (Note [Text shards] in data/text.h), read by the
//   loader like any shard dataset (shuffled per epoch from the seed; workers), through a
//   DeviceStage (pinned staging and copies on a side stream on a GPU; DeviceBatches). A window of
//   seq_len + 1 tokens gives the inputs [0, seq_len) and the targets [1, seq_len].
//   Model: a preset (--gpt tiny|mini|small4|small) with block_size = seq_len and the tokenizer's
//   vocabulary; initialised from Generator(seed) on the CPU, then moved to the device; its dropouts
//   draw from that generator. --activation-checkpointing recomputes every block in the backward
//   (Note [Activation checkpointing] in autograd_checkpoint.h): the same gradients, bitwise on the
//   CPU. Step: --grad-accum N micro-batches of --batch windows, each loss scaled by 1/N before its
//   backward so the gradients add up to those of one batch of N x --batch windows (the last step of
//   an epoch takes the micro-batches left, 1 to N, and scales by that count); the step's loss is
//   the mean of the micro-batches'. AdamW only (betas 0.9, 0.95, as GPT-2's recipes; --weight-decay
//   decoupled; another --optimizer is refused), the learning rate warmed up linearly over --warmup
//   steps then, with --schedule cosine, down to a tenth by the end, a pure function of the step;
//   gradients clipped to a global norm of --grad-clip (0: off). --compile runs the loss through
//   loom::compile (a joint graph). --precision bf16|f16 runs the forward pass under autocast
//   (loom/autocast.h; float32 master weights); f16 adds dynamic loss scaling (amp::GradScaler:
//   the loss scaled before backward, the gradients unscaled before clipping, a step with inf/NaN
//   gradients skipped).
//   Checkpoints and resume: the general trainer's format and validation (state.cpp): parameters,
//   AdamW's state, the loss scaler's scale and growth tracker (f16), the loop position, the
//   loader's state after the step's last micro-batch, and the model's and the default generator's
//   states; the schedule needs no state. A run stopped at step k (--max-steps, SIGINT or SIGTERM
//   write a checkpoint) and resumed with --resume computes the same bits as an uninterrupted run on
//   the CPU (tests/integration/train_gpt_resume.sh). Reported: the loss (read back from the device
//   only where shown), tokens/s counting every micro-batch, and on CUDA the model FLOP utilisation
//   (GptConfig::flops_per_token against the device's dense peak at the training precision); after
//   each epoch the validation loss and perplexity (exp of the mean loss over every validation
//   window); at the end, text sampled from the model. Not yet: several processes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "loom/amp.h"
#include "loom/autocast.h"
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

// Dense FLOP/s of the device at the model's precision (float32 without tensor cores, as TF32 is off
// by default; bf16 and f16 on tensor cores), or 0 when unknown.
double peak_flops(const Device& d, const std::string& precision) {
  if (!d.is_cuda()) return 0;
  const bool f32 = precision == "f32";
  const std::string name = cuda::device_properties(d.index()).name;
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos)
    return f32 ? 67e12 : 989e12;  // SXM: 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz; dense bf16
  if (name.find("A100") != std::string::npos) return f32 ? 19.5e12 : 312e12;
  return 0;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d);
  return buf;
}

}  // namespace

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

  nn::GptConfig config = gpt_preset(o.gpt, text.vocab_size, o.seq_len);
  config.activation_checkpointing = o.activation_checkpointing;
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
  // Note [GPT training]: a step takes --grad-accum micro-batches; the last step of an epoch takes
  // what is left of it (1 to --grad-accum micro-batches).
  const int64_t batches_per_epoch = loader.batches_in_epoch();
  const int64_t accum = o.grad_accum;
  const int64_t steps_per_epoch = (batches_per_epoch + accum - 1) / accum;
  const int64_t total_steps = steps_per_epoch * o.epochs;
  // float16 needs loss scaling (its gradients underflow); bfloat16 has float32's range.
  std::optional<amp::GradScaler> scaler;
  if (o.precision == "f16") scaler.emplace();
  // The schedule is a function of the step: it has no state.
  const RunState state{&model, &opt, nullptr, &gen, scaler ? &*scaler : nullptr};

  if (!o.checkpoint_dir.empty()) {
    const io::OrphanSweep swept = io::remove_orphan_temp_files(o.checkpoint_dir);
    if (!swept.files.empty())
      say(fmt("removed %.0f temporary file(s) that interrupted checkpoint writes left in ",
              static_cast<double>(swept.files.size())) +
          o.checkpoint_dir);
  }
  Loop loop;
  if (o.resume) {
    RunShape shape{steps_per_epoch, loader.order().epoch_size(1), loader.config_hash()};
    shape.samples_per_step = o.batch * accum;
    Restored restored = restore_state(o, shape, state);
    for (const auto& note : restored.notes) say(note);
    if (restored.found) {
      loop = restored.loop;
      say("resumed from " + restored.path + " (epoch " + std::to_string(loop.epoch + 1) +
          ", step " + std::to_string(loop.global_step) + ")");
    } else {
      say("no checkpoint in " + o.checkpoint_dir + ": starting from scratch");
    }
  }
  if (rep) {
    RunInfo info = run_info_of(o, train_ds->size(), val_ds->size(), steps_per_epoch);
    info.model = "gpt " + o.gpt + ": " + config.str();
    if (o.activation_checkpointing) info.model += ", activation checkpointing of every block";
    if (o.precision != "f32") info.model += ", " + o.precision + " autocast";
    info.optimizer = "AdamW lr " + fmt("%g", o.lr) + ", betas (0.9, 0.95), weight decay " +
                     fmt("%g", o.weight_decay) + ", warmup " + std::to_string(o.warmup) +
                     " steps, schedule " + o.schedule + ", gradient clip " + fmt("%g", o.grad_clip);
    if (accum > 1)
      info.optimizer += ", " + std::to_string(accum) + " micro-batches of " +
                        std::to_string(o.batch) + " windows a step (" +
                        std::to_string(accum * o.batch * o.seq_len) + " tokens)";
    info.dataset = "text windows of " + std::to_string(o.seq_len) + " tokens:";
    info.test_split = "validation";
    info.data =
        "text: " + text.describe() + "; tokenizer: " + tok.describe() + "; " + loader.describe();
    if (device.is_cuda())
      info.device = device.str() + " (" + cuda::device_properties(device.index()).name + ")";
    rep->on_start(info);
  }
  TrainResult result;
  result.global_step = loop.global_step;
  if (loop.epoch >= o.epochs) {
    result.status = TrainResult::Status::AlreadyFinished;
    say("the run in " + o.checkpoint_dir + " already finished (step " +
        std::to_string(loop.global_step) + ", --epochs " + std::to_string(o.epochs) +
        "); nothing left to train (pass a larger --epochs to train on)");
    return result;
  }

  std::optional<CompiledFunction> compiled;
  if (o.compile) {
    compiled = compile(
        [&model](const std::vector<Tensor>& in) -> std::vector<Tensor> {
          return {model.loss(in[0], in[1])};
        },
        {.name = "loom train: gpt loss"});
  }
  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    std::optional<AutocastGuard> autocast;
    if (o.precision != "f32")
      autocast.emplace(device.type(), o.precision == "bf16" ? kBFloat16 : kFloat16);
    return compiled ? (*compiled)({x, y})[0] : model.loss(x, y);
  };
  // Inputs and targets of a batch of windows (already on the model's device: DeviceBatches).
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
      const Tensor l = mul(loss_of(x, y).to(kFloat64), static_cast<double>(b->size()));
      sum = sum.defined() ? add(sum, l) : l;
      windows += b->size();
    }
    model.train();
    return sum.item<double>() / static_cast<double>(windows);
  };
  auto checkpoint = [&](const std::string& why) {
    if (o.checkpoint_dir.empty()) return;
    const auto c0 = std::chrono::steady_clock::now();
    const std::string path = save_state(o, state, loop);
    if (rep) {
      CheckpointInfo ci;
      ci.path = path;
      ci.step = loop.global_step;
      ci.bytes = std::filesystem::file_size(path + ".safetensors") +
                 std::filesystem::file_size(path + ".json");
      ci.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      ci.why = why;
      rep->on_checkpoint(ci);
    }
  };

  const double peak = peak_flops(device, o.precision);
  const double flops_per_token = config.flops_per_token(o.seq_len);
  const std::string mfu_of = o.precision == "f32" ? "float32" : o.precision;
  const std::shared_ptr<void> stop_signals = catch_stop_signals();
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  bool stop = false;
  double stopped_val_loss = NAN;  // validated where a stop ended an epoch early
  const int64_t report_every = std::max<int64_t>(1, steps_per_epoch / 5);
  model.train();
  while (loop.epoch < o.epochs && !stop) {
    if (loop.data && loop.data->epoch == loop.epoch) {
      loader.load_state(*loop.data);  // a resumed run: continue at exactly the next window
    } else {
      loader.set_epoch(loop.epoch);
    }
    DeviceBatches batches(loader, device);
    Tensor loss_sum;  // of the steps' losses, on the model's device: read at the end of the epoch
    int64_t epoch_steps = 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    auto window_start = epoch_start;
    int64_t window_tokens = 0;
    while (loop.batch_in_epoch < steps_per_epoch) {
      const int64_t micro =
          std::min(accum, batches_per_epoch - loop.batch_in_epoch * accum);  // this step's
      for (optim::ParamGroup& g : opt.param_groups()) g.set_lr(lr_at(loop.global_step));
      opt.zero_grad();
      Tensor step_loss;  // the sum of the micro-batches' (unscaled) losses, detached
      for (int64_t m = 0; m < micro; ++m) {
        std::optional<data::LoaderState> state_after;
        std::optional<data::Batch> b = batches.next(state_after);
        LOOM_INTERNAL_ASSERT(b.has_value(), "the loader ended epoch ", loop.epoch, " early");
        const auto [x, y] = split(*b);
        b.reset();  // its buffer goes back to the loader's pool
        const Tensor loss = loss_of(x, y);
        const Tensor scaled = micro > 1 ? mul(loss, 1.0 / static_cast<double>(micro)) : loss;
        autograd::backward({scaler ? scaler->scale(scaled) : scaled});
        const Tensor l = loss.detach().to(kFloat64);
        step_loss = step_loss.defined() ? add(step_loss, l) : l;
        loop.data = std::move(state_after);
        tokens += x.numel();
        window_tokens += x.numel();
      }
      if (scaler) {  // float16: dynamic loss scaling (a step with inf/NaN gradients is skipped)
        scaler->unscale_(opt);
        if (o.grad_clip > 0) optim::clip_grad_norm_(model.parameters(), o.grad_clip);
        scaler->step(opt);
        scaler->update();
      } else {
        if (o.grad_clip > 0) optim::clip_grad_norm_(model.parameters(), o.grad_clip);
        opt.step();
      }
      if (micro > 1) step_loss = mul(step_loss, 1.0 / static_cast<double>(micro));
      loss_sum = loss_sum.defined() ? add(loss_sum, step_loss) : step_loss;
      ++loop.batch_in_epoch;
      ++loop.global_step;
      ++result.steps_run;
      ++epoch_steps;
      const bool last = loop.batch_in_epoch == steps_per_epoch;
      const bool max_reached = o.max_steps > 0 && result.steps_run >= o.max_steps;
      stop = max_reached || stop_signal() != 0;
      if (loop.batch_in_epoch % report_every == 0 || last || loop.global_step == 1 || stop) {
        const double l = step_loss.item<double>();  // waits for the device
        LOOM_CHECK(std::isfinite(l), "[train] the loss became ", l, " at step ", loop.global_step,
                   "; try a smaller --lr");
        result.final_loss = l;
        const auto now = std::chrono::steady_clock::now();
        const double s = std::chrono::duration<double>(now - window_start).count();
        const double tps = static_cast<double>(window_tokens) / std::max(s, 1e-9);
        std::string line =
            "step " + std::to_string(loop.global_step) + "/" + std::to_string(total_steps) +
            fmt(": loss %.4f, lr %.3g, %.0f tokens/s", l, lr_at(loop.global_step - 1), tps);
        if (peak > 0)
          line +=
              ", MFU " + fmt("%.1f%%", 100.0 * tps * flops_per_token / peak) + " (" + mfu_of + ")";
        say(line);
        window_start = now;
        window_tokens = 0;
      }
      if (last) break;
      if (stop) {
        checkpoint(stop_signal() ? std::string("stopping (") + strsignal(stop_signal()) + ")"
                                 : std::string("stopping (--max-steps)"));
        break;
      }
      if (loop.global_step % o.checkpoint_every == 0)
        checkpoint("every " + std::to_string(o.checkpoint_every) + " steps");
    }
    if (loop.batch_in_epoch < steps_per_epoch) {
      // Stopped mid-epoch: the model as it stands is validated all the same (no random draws, so a
      // resumed run is not disturbed).
      if (o.validate) {
        const auto v0 = std::chrono::steady_clock::now();
        stopped_val_loss = validate();
        result.validation_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - v0).count();
        say(fmt("step %.0f: validation loss %.4f, perplexity %.2f (%.0f windows)",
                static_cast<double>(loop.global_step), stopped_val_loss, std::exp(stopped_val_loss),
                static_cast<double>(val_ds->size())));
      }
      break;
    }
    loop.batch_in_epoch = 0;
    ++loop.epoch;
    checkpoint("end of epoch " + std::to_string(loop.epoch));
    EpochReport er;
    er.epoch = loop.epoch - 1;
    er.train_loss =
        loss_sum.defined() ? loss_sum.item<double>() / static_cast<double>(epoch_steps) : NAN;
    er.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    if (rep) rep->on_epoch_end(er);
    if (o.validate) {
      const auto v0 = std::chrono::steady_clock::now();
      er.val_loss = validate();
      result.validation_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - v0).count();
      say(fmt("epoch %.0f: validation loss %.4f, perplexity %.2f (%.0f windows)",
              static_cast<double>(loop.epoch), er.val_loss, std::exp(er.val_loss),
              static_cast<double>(val_ds->size())));
    }
    result.epochs.push_back(er);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
                   result.validation_seconds;
  result.global_step = loop.global_step;
  result.samples_per_second = static_cast<double>(tokens) / std::max(result.seconds, 1e-9);
  if (!result.epochs.empty()) result.test_loss = result.epochs.back().val_loss;
  if (!std::isnan(stopped_val_loss)) result.test_loss = stopped_val_loss;
  std::string end = fmt("trained %.0f steps, %.0f tokens in %.1f s: %.0f tokens/s",
                        static_cast<double>(result.steps_run), static_cast<double>(tokens),
                        result.seconds, result.samples_per_second);
  if (peak > 0)
    end += ", MFU " + fmt("%.1f%%", 100.0 * result.samples_per_second * flops_per_token / peak) +
           " (" + mfu_of + ")";
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
    std::optional<AutocastGuard> autocast;  // sampling at the training precision
    if (o.precision != "f32")
      autocast.emplace(device.type(), o.precision == "bf16" ? kBFloat16 : kFloat16);
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
  if (stop && loop.global_step < total_steps) {
    result.status = TrainResult::Status::Stopped;
    result.signal = stop_signal();
    say("stopped at step " + std::to_string(loop.global_step) + " (" +
        (result.signal ? std::string(strsignal(result.signal)) : std::string("--max-steps")) + ")" +
        (o.checkpoint_dir.empty() ? "" : "; resume with the same command and --resume"));
  }
  return result;
}
}  // namespace loom::train::detail
