// `loom train`: the main job. Parses options into train::TrainOptions and runs a train::Trainer
// (include/loom/train/trainer.h), or, with --nproc N, launches N workers that do.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "distributed/launch/launch.h"
#include "loom/config.h"
#include "loom/error.h"
#include "loom/parse.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

void usage() {
  std::printf(
      "usage: loom train [--model mlp|cnn|gpt] [--optimizer sgd|adam|adamw] [--lr X] [--momentum "
      "X]\n"
      "                  [--weight-decay X] [--schedule none|cosine] [--epochs N] [--batch N] "
      "[--seed S]\n"
      "                  [--data DIR] [--train-samples N] [--threads N] [--workers N] [--augment] "
      "[--no-val] [--compile]\n"
      "                  [--device cpu|cuda[:N]] [--checkpoint-dir DIR [--checkpoint-every N] "
      "[--keep-checkpoints K]\n"
      "                  [--resume]] [--save-final FILE] [--nproc N [--max-restarts R]]\n"
      "                  [--profile FILE[.gz] [--profile-steps W,WU,A]]\n"
      "                  [--inject-fault mismatch|hang|kill --rank R --step S] [--no-progress]\n"
      "                  --model gpt: [--gpt tiny|mini|small4|small] [--corpus DIR] [--seq-len N]\n"
      "                  [--vocab N] [--warmup N] [--grad-clip X] [--sample N] [--save-final DIR]\n"
      "                  [--grad-accum N] [--activation-checkpointing] [--precision f32|bf16|f16]\n"
      "  Trains on Fashion-MNIST (Debian package dataset-fashion-mnist, or --data / "
      "LOOM_FASHION_MNIST_DIR)\n"
      "  and reports validation loss and accuracy after every epoch (on the test split; --no-val "
      "skips it),\n"
      "  then test accuracy, time and samples/s. Defaults: mlp, Adam lr 0.001 (SGD: momentum 0.9), "
      "3 epochs,\n"
      "  batch 128. SIGINT/SIGTERM save a checkpoint and stop; --resume continues from the last "
      "checkpoint\n"
      "  bit-identically (a changed --lr is allowed and scales the schedule). Checkpoints are "
      "checksummed;\n"
      "  the newest --keep-checkpoints (default 2) are kept. --nproc N trains data-parallel on N "
      "local\n"
      "  processes (each takes 1/N of every batch; gradients are averaged); with --max-restarts a "
      "failed\n"
      "  group is restarted and resumes from its last checkpoint. --save-final writes the model "
      "with its\n"
      "  metadata for `loom eval`. --profile writes a Chrome trace (ui.perfetto.dev) of the steps\n"
      "  --profile-steps selects (skip W, warm up WU, record A; default 5,2,10) and prints the top "
      "operators\n"
      "  and the step breakdown. --inject-fault makes rank R fail at step S (also "
      "LOOM_INJECT_FAULT=\n"
      "  KIND:RANK:STEP), to see the distributed layer's reports: run with "
      "LOOM_DIST_DEBUG=detail,\n"
      "  LOOM_DIST_TIMEOUT and LOOM_FLIGHT_DIR, then `loom dist-debug DIR`. --device cuda[:N] "
      "trains on\n"
      "  one GPU; its checkpoints resume on the CPU and the other way round. --compile runs the "
      "forward\n"
      "  pass and loss through loom::compile (captured once per batch shape, then replayed; "
      "`loom explain`).\n"
      "  --model gpt trains a GPT-2-style language model on text (default: Debian's fortunes, "
      "package\n"
      "  fortunes; --corpus DIR or LOOM_FORTUNES_DIR), tokenised by a byte-level BPE of --vocab "
      "tokens\n"
      "  that loom trains and keeps in its cache; it prints loss, tokens/s (and MFU on a GPU), "
      "the\n"
      "  validation perplexity after every epoch, and --sample N tokens of text at the end. "
      "AdamW,\n"
      "  linear --warmup then --schedule cosine to a tenth, gradients clipped to --grad-clip;\n"
      "  --save-final DIR writes it in Hugging Face's GPT-2 layout (model.safetensors, "
      "config.json,\n"
      "  vocab.json, merges.txt). --grad-accum N sums the gradients of N micro-batches of --batch\n"
      "  windows per step; --activation-checkpointing recomputes each block's activations in the\n"
      "  backward (less memory, the same gradients); checkpoints and --resume work as above.\n");
}

// `loom train --nproc N`: this process becomes the launcher of N workers running the same command
// (without --nproc), joined through torchrun's environment variables.
int launch_workers(const std::vector<std::string>& argv, int nproc, int max_restarts) {
  dist::LaunchOptions lo;
  lo.nproc = nproc;
  lo.max_restarts = max_restarts;
  lo.command = {self_dir() + "/loom"};
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--nproc" || a == "--max-restarts") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0 || a.rfind("--max-restarts=", 0) == 0) continue;
    lo.command.push_back(a);
  }
  return dist::launch(lo);
}

