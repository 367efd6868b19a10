// The models, inputs and optimizers `loom train` offers, and the saved-model format.
//
// Note [Saved model]: --save-final writes an ordinary safetensors file of the parameters (names as
// the model's state_dict) whose string metadata says how to rebuild and feed the model:
// loom_architecture, loom_dataset, loom_input_shape ("1,28,28"), loom_normalize_mean / _std,
// loom_classes, loom_trained_steps. Metadata depends only on the run's options and step count, so
// two runs that end with the same parameters write byte-identical files.
#include <cstdio>

#include "loom/error.h"
#include "loom/parse.h"
#include "train/train_internal.h"

namespace loom::train::detail {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

const std::string& require(const std::map<std::string, std::string>& m, const std::string& key,
                           const std::string& path) {
  auto it = m.find(key);
  LOOM_CHECK_AS(DataError, it != m.end(), "[eval] ", path,
                " is not a model saved by `loom train --save-final`: "
                "its safetensors metadata has no \"",
                key, "\"");
  return it->second;
}

}  // namespace

std::vector<std::shared_ptr<data::FieldTransform>> input_fields(bool augment, double mean,
                                                                double std) {
  data::ImageOptions io;
  io.mean = {mean};
  io.std = {std};
  if (augment) {
    io.crop_h = io.crop_w = 28;
    io.padding = 2;
    io.random_crop = true;
    io.flip_p = 0.5;
  }
  return {data::image_column("image", io), data::copy_column("label")};
}

std::shared_ptr<nn::Sequential> build_model(const std::string& architecture, Generator& gen) {
  auto m = std::make_shared<nn::Sequential>();
  if (architecture == "mlp") {
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(784, 256, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(256, 128, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
  } else if (architecture == "cnn") {
    nn::Conv2dOptions c1(1, 16, 3);
    c1.padding = 1;
    nn::Conv2dOptions c2(16, 32, 3);
    c2.padding = 1;
    m->push_back(std::make_shared<nn::Conv2d>(c1, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Conv2d>(c2, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(32 * 7 * 7, 128, true, &gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10, true, &gen));
  } else {
    LOOM_THROW(ValueError, "[train] unknown model architecture '", architecture,
               "' (expected mlp or cnn)");
  }
  return m;
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainOptions& o,
                                                  std::vector<Tensor> params) {
  if (o.optimizer == "sgd") {
    optim::SGDOptions so;
    so.lr = o.lr;
    so.momentum = o.momentum;
    so.weight_decay = o.weight_decay;
    return std::make_unique<optim::SGD>(std::move(params), so);
  }
  optim::AdamOptions ao;
  ao.lr = o.lr;
  ao.weight_decay = o.weight_decay;
  if (o.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), ao);
  return std::make_unique<optim::Adam>(std::move(params), ao);
}

std::string describe_optimizer(const TrainOptions& o) {
  std::string s = o.optimizer == "sgd" ? "SGD" : o.optimizer == "adamw" ? "AdamW" : "Adam";
  char buf[96];
  std::snprintf(buf, sizeof(buf), " lr %g", o.lr);
  s += buf;
  if (o.optimizer == "sgd") {
    std::snprintf(buf, sizeof(buf), " momentum %g", o.momentum);
    s += buf;
  }
  if (o.weight_decay > 0) {
    std::snprintf(buf, sizeof(buf), " weight decay %g%s", o.weight_decay,
                  o.optimizer == "adamw" ? " (decoupled)" : "");
    s += buf;
  }
  if (o.schedule == "cosine") s += ", cosine schedule";
  return s;
}

void save_model(const std::string& path, nn::Module& model, const SavedModelInfo& info) {
  io::TensorMap params;
  // Files hold CPU tensors (a model trained on a GPU is saved as one trained on the CPU).
  for (auto& [name, p] : model.named_parameters()) params.emplace_back(name, p.detach().to(kCPU));
  for (auto& [name, b] : model.named_buffers()) params.emplace_back(name, b.to(kCPU));
  std::string shape;
  for (int64_t d : info.input_shape) {
    if (!shape.empty()) shape += ',';
    shape += std::to_string(d);
  }
  io::save_safetensors(path, params,
                       {{"format", "pt"},
                        {"loom_architecture", info.architecture},
                        {"loom_dataset", info.dataset},
                        {"loom_input_shape", shape},
                        {"loom_normalize_mean", number(info.mean)},
                        {"loom_normalize_std", number(info.std)},
                        {"loom_classes", std::to_string(info.classes)},
                        {"loom_trained_steps", std::to_string(info.trained_steps)}});
}

SavedModelInfo model_info_from_metadata(const std::map<std::string, std::string>& m,
                                        const std::string& path) {
  SavedModelInfo info;
  const std::string where = "[eval] " + path + ": metadata ";
  info.architecture = require(m, "loom_architecture", path);
  LOOM_CHECK_AS(DataError, info.architecture == "mlp" || info.architecture == "cnn", where,
                "\"loom_architecture\" is '", info.architecture, "' (this loom knows mlp and cnn)");
  info.dataset = require(m, "loom_dataset", path);
  LOOM_CHECK_AS(DataError, info.dataset == "fashion-mnist", where, "\"loom_dataset\" is '",
                info.dataset, "' (this loom evaluates fashion-mnist models)");
  const std::string& shape = require(m, "loom_input_shape", path);
  LOOM_CHECK_AS(DataError, shape == "1,28,28", where, "\"loom_input_shape\" is '", shape,
                "' (expected 1,28,28)");
  info.input_shape = {1, 28, 28};
  try {
    info.mean = parse_double(require(m, "loom_normalize_mean", path),
                             where + "\"loom_normalize_mean\"", -1e6, 1e6);
    info.std = parse_double(require(m, "loom_normalize_std", path),
                            where + "\"loom_normalize_std\"", 1e-12, 1e6);
    info.classes = parse_int(require(m, "loom_classes", path), where + "\"loom_classes\"", 10, 10);
    info.trained_steps =
        parse_int(require(m, "loom_trained_steps", path), where + "\"loom_trained_steps\"", 0);
  } catch (const ValueError& e) {
    LOOM_THROW(DataError, e.what());
  }
  return info;
}

}  // namespace loom::train::detail
