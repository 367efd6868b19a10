// Resuming from a checkpoint whose fields do not fit the run: each hostile sidecar of the hardening
// review is re-sealed with a valid checksum (as a careless tool or a bug would write it) and must
// stop the resume with a typed error naming the file, the field, its value and what was expected.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "loom/checkpoint.h"
#include "loom/error.h"
#include "test_errors.h"
#include "train_fixture.h"

namespace loom::testing {
namespace {

class ResumeValidation : public TinyTraining {
 protected:
  // Trains 3 steps into epoch 1 of 2 (8 steps an epoch) and leaves the checkpoint of step 11.
  void train_until_step_11() {
    train::TrainOptions o = options();
    o.max_steps = 11;
    train::Trainer t(o, nullptr);
    const train::TrainResult r = t.run();
    ASSERT_EQ(r.status, train::TrainResult::Status::Stopped);
    ASSERT_EQ(r.global_step, 11);
  }
  // Rewrites the checkpoint with `edit` applied to its original sidecar, under a fresh checksum.
  void tamper(const std::function<void(Json&)>& edit) {
    if (!original_) original_ = io::load_latest_checkpoint(options().checkpoint_dir);
    ASSERT_TRUE(original_.has_value());
    const auto& ck = original_;
    Json side = ck->sidecar;
    auto& members = side.as_object();
    std::erase_if(members, [](const Json::Member& m) { return m.first == "checkpoint"; });
    edit(side);
    io::save_checkpoint(options().checkpoint_dir, ck->step, ck->tensors, side);
  }
  // The message of the error resuming raises.
  template <class E>
  std::string resume_error(train::TrainOptions o) {
    o.resume = true;
    return error_of<E>([&] {
      train::Trainer t(o, nullptr);
      t.run();
    });
  }
  std::string resume_error() { return resume_error<DataError>(options()); }
  std::optional<io::Checkpoint> original_;
};

TEST_F(ResumeValidation, BatchInEpochAtOrPastTheEpochsSteps) {
  train_until_step_11();
  tamper([](Json& s) { s.at("loop").set("batch_in_epoch", 8); });
  const std::string m = resume_error();
  EXPECT_CONTAINS(m,
                  "step-000000011.json: loop.batch_in_epoch is 8 (expected from 0 to 7: an epoch "
                  "of this run has 8 steps)");
  tamper([](Json& s) { s.at("loop").set("batch_in_epoch", -1); });
  EXPECT_CONTAINS(resume_error(), "loop.batch_in_epoch is -1");
}

TEST_F(ResumeValidation, ConsumedOutOfRangeOrInconsistentWithTheLoop) {
  train_until_step_11();
  tamper([](Json& s) { s.at("data").set("consumed", 2000); });
  EXPECT_CONTAINS(
      resume_error(),
      "data.consumed is 2000 (expected from 0 to 256: an epoch of this run has 256 samples)");
  tamper([](Json& s) { s.at("data").set("consumed", 1e15); });
  EXPECT_CONTAINS(resume_error(), "data.consumed is 1000000000000000.0 (expected from 0 to 256");
  tamper([](Json& s) { s.at("data").set("consumed", 64); });  // the loop says 3 batches of 32
  EXPECT_CONTAINS(resume_error(),
                  "data is at epoch 1 with 64 samples consumed (expected epoch 1 with 96 consumed");
  tamper([](Json& s) { s.at("data").set("epoch", 5); });
  EXPECT_CONTAINS(resume_error(), "data is at epoch 5 with 96 samples consumed");
}

TEST_F(ResumeValidation, LoopFieldsThatDisagree) {
  train_until_step_11();
  tamper([](Json& s) { s.at("loop").set("global_step", 12); });
  EXPECT_CONTAINS(
      resume_error(),
      "loop.global_step is 12 (expected 11 = loop.epoch 1 x 8 steps + loop.batch_in_epoch 3)");
  tamper([](Json& s) { s.at("loop").set("epoch", "one"); });
  EXPECT_CONTAINS(resume_error(), "loop.epoch is \"one\" (expected an integer");
  tamper([](Json& s) { s.at("loop").set("epoch", 5); });  // and the rest says epoch 1
  EXPECT_CONTAINS(resume_error(), "loop.global_step is 11 (expected 43");
}

TEST_F(ResumeValidation, OptimizerHyperparametersOutOfRange) {
  train_until_step_11();
  tamper([](Json& s) { s.at("optimizer").set("param_groups.0.beta1", 2.0); });
  const std::string m = resume_error();
  EXPECT_CONTAINS(m,
                  "step-000000011.json: the optimizer, scheduler or loss scaler state is invalid");
  EXPECT_CONTAINS(
      m, "param_groups.0: invalid beta parameter at index 0: beta1 = 2 (expected in [0, 1))");
  tamper([](Json& s) { s.at("optimizer").set("param_groups.0.eps", -1.0); });
  EXPECT_CONTAINS(resume_error(), "invalid epsilon value: eps = -1");
  tamper([](Json& s) { s.at("optimizer").set("param_groups.0.lr", "fast"); });
  EXPECT_CONTAINS(resume_error(),
                  "optimizer.param_groups.0.lr is \"fast\" (expected a finite number)");
}

TEST_F(ResumeValidation, ASettingOfAnotherRunIsAValueErrorNamingIt) {
  train_until_step_11();
  train::TrainOptions o = options();
  o.batch = 64;
  EXPECT_CONTAINS(resume_error<ValueError>(o), "config.batch = 32 but this run has 64 (--batch)");
  o = options();
  o.optimizer = "sgd";
  EXPECT_CONTAINS(resume_error<ValueError>(o),
                  "config.optimizer = \"adam\" but this run has \"sgd\"");
}

TEST_F(ResumeValidation, AnEditWithoutANewChecksumIsCaught) {
  train_until_step_11();
  auto ck = io::load_latest_checkpoint(options().checkpoint_dir);
  ASSERT_TRUE(ck.has_value());
  std::string text = io::read_file(ck->path + ".json");
  const size_t at = text.find("\"batch_in_epoch\": 3");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"batch_in_epoch\": 4");
  io::atomic_write_file(ck->path + ".json", text);
  EXPECT_CONTAINS(resume_error(), "step-000000011.json fails its CRC32C");
}

TEST_F(ResumeValidation, AFinishedRunSaysSoAndEvaluates) {
  train::TrainOptions o = options();
  train::Trainer(o, nullptr).run();
  o.resume = true;
  RecordingReporter rep;
  train::Trainer t(o, &rep);
  const train::TrainResult r = t.run();
  EXPECT_EQ(r.status, train::TrainResult::Status::AlreadyFinished);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.steps_run, 0);
  EXPECT_CONTAINS(rep.all_messages(),
                  "already finished: " + o.checkpoint_dir +
                      "/step-000000016 is at the end of epoch 2 (step 16) and --epochs is 2");
  EXPECT_TRUE(std::isfinite(r.test_accuracy));
  // More epochs continue the same run.
  o.epochs = 3;
  const train::TrainResult more = train::Trainer(o, nullptr).run();
  EXPECT_EQ(more.status, train::TrainResult::Status::Finished);
  EXPECT_EQ(more.steps_run, 8);
  EXPECT_EQ(more.global_step, 24);
}

TEST_F(ResumeValidation, AChangedLearningRateIsAllowedAndSaid) {
  train_until_step_11();
  train::TrainOptions o = options();
  o.resume = true;
  o.lr = 5e-4;
  RecordingReporter rep;
  const train::TrainResult r = train::Trainer(o, &rep).run();
  EXPECT_EQ(r.status, train::TrainResult::Status::Finished);
  EXPECT_CONTAINS(rep.all_messages(),
                  "resuming with --lr 0.0005 where the checkpoint's run used 0.001");
}

}  // namespace
}  // namespace loom::testing
