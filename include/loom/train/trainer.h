// Trainer (train layer): the main job as a library. Fashion-MNIST shards -> shuffled loader ->
// model
// -> autograd -> optimizer -> data parallelism over the launcher's processes -> checkpoints and
// exact resume -> per-epoch validation, profile and report. `loom train` parses its options into
// TrainOptions and calls Trainer::run(); `loom eval` calls evaluate_saved_model().
//
// Ownership: a Trainer owns its model, optimizer, loader and process group for the length of run().
// Output goes to a Reporter (ConsoleReporter prints what `loom train` shows); the trainer itself
// writes nothing to stdout. Not thread-safe: one thread constructs the Trainer and calls run().
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/export.h"
#include "loom/json.h"

namespace loom::train {

// Note [Fault injection]: a deliberate failure of one rank at one step, so that the distributed
// layer's reports (contract mismatch, missing rank, flight records) can be seen with one command.
//   mismatch: rank R joins step S's collective with a tensor of another shape and dtype
//   hang:     rank R stops before step S's collectives and waits for a signal
//   kill:     rank R kills itself with SIGKILL before step S
enum class FaultKind : uint8_t { None, Mismatch, Hang, Kill };

struct LOOM_API FaultSpec {
  FaultKind kind = FaultKind::None;
  int rank = 0;
  int64_t step = 0;  // global step (0-based) before which the fault fires
  // "mismatch|hang|kill" with rank and step, or LOOM_INJECT_FAULT's "KIND:RANK:STEP".
  static FaultSpec parse(const std::string& kind, int64_t rank, int64_t step);
  static FaultSpec parse(const std::string& spec);
  std::string describe() const;  // "kill rank 1 at step 20" or "none"
};

struct LOOM_API TrainOptions {
  std::string model = "mlp";       // mlp | cnn | gpt (Note [GPT training] in train/gpt_job.cpp)
  std::string optimizer = "adam";  // sgd (with momentum) | adam | adamw (--model gpt: adamw only)
  double lr = 1e-3;
  double momentum = 0.9;          // sgd only
  double weight_decay = 0.0;      // L2 for sgd and adam, decoupled for adamw
  std::string schedule = "none";  // none | cosine (per step, to 0 at the end of the last epoch)
  int64_t epochs = 3;
  int64_t batch = 128;  // global batch, split evenly over the ranks
  uint64_t seed = 0;
  int64_t train_samples = 0;   // 0: all 60000
  bool augment = false;        // random 28x28 crops of the image padded by 2, horizontal flips
  int workers = 1;             // data loader threads
  std::string data_dir;        // Fashion-MNIST IDX files ("": default_fashion_mnist_dir())
  int threads = 0;             // intra-op threads (0: leave the default)
  std::string device = "cpu";  // cpu | cuda[:N] (one process; Note [Training on a device])
  bool validate = true;        // evaluate on the test split after every epoch
  bool compile = false;  // loom::compile the forward pass and loss (one process; backward eager)
  std::string checkpoint_dir;      // "": no checkpoints
  int64_t checkpoint_every = 100;  // steps
  int keep_checkpoints = 2;
  bool resume = false;       // continue from the newest checkpoint in checkpoint_dir
  std::string save_final;    // write the trained model (with its metadata) here
  int64_t max_steps = 0;     // stop as if interrupted after this many steps in this process
  std::string profile_path;  // "": no profile
  std::string profile_steps = "5,2,10";
  FaultSpec fault;
  // --model gpt only: the size preset, the text (Note [Text shards] in data/text.h), the
  // schedule's warmup, gradient clipping and the tokens sampled at the end.
  std::string gpt = "tiny";  // tiny | mini | small4 | small
  std::string corpus_dir;    // "": data::default_fortunes_dir()
  int64_t seq_len = 64;
  int64_t vocab = 2048;
  int64_t warmup = 0;  // steps of linear warmup
  double grad_clip = 1.0;
  int64_t sample_tokens = 200;
  // Micro-batches of --batch windows per optimizer step (gradients summed, each loss scaled by
  // 1/N).
  int64_t grad_accum = 1;
  // Recompute each block's activations in the backward instead of keeping them
  // (autograd::checkpoint); the same gradients for less memory.
  bool activation_checkpointing = false;
  std::string precision = "f32";  // f32 | bf16 | f16 (autocast of the forward pass)

