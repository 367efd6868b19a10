// TrainOptions, FaultSpec and TrainResult: checks, descriptions and the JSON the checkpoints keep.
#include <cmath>

#include "loom/cuda.h"
#include "loom/device.h"
#include "loom/error.h"
#include "loom/parse.h"
#include "loom/train/trainer.h"

namespace loom::train {
namespace {

const char* fault_name(FaultKind k) {
  switch (k) {
    case FaultKind::Mismatch:
      return "mismatch";
    case FaultKind::Hang:
      return "hang";
    case FaultKind::Kill:
      return "kill";
    case FaultKind::None:
      break;
  }
  return "none";
}

void check_one_of(const std::string& value, const char* option,
                  std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += list.empty() ? a : std::string(", ") + a;
  }
  LOOM_THROW(ValueError, "[train] ", option, " must be one of ", list, " but got '", value, "'");
}

void check_range(int64_t v, const char* option, int64_t lo, int64_t hi) {
  LOOM_CHECK(v >= lo && v <= hi, "[train] ", option, " must be an integer ", describe_range(lo, hi),
             " but got ", v);
}

}  // namespace

FaultSpec FaultSpec::parse(const std::string& kind, int64_t rank, int64_t step) {
  FaultSpec f;
  if (kind == "mismatch") {
    f.kind = FaultKind::Mismatch;
  } else if (kind == "hang") {
    f.kind = FaultKind::Hang;
  } else if (kind == "kill") {
    f.kind = FaultKind::Kill;
  } else {
    LOOM_THROW(ValueError, "[train] --inject-fault must be one of mismatch, hang, kill but got '",
               kind, "'");
  }
  check_range(rank, "the fault's rank", 0, 1 << 20);
  check_range(step, "the fault's step", 0, int64_t{1} << 40);
  f.rank = static_cast<int>(rank);
  f.step = step;
  return f;
}

FaultSpec FaultSpec::parse(const std::string& spec) {
  const size_t a = spec.find(':');
  const size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
  LOOM_CHECK(b != std::string::npos && spec.find(':', b + 1) == std::string::npos,
             "[train] LOOM_INJECT_FAULT must be KIND:RANK:STEP (e.g. kill:1:20) but got '", spec,
             "'");
  return parse(spec.substr(0, a),
               parse_int(spec.substr(a + 1, b - a - 1), "[train] LOOM_INJECT_FAULT's rank", 0),
               parse_int(spec.substr(b + 1), "[train] LOOM_INJECT_FAULT's step", 0));
}

std::string FaultSpec::describe() const {
  if (kind == FaultKind::None) return "none";
  return std::string(fault_name(kind)) + " on rank " + std::to_string(rank) + " at step " +
         std::to_string(step);
}

