// Evaluation: loss and accuracy over the test split, for per-epoch validation, the final report and
// `loom eval` of a saved model or a checkpoint.
#include <sys/stat.h>

#include "loom/autograd.h"
#include "loom/checkpoint.h"
#include "loom/data/pack.h"
#include "loom/datasets.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "train/train_internal.h"

namespace loom::train::detail {

EvalReport evaluate(nn::Module& model, const std::shared_ptr<const data::ShardReader>& test,
                    int64_t batch, double mean, double std, Reporter* reporter,
                    const std::string& what) {
  autograd::NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  data::LoaderOptions o;
  o.batch_size = batch;
  o.order.shuffle = data::ShuffleMode::None;
  o.fields = input_fields(false, mean, std);
  data::Loader loader(test, o);
  // The model's device decides where the batches go (a DeviceStage passes CPU batches through).
  const std::vector<Tensor> params = model.parameters();
  const Device device = params.empty() ? kCPU : params.front().device();
  data::DeviceStage batches([&loader] { return loader.next(); }, device);
  EvalReport r;
  const int64_t total = test->size();
  std::vector<int64_t> correct_per_class(10, 0), seen_per_class(10, 0);
  double loss_sum = 0;
  int64_t correct = 0;
  while (auto b = batches.next()) {
    const Tensor& y = (*b)["label"];
    Tensor logits = model.forward((*b)["image"]);
    loss_sum += cross_entropy(logits, y).item<double>() * static_cast<double>(b->size());
    Tensor hit = eq(argmax(logits, 1), y);
    const std::vector<int64_t> labels = to_vector<int64_t>(y.to(kCPU));
    const std::vector<bool> hits = to_vector<bool>(hit.to(kCPU));
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto c = static_cast<size_t>(labels[i]);
      if (c >= seen_per_class.size()) {
        seen_per_class.resize(c + 1, 0);
        correct_per_class.resize(c + 1, 0);
      }
      ++seen_per_class[c];
      correct_per_class[c] += hits[i] ? 1 : 0;
      correct += hits[i] ? 1 : 0;
    }
    r.samples += b->size();
    if (reporter) reporter->on_eval_progress(what, r.samples, total);
  }
  if (was_training) model.train();
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  for (size_t c = 0; c < seen_per_class.size(); ++c) {
    r.class_accuracy.push_back(seen_per_class[c] ? static_cast<double>(correct_per_class[c]) /
                                                       static_cast<double>(seen_per_class[c])
                                                 : NAN);
  }
  return r;
}

}  // namespace loom::train::detail

namespace loom::train {

EvalReport evaluate_saved_model(const std::string& path, const std::string& data_dir, int64_t batch,
                                Reporter* reporter) {
  LOOM_CHECK(batch >= 1, "[eval] --batch must be at least 1 but got ", batch);
  struct stat st {};
  LOOM_CHECK_AS(DataError, ::stat(path.c_str(), &st) == 0, "[eval] cannot find ", path,
                " (expected a file written by `loom train --save-final` or a --checkpoint-dir)");
  SavedModelInfo info;
  std::map<std::string, Tensor> params;
  std::string source;
  if (S_ISDIR(st.st_mode)) {
    auto ck = io::load_latest_checkpoint(path);
    LOOM_CHECK_AS(DataError, ck.has_value(), "[eval] ", path,
                  " holds no checkpoint (no `latest` file)");
    const Json& cfg = ck->sidecar.at("config");
    info.architecture = cfg.at("model").as_string();
    info.dataset = "fashion-mnist";
    info.input_shape = {1, 28, 28};
    info.mean = detail::kMean;
    info.std = detail::kStd;
    info.trained_steps = ck->step;
    for (auto& [name, t] : ck->tensors) {
      if (name.rfind("model.", 0) == 0) params[name.substr(6)] = t;
    }
    source = ck->path + " (checkpoint at step " + std::to_string(ck->step) + ")";
  } else {
    io::SafetensorsFile f = io::load_safetensors(path);
    info = detail::model_info_from_metadata(f.metadata, path);
    for (auto& [name, t] : f.tensors) params[name] = t;
    source = path + " (" + info.architecture + ", trained " + std::to_string(info.trained_steps) +
             " steps)";
  }
  Generator gen(0);
  auto model = detail::build_model(info.architecture, gen);
  try {
    model->load_state_dict(params, /*strict=*/true);
  } catch (const ValueError& e) {
    LOOM_THROW(DataError, "[eval] ", path, " does not hold a ", info.architecture,
               " model: ", e.what());
  }
  const std::string dir = data_dir.empty() ? data::default_fashion_mnist_dir() : data_dir;
  auto test =
      std::make_shared<const data::ShardReader>(data::fashion_mnist_shards(dir, /*train=*/false));
  EvalReport r = detail::evaluate(*model, test, batch, info.mean, info.std, reporter, "evaluating");
  r.source = source;
  return r;
}

}  // namespace loom::train