int run_train(const std::vector<std::string>& argv) {
  Args args(
      argv,
      {"help", "resume", "no-progress", "augment", "no-val", "compile", "activation-checkpointing"},
      {"model",
       "optimizer",
       "lr",
       "momentum",
       "weight-decay",
       "schedule",
       "epochs",
       "batch",
       "seed",
       "data",
       "train-samples",
       "threads",
       "workers",
       "device",
       "checkpoint-dir",
       "checkpoint-every",
       "keep-checkpoints",
       "save-final",
       "max-steps",
       "nproc",
       "max-restarts",
       "profile",
       "profile-steps",
       "inject-fault",
       "rank",
       "step",
       "gpt",
       "corpus",
       "seq-len",
       "vocab",
       "warmup",
       "grad-clip",
       "sample",
       "grad-accum",
       "precision"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  LOOM_CHECK(args.positionals().empty(), "[loom train] unexpected argument '",
             args.positionals().empty() ? "" : args.positionals()[0], "' (see loom train --help)");
  const int nproc = static_cast<int>(args.get_int("nproc", 1, 1, 1024));
  const int max_restarts = static_cast<int>(args.get_int("max-restarts", 0, 0, 1000));
  train::TrainOptions o;
  o.model = args.get_or("model", o.model);
  // --model gpt trains with AdamW unless told otherwise (and refuses anything else).
  o.optimizer = args.get_or("optimizer", o.model == "gpt" ? "adamw" : o.optimizer);
  o.lr = args.get_double("lr", o.lr, 1e-12, 1e3);
  o.momentum = args.get_double("momentum", o.momentum, 0, 0.999999);
  o.weight_decay = args.get_double("weight-decay", o.weight_decay, 0, 1);
  o.schedule = args.get_or("schedule", o.schedule);
  o.epochs = args.get_int("epochs", o.epochs, 1, 1000000);
  o.batch = args.get_int("batch", o.batch, 1, 1 << 20);
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  o.train_samples = args.get_int("train-samples", 0, 1, int64_t{1} << 40);
  o.threads = static_cast<int>(args.get_int("threads", 0, 1, 1024));
  o.workers = static_cast<int>(args.get_int("workers", o.workers, 0, 256));
  o.augment = args.flag("augment");
  o.compile = args.flag("compile");
  o.validate = !args.flag("no-val");
  o.device = args.get_or("device", o.device);
  o.data_dir = args.get_or("data", "");
  o.checkpoint_dir = args.get_or("checkpoint-dir", "");
  o.checkpoint_every = args.get_int("checkpoint-every", o.checkpoint_every, 1, int64_t{1} << 40);
  o.keep_checkpoints =
      static_cast<int>(args.get_int("keep-checkpoints", o.keep_checkpoints, 1, 1000000));
  // A group restarted by the launcher (--max-restarts) resumes from its last checkpoint.
  o.resume = args.flag("resume") ||
             (config::get_int("LOOM_RESTART_COUNT", 0) > 0 && !o.checkpoint_dir.empty());
  o.save_final = args.get_or("save-final", "");
  o.max_steps = args.get_int("max-steps", 0, 1, int64_t{1} << 40);
  o.profile_path = args.get_or("profile", "");
  o.profile_steps = args.get_or("profile-steps", o.profile_steps);
  o.gpt = args.get_or("gpt", o.gpt);
  o.corpus_dir = args.get_or("corpus", "");
  o.seq_len = args.get_int("seq-len", o.seq_len, 1, 1 << 20);
  o.vocab = args.get_int("vocab", o.vocab, 257, 1 << 24);
  o.warmup = args.get_int("warmup", o.warmup, 0, int64_t{1} << 40);
  o.grad_clip = args.get_double("grad-clip", o.grad_clip, 0, 1e9);
  o.sample_tokens = args.get_int("sample", o.sample_tokens, 0, 1 << 20);
  o.grad_accum = args.get_int("grad-accum", o.grad_accum, 1, 1 << 20);
  o.activation_checkpointing = args.flag("activation-checkpointing");
  o.precision = args.get_or("precision", o.precision);
  if (auto kind = args.get("inject-fault")) {
    LOOM_CHECK(
        args.get("rank") && args.get("step"), "[loom train] --inject-fault ", *kind,
        " needs --rank R and --step S (the rank that fails and the step before which it does)");
    o.fault = train::FaultSpec::parse(*kind, args.get_int("rank", 0, 0, 1 << 20),
                                      args.get_int("step", 0, 0, int64_t{1} << 40));
  } else {
    LOOM_CHECK(!args.get("rank") && !args.get("step"),
               "[loom train] --rank and --step go with --inject-fault");
  }
  LOOM_CHECK(o.batch % nproc == 0, "[loom train] --batch ", o.batch,
             " must be a multiple of --nproc ", nproc,
             " (every rank takes the same share of a batch)");
  LOOM_CHECK_AS(NotImplementedError, nproc == 1 || o.device.rfind("cuda", 0) != 0,
                "[loom train] --device ", o.device, " with --nproc ", nproc,
                ": multi-GPU training needs the NCCL backend (a later issue); drop --nproc to "
                "train on one GPU");
  // Options are checked (and the data packed, once) before any worker starts.
  train::Trainer trainer(o, nullptr);
  train::Trainer::prepare_data(o);
  // The workers run the same command without --nproc (launch_workers removes it).
  if (nproc > 1) {
    LOOM_CHECK(
        std::getenv("WORLD_SIZE") == nullptr, "[loom train] --nproc ", nproc,
        " inside a process that a "
        "launcher started (WORLD_SIZE is set): drop --nproc, the launcher already runs the ranks");
    return launch_workers(argv, nproc, max_restarts);
  }

  const bool bar = isatty(STDOUT_FILENO) && !args.flag("no-progress");
  std::unique_ptr<train::Reporter> reporter = train::make_console_reporter(bar);
  train::Trainer run(o, reporter.get());
  return run.run().exit_code();
}

const RegisterCommand kTrain(
    "train", "train an MLP or CNN on Fashion-MNIST (the main job), or a GPT on text", run_train);

}  // namespace
}  // namespace loom::cli