void TrainOptions::check() const {
  check_one_of(model, "--model", {"mlp", "cnn", "gpt"});
  if (model == "gpt") {
    check_one_of(gpt, "--gpt", {"tiny", "mini", "small4", "small"});
    check_range(seq_len, "--seq-len", 1, 1 << 20);
    check_range(vocab, "--vocab", 257, 1 << 24);
    check_range(warmup, "--warmup", 0, int64_t{1} << 40);
    check_range(sample_tokens, "--sample", 0, 1 << 20);
    LOOM_CHECK(std::isfinite(grad_clip) && grad_clip >= 0,
               "[train] --grad-clip must be a non-negative number but got ", grad_clip);
    check_range(grad_accum, "--grad-accum", 1, 1 << 20);
    check_one_of(precision, "--precision", {"f32", "bf16", "f16"});
    LOOM_CHECK(optimizer == "adamw", "[train] --model gpt trains with AdamW (GPT-2's recipe) but ",
               "got --optimizer ", optimizer, ": drop --optimizer or pass adamw");
    LOOM_CHECK_AS(NotImplementedError, !(compile && activation_checkpointing),
                  "[train] --compile with --activation-checkpointing: the compiled joint graph ",
                  "chooses what to recompute itself (its min cut); drop one of them");
    LOOM_CHECK_AS(NotImplementedError, fault.kind == FaultKind::None && profile_path.empty(),
                  "[train] --model gpt takes no --inject-fault or --profile yet");
  } else {
    LOOM_CHECK(grad_accum == 1 && !activation_checkpointing && precision == "f32",
               "[train] --grad-accum, --activation-checkpointing and --precision go with --model ",
               "gpt");
  }
  check_one_of(optimizer, "--optimizer", {"sgd", "adam", "adamw"});
  check_one_of(schedule, "--schedule", {"none", "cosine"});
  LOOM_CHECK(std::isfinite(lr) && lr > 0 && lr <= 1e3,
             "[train] --lr must be a number from 0 (exclusive) to 1000 but got ", lr);
  LOOM_CHECK(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
             "[train] --momentum must be in [0, 1) but got ", momentum);
  LOOM_CHECK(std::isfinite(weight_decay) && weight_decay >= 0 && weight_decay <= 1,
             "[train] --weight-decay must be from 0 to 1 but got ", weight_decay);
  check_range(epochs, "--epochs", 1, 1000000);
  check_range(batch, "--batch", 1, 1 << 20);
  check_range(train_samples, "--train-samples", 0, int64_t{1} << 40);
  check_range(workers, "--workers", 0, 256);
  check_range(threads, "--threads", 0, 1024);
  check_range(checkpoint_every, "--checkpoint-every", 1, int64_t{1} << 40);
  check_range(keep_checkpoints, "--keep-checkpoints", 1, 1000000);
  check_range(max_steps, "--max-steps", 0, int64_t{1} << 40);
  LOOM_CHECK(!resume || !checkpoint_dir.empty(), "[train] --resume needs --checkpoint-dir");
  // CUDA's build and devices are checked before the text is parsed: Device("cuda") asks the
  // runtime for its current device, which has nothing to say without one.
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    LOOM_CHECK_AS(NotImplementedError, cuda::is_built(), "[train] --device ", device,
                  ": this build has no CUDA backend (configure with -DLOOM_CUDA=ON on a machine "
                  "with the CUDA toolkit), or use --device cpu");
    LOOM_CHECK_AS(DeviceError, cuda::device_count() > 0, "[train] --device ", device,
                  ": no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use "
                  "--device cpu");
  }
  const Device dev(device);  // ValueError naming the text for anything but cpu, cuda[:N], meta
  LOOM_CHECK(!dev.is_meta(), "[train] --device meta has no data to train on: use cpu");
  if (dev.is_cuda()) {
    const int visible = cuda::device_count();
    LOOM_CHECK_AS(DeviceError, dev.index() < visible, "[train] --device ", device,
                  ": there is no such device (", visible, " visible: cuda:0 to cuda:", visible - 1,
                  ")");
  }
}

Json TrainOptions::identity() const {
  Json j = Json::object({{"model", model},
                         {"optimizer", optimizer},
                         {"weight_decay", weight_decay},
                         {"batch", batch},
                         {"seed", static_cast<int64_t>(seed)},
                         {"train_samples", train_samples},
                         {"schedule", schedule},
                         {"augment", augment}});
  if (compile) j.set("compile", true);
  if (model == "gpt") {
    j.set("gpt", gpt);
    j.set("seq_len", seq_len);
    j.set("vocab", vocab);
    j.set("grad_accum", grad_accum);  // a step's windows
    j.set("precision", precision);
  }
  if (optimizer == "sgd") j.set("momentum", momentum);
  if (schedule == "cosine") j.set("epochs", epochs);  // the schedule's length depends on it
  return j;
}

Json TrainOptions::to_json() const {
  Json j = identity();
  j.set("lr", lr);
  j.set("epochs", epochs);
  return j;
}

int TrainResult::exit_code() const {
  if (status != Status::Stopped) return 0;
  return signal ? 128 + signal : 3;
}

Reporter::~Reporter() = default;

}  // namespace loom::train
