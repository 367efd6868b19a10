// Checkpoint state of a training run: what goes into the sidecar, and the validation of every field
// when a run resumes.
//
// Note [Validating a resumed run]: the checksums (Note [Checkpoint checksums]) catch damage, but a
// checkpoint can also be intact and still not fit this run: another --batch, a loop position past
// the end of an epoch, a loader state that disagrees with the loop position, hyperparameters out of
// range. Each field is checked against the options, the run's shape (steps per epoch, epoch size,
// the loader's configuration hash) and the other fields before anything is loaded, and a failure
// names the file, the field, its value and what was expected. Nothing is trusted because it parsed.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "loom/checkpoint.h"
#include "loom/error.h"
#include "loom/parse.h"
#include "train/train_internal.h"

namespace loom::train::detail {
namespace {

// Typed reads of sidecar fields by dotted path, with errors that name the file and the field.
class Fields {
 public:
  Fields(const Json& root, std::string file) : root_(root), file_(std::move(file)) {}

  const Json* find(const std::string& path) const {
    const Json* j = &root_;
    size_t start = 0;
    while (j != nullptr) {
      const size_t dot = path.find('.', start);
      const std::string key =
          path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      j = j->is_object() ? j->find(key) : nullptr;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return j;
  }
  const Json& at(const std::string& path) const {
    const Json* j = find(path);
    if (j == nullptr) fail(path, "is missing", "");
    return *j;
  }
  int64_t integer(const std::string& path, int64_t lo, int64_t hi,
                  const std::string& why = "") const {
    const Json& j = at(path);
    if (!j.is_number() || !std::isfinite(j.as_double()) ||
        j.as_double() != std::floor(j.as_double()) || j.as_double() < -9.2e18 ||
        j.as_double() > 9.2e18) {
      fail(path, "is " + j.dump(), "expected an integer " + describe_range(lo, hi));
    }
    const int64_t v = j.as_int();
    if (v < lo || v > hi) fail(path, "is " + j.dump(), "expected " + describe_range(lo, hi) + why);
    return v;
  }
  double number(const std::string& path) const { return number(at(path), path); }
  // A value already found (its key may contain dots), named `path` in errors.
  double number(const Json& j, const std::string& path) const {
    if (!j.is_number() || !std::isfinite(j.as_double()))
      fail(path, "is " + j.dump(), "expected a finite number");
    return j.as_double();
  }
  [[noreturn]] void fail(const std::string& path, const std::string& what,
                         const std::string& expected) const {
    LOOM_THROW(DataError, "[train] ", file_, ": ", path, " ", what, expected.empty() ? "" : " (",
               expected, expected.empty() ? "" : ")");
  }
  const std::string& file() const { return file_; }

 private:
  const Json& root_;
  std::string file_;
};

// The command-line flag of a config key ("train_samples" -> "train-samples").
std::string flag_of(std::string key) {
  for (char& c : key)
    if (c == '_') c = '-';
  return key;
}

Json rng_json(const Generator& g) {
  GeneratorState st = g.state();
  return Json::object({{"seed", std::to_string(st.seed)}, {"offset", std::to_string(st.offset)}});
}

GeneratorState rng_read(const Fields& f, const std::string& path) {
  GeneratorState st;
  for (const char* part : {"seed", "offset"}) {
    const Json& j = f.at(path + "." + part);
    uint64_t v = 0;
    bool ok = false;
    if (j.is_string()) {  // format 2: decimal text, so that all 64 bits survive
      const std::string& s = j.as_string();
      ok = !s.empty() && s.size() <= 20;
      for (char c : s) ok = ok && c >= '0' && c <= '9';
      if (ok) {
        errno = 0;
        v = std::strtoull(s.c_str(), nullptr, 10);
        ok = errno == 0;
      }
    } else if (j.is_int() && j.as_int() >= 0) {  // format 1
      v = static_cast<uint64_t>(j.as_int());
      ok = true;
    }
    if (!ok) f.fail(path + "." + part, "is " + j.dump(), "expected an unsigned 64-bit integer");
    (std::string(part) == "seed" ? st.seed : st.offset) = v;
  }
  return st;
}

}  // namespace

std::string save_state(const TrainOptions& o, const RunState& s, const Loop& loop) {
  io::TensorMap tensors;
  // Note [Checkpoints of device runs]: the file holds CPU copies of the parameters, buffers and
  // optimizer state (io saves CPU tensors only), so its bytes do not depend on where the run
  // trained. restore_state loads them through Module::load_state_dict and
  // Optimizer::load_state_dict, which copy into the tensors' current devices: a checkpoint written
  // on a GPU resumes on the CPU and the other way round.
  for (auto& [name, p] : s.model->named_parameters())
    tensors.emplace_back("model." + name, p.detach().to(kCPU));
  for (auto& [name, b] : s.model->named_buffers())
    tensors.emplace_back("model." + name, b.to(kCPU));
  optim::OptimizerState os = s.optimizer->state_dict();
  for (auto& [name, v] : os.tensors) tensors.emplace_back("optim." + name, v.to(kCPU));
  Json optimizer = Json::object();
  for (auto& [name, v] : os.scalars) optimizer.set(name, v);
  Json scheduler;
  if (s.scheduler) {
    scheduler = Json::object();
    for (auto& [name, v] : s.scheduler->state_dict()) scheduler.set(name, v);
  }
  // The loss scaler (--precision f16): its scale and growth tracker, so that a resumed run skips
  // and scales exactly as the uninterrupted one would; null without loss scaling.
  Json scaler;
  if (s.scaler) {
    scaler = Json::object();
    for (auto& [name, v] : s.scaler->state_dict()) scaler.set(name, v);
  }
  Json side = Json::object({{"config", o.to_json()},
                            {"loop", Json::object({{"epoch", loop.epoch},
                                                   {"batch_in_epoch", loop.batch_in_epoch},
                                                   {"global_step", loop.global_step}})},
                            {"data", loop.data ? loop.data->to_json() : Json()},
                            {"optimizer", optimizer},
                            {"scheduler", scheduler},
                            {"grad_scaler", scaler},
                            {"rng", Json::object({{"model", rng_json(*s.generator)},
                                                  {"default", rng_json(default_generator())}})}});
  return io::save_checkpoint(o.checkpoint_dir, loop.global_step, tensors, side, o.keep_checkpoints);
}

Restored restore_state(const TrainOptions& o, const RunShape& shape, const RunState& s) {
  Restored r;
  auto ck = io::load_latest_checkpoint(o.checkpoint_dir);
  if (!ck) return r;
  r.found = true;
  r.path = ck->path;
  const Fields f(ck->sidecar, ck->path + ".json");
  if (!ck->verified) {
    r.notes.push_back("note: " + ck->path +
                      " was written by an older loom (checkpoint format 1) and carries no "
                      "checksums: its bytes could not be verified");
  }

  // The configuration this run must share with the one that wrote the checkpoint.
  const Json& saved = f.at("config");
  if (!saved.is_object()) f.fail("config", "is " + saved.dump(), "expected an object");
  const Json legacy = Json::object({{"optimizer", "adam"}, {"weight_decay", 0.0}});
  const Json identity = o.identity();
  for (const auto& [key, want] : identity.as_object()) {
    const Json* got = saved.find(key);
    if (got == nullptr && !ck->verified) {
      got = legacy.find(key);  // format 1 recorded fewer settings
      if (got == nullptr) continue;
    }
    if (got == nullptr) f.fail("config." + key, "is missing", "this run has " + want.dump());
    const bool same = *got == want || (got->is_number() && want.is_number() &&
                                       got->as_double() == want.as_double());
    if (!same) {
      LOOM_THROW(ValueError, "[train] the checkpoint ", ck->path,
                 " was written by a run with config.", key, " = ", got->dump(),
                 " but this run has ", want.dump(), " (--", flag_of(key),
                 "); resume with the same settings, or use another --checkpoint-dir");
    }
  }
  const double saved_lr = f.number("config.lr");
  if (!(saved_lr > 0))
    f.fail("config.lr", "is " + std::to_string(saved_lr), "expected a positive learning rate");

  // The loop position, against the run's shape and itself.
  const int64_t spe = shape.steps_per_epoch;
  Loop& loop = r.loop;
  loop.epoch = f.integer("loop.epoch", 0, 1000000);
  loop.batch_in_epoch = f.integer("loop.batch_in_epoch", 0, spe - 1,
                                  ": an epoch of this run has " + std::to_string(spe) + " steps");
  loop.global_step = f.integer("loop.global_step", 0, int64_t{1} << 50);
  const int64_t expect_step = loop.epoch * spe + loop.batch_in_epoch;
  if (loop.global_step != expect_step) {
    f.fail("loop.global_step", "is " + std::to_string(loop.global_step),
           "expected " + std::to_string(expect_step) + " = loop.epoch " +
               std::to_string(loop.epoch) + " x " + std::to_string(spe) +
               " steps + loop.batch_in_epoch " + std::to_string(loop.batch_in_epoch));
  }
  if (ck->step != loop.global_step) {
    f.fail("checkpoint.step", "is " + std::to_string(ck->step),
           "expected loop.global_step " + std::to_string(loop.global_step));
  }

  // The loader's position must be the loop's.
  const Json& dj = f.at("data");
  if (dj.is_null()) {
    if (loop.global_step != 0)
      f.fail("data", "is null",
             "a loader state, since the run is at step " + std::to_string(loop.global_step));
  } else {
    const int64_t de = f.integer("data.epoch", 0, 1000000);
    const int64_t consumed =
        f.integer("data.consumed", 0, shape.epoch_samples,
                  ": an epoch of this run has " + std::to_string(shape.epoch_samples) + " samples");
    data::LoaderState ds = data::LoaderState::from_json(dj);
    if (ds.seed != o.seed)
      f.fail("data.seed", "is " + f.at("data.seed").dump(),
             "expected --seed " + std::to_string(o.seed));
    if (ds.config_hash != shape.loader_hash) {
      f.fail("data.config_hash", "is " + f.at("data.config_hash").dump(),
             "the loader of this run has another configuration (dataset, batch, shuffle, "
             "augmentation)");
    }
    const int64_t per_step = shape.samples_per_step > 0 ? shape.samples_per_step : o.batch;
    const bool mid_epoch = de == loop.epoch && consumed == loop.batch_in_epoch * per_step;
    const bool epoch_end =
        loop.batch_in_epoch == 0 && de + 1 == loop.epoch && consumed == shape.epoch_samples;
    if (!mid_epoch && !epoch_end) {
      f.fail("data",
             "is at epoch " + std::to_string(de) + " with " + std::to_string(consumed) +
                 " samples consumed",
             "expected epoch " + std::to_string(loop.epoch) + " with " +
                 std::to_string(loop.batch_in_epoch * per_step) +
                 " consumed (loop.batch_in_epoch " + std::to_string(loop.batch_in_epoch) + " x " +
                 std::to_string(per_step) + " samples a step)" +
                 (loop.batch_in_epoch == 0 && loop.epoch > 0
                      ? ", or the end of epoch " + std::to_string(loop.epoch - 1) + " (" +
                            std::to_string(shape.epoch_samples) + " consumed)"
                      : ""));
    }
    loop.data = ds;
  }

  // Optimizer, scheduler and generators: parsed and checked before anything is loaded.
  optim::OptimizerState os;
  const Json& oj = f.at("optimizer");
  if (!oj.is_object()) f.fail("optimizer", "is " + oj.dump(), "expected an object");
  for (const auto& [name, v] : oj.as_object())
    os.scalars.emplace_back(name, f.number(v, "optimizer." + name));
  std::map<std::string, Tensor> model_state;
  for (auto& [name, t] : ck->tensors) {
    if (name.rfind("model.", 0) == 0) {
      model_state[name.substr(6)] = t;
    } else if (name.rfind("optim.", 0) == 0) {
      os.tensors.emplace_back(name.substr(6), t);
    } else {
      LOOM_THROW(DataError, "[train] ", ck->path, ".safetensors: unexpected tensor '", name,
                 "' (a loom train checkpoint holds model.* and optim.* tensors)");
    }
  }
  optim::SchedulerState ss;
  const Json& sj = f.at("scheduler");
  if (s.scheduler) {
    if (!sj.is_object())
      f.fail("scheduler", "is " + sj.dump(), "expected the state of the --schedule " + o.schedule);
    for (const auto& [name, v] : sj.as_object())
      ss.emplace_back(name, f.number(v, "scheduler." + name));
  } else if (!sj.is_null()) {
    f.fail("scheduler", "is " + sj.dump(), "expected null: this run has --schedule none");
  }
  // Checkpoints from before loss scaling was saved have no "grad_scaler": null, as without one.
  amp::GradScalerState scaler_state;
  const Json* gj = f.find("grad_scaler");
  if (s.scaler) {
    if (gj == nullptr || !gj->is_object())
      f.fail("grad_scaler", gj == nullptr ? "is missing" : "is " + gj->dump(),
             "expected the loss scaler's state: this run has --precision f16");
    for (const auto& [name, v] : gj->as_object())
      scaler_state.emplace_back(name, f.number(v, "grad_scaler." + name));
  } else if (gj != nullptr && !gj->is_null()) {
    f.fail("grad_scaler", "is " + gj->dump(),
           "expected null: this run has no loss scaling (--precision " + o.precision + ")");
  }
  const GeneratorState model_rng = rng_read(f, "rng.model");
  const GeneratorState default_rng = rng_read(f, "rng.default");

  // A changed learning rate scales every learning rate the state holds, so a schedule continues
  // from where it was with the new peak.
  const double scale = o.lr / saved_lr;
  if (scale != 1.0) {
    for (auto& [name, v] : os.scalars) {
      const size_t dot = name.rfind('.');
      const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
      if (leaf == "lr" || leaf == "initial_lr") v *= scale;
    }
    for (auto& [name, v] : ss) {
      if (name.rfind("base_lrs.", 0) == 0 || name.rfind("last_lr.", 0) == 0) v *= scale;
    }
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "resuming with --lr %g where the checkpoint's run used %g: every learning rate "
                  "(and the schedule) is scaled by %g from step %lld",
                  o.lr, saved_lr, scale, static_cast<long long>(loop.global_step));
    r.notes.push_back(buf);
  }

  try {
    s.model->load_state_dict(model_state, /*strict=*/true);
  } catch (const ValueError& e) {
    LOOM_THROW(DataError, "[train] ", ck->path, ".safetensors does not fit the --model ", o.model,
               ": ", e.what());
  }
  try {
    s.optimizer->load_state_dict(os);
    if (s.scheduler) s.scheduler->load_state_dict(ss);
    if (s.scaler) s.scaler->load_state_dict(scaler_state);
  } catch (const Error& e) {
    LOOM_THROW(DataError, "[train] ", f.file(),
               ": the optimizer, scheduler or loss scaler state is invalid: ", e.what());
  }
  s.generator->set_state(model_rng);
  default_generator().set_state(default_rng);
  return r;
}

}  // namespace loom::train::detail