  // ValueError naming the option and the value for anything out of range or inconsistent.
  void check() const;
  // The settings a resumed run must share with the run that wrote the checkpoint (the learning rate
  // may change; --epochs too, unless the cosine schedule depends on it).
  Json identity() const;
  // Everything, for the checkpoint sidecar and the saved model's metadata.
  Json to_json() const;
};

// What a run is, as the reporter prints it first.
struct RunInfo {
  std::string model;      // "mlp (235146 parameters)"
  std::string optimizer;  // "Adam lr 0.001"
  std::string dataset = "Fashion-MNIST";
  std::string test_split = "test";  // what the held-out samples are called
  int64_t train_samples = 0, test_samples = 0;
  int64_t batch = 0, epochs = 0, steps_per_epoch = 0;
  int threads = 0, world = 1;
  uint64_t seed = 0;
  std::string data;      // the loader's description
  std::string parallel;  // data-parallel description, "" in one process
  std::string fault;     // "" when no fault is injected
  std::string device;    // "cuda:0 (NVIDIA H200)"; "" on the CPU
};

struct StepInfo {
  int64_t epoch = 0, epochs = 0;  // epoch is 0-based
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  int64_t global_step = 0, total_steps = 0;
  double loss = NAN;              // this step's
  double running_loss = NAN;      // mean over this epoch's steps so far
  double samples_per_second = 0;  // this epoch so far
  double eta_epoch_seconds = 0, eta_run_seconds = 0;
  bool last_in_epoch = false;
};

struct EpochReport {
  int64_t epoch = 0;                          // 0-based
  double train_loss = NAN;                    // mean over the epoch's steps run in this process
  double val_loss = NAN, val_accuracy = NAN;  // NaN when validation is off
  double seconds = 0;
};

struct CheckpointInfo {
  std::string path;  // DIR/step-<S>
  int64_t step = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string why;  // "every 100 steps", "end of epoch 2", "stopping (SIGTERM)"
};

struct LOOM_API TrainResult {
  enum class Status : uint8_t { Finished, Stopped, AlreadyFinished };
  Status status = Status::Finished;
  int signal = 0;  // what stopped the run (0: --max-steps)
  int64_t global_step = 0, steps_run = 0;
  double seconds = 0, samples_per_second = 0;   // training only
  double validation_seconds = 0;                // spent in per-epoch validation
  double final_loss = NAN;                      // the last step's
  double test_loss = NAN, test_accuracy = NAN;  // the leader's final evaluation
  std::vector<EpochReport> epochs;
  bool leader = true;
  // 0 when finished, 128 + signal when a signal stopped it, 3 after --max-steps.
  int exit_code() const;
};

// Receives what a run does. Only the leader (rank 0) reports. Every method is optional.
class LOOM_API Reporter {
 public:
  virtual ~Reporter();
  virtual void on_start(const RunInfo&) {}
  virtual void on_message(const std::string& line) {}  // a line of information, no newline
  virtual void on_step(const StepInfo&) {}
  virtual void on_epoch_end(const EpochReport&) {}
  virtual void on_eval_progress(const std::string& what, int64_t done, int64_t total) {}
  virtual void on_checkpoint(const CheckpointInfo&) {}
  virtual void on_end(const TrainResult&) {}
};

// Prints a run the way `loom train` shows it: a progress bar on a terminal (`bar`), otherwise about
// five lines per epoch; the epoch summaries; the final report.
LOOM_API std::unique_ptr<Reporter> make_console_reporter(bool bar);

class LOOM_API Trainer {
 public:
  // Checks the options (ValueError naming the option). `reporter` may be null (silent).
  Trainer(TrainOptions options, Reporter* reporter);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Packs the Fashion-MNIST splits into shards when missing (once per cache, under a lock): the
  // launcher of a data-parallel run calls it before starting the workers.
  static void prepare_data(const TrainOptions& options);

  // Trains. Data parallelism comes from the launcher's environment (WORLD_SIZE > 1). SIGINT and
  // SIGTERM stop the run between steps, after a checkpoint when checkpoint_dir is set.
  // Errors: ValueError / DataError for bad options and damaged or mismatched checkpoints (naming
  // the file, the field, its value and what was expected), DistError from the process group.
  TrainResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A model written by --save-final: what `loom eval` needs to rebuild and run it.
struct SavedModelInfo {
  std::string architecture;          // "mlp" | "cnn"
  std::string dataset;               // "fashion-mnist"
  std::vector<int64_t> input_shape;  // [1, 28, 28]
  double mean = 0, std = 1;          // input normalisation of pixels scaled to [0, 1]
  int64_t classes = 10;
  int64_t trained_steps = 0;
};

struct EvalReport {
  int64_t samples = 0;
  double loss = NAN, accuracy = NAN;
  std::vector<double> class_accuracy;  // per label
  std::string source;                  // what was evaluated
};

// Evaluates a --save-final file, or the newest checkpoint of a checkpoint directory, on the test
// split of the Fashion-MNIST files in data_dir ("": the default). DataError for files that are not
// loom models (naming the file and what is missing).
LOOM_API EvalReport evaluate_saved_model(const std::string& path, const std::string& data_dir,
                                         int64_t batch, Reporter* reporter);

}  // namespace loom::train
