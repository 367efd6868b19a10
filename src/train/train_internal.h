// Internal to the train layer: the pieces trainer.cpp, state.cpp, evaluate.cpp and models.cpp
// share.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/amp.h"
#include "loom/data/loader.h"
#include "loom/data/transforms.h"
#include "loom/generator.h"
#include "loom/io.h"
#include "loom/nn.h"
#include "loom/nn/gpt.h"
#include "loom/optim.h"
#include "loom/train/trainer.h"

namespace loom::train::detail {

// Fashion-MNIST's training-set pixel statistics (pixels scaled to [0, 1]).
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

// The loader's fields: normalised images (with --augment also random crops and flips) and labels.
std::vector<std::shared_ptr<data::FieldTransform>> input_fields(bool augment, double mean,
                                                                double std);

std::shared_ptr<nn::Sequential> build_model(const std::string& architecture, Generator& gen);
std::unique_ptr<optim::Optimizer> build_optimizer(const TrainOptions& o,
                                                  std::vector<Tensor> params);
std::string describe_optimizer(const TrainOptions& o);

// The saved-model format: a safetensors file of the parameters with SavedModelInfo in its metadata.
void save_model(const std::string& path, nn::Module& model, const SavedModelInfo& info);
SavedModelInfo model_info_from_metadata(const std::map<std::string, std::string>& metadata,
                                        const std::string& path);

// Loss and accuracy of `model` over a test split (no grad, eval mode, batches of `batch`).
EvalReport evaluate(nn::Module& model, const std::shared_ptr<const data::ShardReader>& test,
                    int64_t batch, double mean, double std, Reporter* reporter,
                    const std::string& what);

// What every run reports first: its sizes and settings (the caller adds model, optimizer, data).
RunInfo run_info_of(const TrainOptions& o, int64_t train_samples, int64_t test_samples,
                    int64_t steps_per_epoch);

// Note [Stopping a data-parallel run] in trainer.cpp: while the returned handle lives, the first
// SIGINT or SIGTERM asks the loop to stop at its next step boundary (stop_signal() says which
// arrived, 0 for none); the previous handlers come back when it is dropped. One at a time.
std::shared_ptr<void> catch_stop_signals();
int stop_signal();

// The batches of one epoch on `device`, each with the loader's state just after it. A DeviceStage
// takes batches from the loader ahead of the loop (double buffering, pinned staging on a GPU), so
// loader.state() is ahead of the step being run; the state handed out with a batch is what a
// checkpoint after that batch needs. On the CPU the stage passes batches through.
class DeviceBatches {
 public:
  DeviceBatches(data::Loader& loader, Device device)
      : loader_(loader), stage_([this] { return take(); }, device) {}
  std::optional<data::Batch> next(std::optional<data::LoaderState>& state_after);
  data::DeviceStageMetrics metrics() { return stage_.metrics(); }

 private:
  std::optional<data::Batch> take();
  data::Loader& loader_;
  std::deque<data::LoaderState> states_;
  data::DeviceStage stage_;  // last: its source uses the members above
};

// Note [GPT saved model] in gpt_job.cpp.
void save_gpt_pretrained(const std::string& dir, const nn::Gpt& model,
                         const std::string& tokenizer_dir);

// `loom train --model gpt` (Note [GPT training] in gpt_job.cpp); `rep` may be null.
TrainResult run_gpt(const TrainOptions& o, Reporter* rep);

// Where the training loop stands.
struct Loop {
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  int64_t global_step = 0;
  std::optional<data::LoaderState> data;  // where the loader stands (restored on resume)
};

// Everything a checkpoint holds beyond the loop position.
struct RunState {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;  // may be null
  const Generator* generator = nullptr;
  amp::GradScaler* scaler = nullptr;  // --precision f16's loss scaler; may be null
};

// The facts of this run that a checkpoint is validated against.
struct RunShape {
  int64_t steps_per_epoch = 0;
  int64_t epoch_samples = 0;  // global positions of an epoch (the loader's epoch_size)
  uint64_t loader_hash = 0;
  int64_t samples_per_step = 0;  // loader positions one step consumes (0: --batch)
};

std::string save_state(const TrainOptions& o, const RunState& s, const Loop& loop);

struct Restored {
  bool found = false;
  std::string path;
  Loop loop;
  std::vector<std::string> notes;  // lines to report (a changed learning rate, an old format)
};
// Loads the newest checkpoint of o.checkpoint_dir into `s`, after validating every field against
// the options, the run's shape and each other (DataError naming the file, field, value, expected).
Restored restore_state(const TrainOptions& o, const RunShape& shape, const RunState& s);

}  // namespace loom::train::detail
