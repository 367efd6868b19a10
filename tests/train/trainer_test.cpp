// The Trainer as a user sees it: optimizers, per-epoch validation, checkpoints and their messages,
// a saved model that `loom eval` reads back, bad options, and the cleanup of interrupted saves.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "loom/checkpoint.h"
#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "test_errors.h"
#include "train_fixture.h"

namespace loom::testing {
namespace {

namespace fs = std::filesystem;

using Trainer = TinyTraining;

TEST_F(Trainer, EachOptimizerLearnsTheTinyTask) {
  for (const char* name : {"sgd", "adam", "adamw"}) {
    train::TrainOptions o = options();
    o.checkpoint_dir.clear();
    o.optimizer = name;
    o.lr = std::string(name) == "sgd" ? 0.05 : 2e-3;
    o.weight_decay = 1e-4;
    o.epochs = 3;
    RecordingReporter rep;
    const train::TrainResult r = train::Trainer(o, &rep).run();
    ASSERT_EQ(r.status, train::TrainResult::Status::Finished) << name;
    ASSERT_EQ(rep.epochs.size(), 3u) << name;
    // The running-average loss falls from epoch to epoch and the held-out classes are learned.
    EXPECT_LT(rep.epochs[2].train_loss, rep.epochs[0].train_loss) << name;
    EXPECT_GT(r.test_accuracy, 0.9) << name;
    // Per-epoch validation ran on the test split, and its last figure is the final evaluation's.
    for (const auto& e : rep.epochs) EXPECT_TRUE(std::isfinite(e.val_accuracy)) << name;
    EXPECT_DOUBLE_EQ(rep.epochs[2].val_accuracy, r.test_accuracy) << name;
    EXPECT_DOUBLE_EQ(rep.epochs[2].val_loss, r.test_loss) << name;
  }
}

TEST_F(Trainer, ProgressCarriesARunningMeanAndAnEtaForTheWholeRun) {
  train::TrainOptions o = options();
  o.checkpoint_dir.clear();
  o.validate = false;
  RecordingReporter rep;
  train::Trainer(o, &rep).run();
  ASSERT_EQ(rep.steps.size(), 16u);
  double sum = 0;
  for (size_t i = 0; i < 8; ++i) {
    sum += rep.steps[i].loss;
    EXPECT_NEAR(rep.steps[i].running_loss, sum / static_cast<double>(i + 1), 1e-12);
  }
  EXPECT_EQ(rep.steps[3].total_steps, 16);
  EXPECT_GT(rep.steps[3].eta_run_seconds, rep.steps[3].eta_epoch_seconds);
  EXPECT_EQ(rep.steps.back().eta_run_seconds, 0.0);
  EXPECT_TRUE(std::isnan(rep.epochs[0].val_accuracy));  // validation off
}

TEST_F(Trainer, CheckpointsAreAnnouncedAndOnlyTheNewestKeptAreLeft) {
  train::TrainOptions o = options();
  o.keep_checkpoints = 3;
  RecordingReporter rep;
  train::Trainer(o, &rep).run();
  // Every 3 steps and at each epoch's end: 3, 6, 8, 9, 12, 15, 16.
  std::vector<int64_t> steps;
  for (const auto& c : rep.checkpoints) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 6, 8, 9, 12, 15, 16}));
  EXPECT_EQ(rep.checkpoints[2].why, "end of epoch 1");
  EXPECT_GT(rep.checkpoints[0].bytes, 200000u);
  int jsons = 0;
  for (const auto& e : fs::directory_iterator(o.checkpoint_dir))
    jsons += e.path().extension() == ".json";
  EXPECT_EQ(jsons, 3);
}

TEST_F(Trainer, TheSavedModelEvaluatesToTheTrainersFigures) {
  train::TrainOptions o = options();
  o.save_final = dir_ / "model.safetensors";
  const train::TrainResult r = train::Trainer(o, nullptr).run();
  const train::EvalReport ev = train::evaluate_saved_model(o.save_final, o.data_dir, 7, nullptr);
  EXPECT_EQ(ev.samples, 100);
  EXPECT_DOUBLE_EQ(ev.accuracy, r.test_accuracy);
  EXPECT_NEAR(ev.loss, r.test_loss, 1e-6);  // float32 means over other batches
  ASSERT_EQ(ev.class_accuracy.size(), 10u);
  // The checkpoint directory evaluates the same parameters.
  const train::EvalReport ck =
      train::evaluate_saved_model(o.checkpoint_dir, o.data_dir, 100, nullptr);
  EXPECT_DOUBLE_EQ(ck.accuracy, r.test_accuracy);
  // A safetensors file without the metadata is refused with what is missing.
  io::save_safetensors(dir_ / "bare.safetensors", {{"w", zeros({2})}});
  EXPECT_CONTAINS(error_of<DataError>([&] {
                    train::evaluate_saved_model(dir_ / "bare.safetensors", o.data_dir, 10, nullptr);
                  }),
                  "is not a model saved by `loom train --save-final`: its safetensors metadata has "
                  "no \"loom_architecture\"");
}

TEST_F(Trainer, BadOptionsAreTypedErrorsNamingTheOption) {
  auto bad = [&](const std::function<void(train::TrainOptions&)>& edit) {
    train::TrainOptions o = options();
    edit(o);
    return error_of<ValueError>([&] { train::Trainer t(o, nullptr); });
  };
  EXPECT_CONTAINS(bad([](auto& o) { o.optimizer = "lbfgs"; }),
                  "--optimizer must be one of sgd, adam, adamw but got 'lbfgs'");
  EXPECT_CONTAINS(bad([](auto& o) { o.lr = NAN; }), "--lr must be");
  EXPECT_CONTAINS(bad([](auto& o) { o.threads = -1; }),
                  "--threads must be an integer from 0 to 1024 but got -1");
  EXPECT_CONTAINS(bad([](auto& o) { o.epochs = 0; }),
                  "--epochs must be an integer from 1 to 1000000 but got 0");
  EXPECT_CONTAINS(bad([](auto& o) { o.device = "gpu"; }), "gpu");
  EXPECT_CONTAINS(bad([](auto& o) {
                    o.resume = true;
                    o.checkpoint_dir.clear();
                  }),
                  "--resume needs --checkpoint-dir");
  // --device cuda: a typed error saying what to do where the build or the machine cannot train on
  // a GPU; a device index beyond those visible is named with the count.
  train::TrainOptions o = options();
  o.device = "cuda";
  auto construct = [&] { train::Trainer t(o, nullptr); };
  if (!cuda::is_built()) {
    EXPECT_CONTAINS(error_of<NotImplementedError>(construct),
                    "--device cuda: this build has no CUDA backend (configure with -DLOOM_CUDA=ON");
  } else if (cuda::device_count() == 0) {
    EXPECT_CONTAINS(error_of<DeviceError>(construct),
                    "--device cuda: no CUDA device is visible (check nvidia-smi and "
                    "CUDA_VISIBLE_DEVICES), or use --device cpu");
  } else {
    o.device = "cuda:" + std::to_string(cuda::device_count());
    EXPECT_CONTAINS(error_of<DeviceError>(construct), "there is no such device (");
  }
}

TEST(FaultSpec, ParsesTheOptionAndTheSetting) {
  EXPECT_EQ(train::FaultSpec::parse("kill", 1, 20).describe(), "kill on rank 1 at step 20");
  EXPECT_EQ(train::FaultSpec::parse("hang:0:3").describe(), "hang on rank 0 at step 3");
  EXPECT_CONTAINS(error_of<ValueError>([] { train::FaultSpec::parse("explode", 0, 1); }),
                  "--inject-fault must be one of mismatch, hang, kill but got 'explode'");
  EXPECT_CONTAINS(error_of<ValueError>([] { train::FaultSpec::parse("kill:1"); }),
                  "must be KIND:RANK:STEP");
  EXPECT_CONTAINS(error_of<ValueError>([] { train::FaultSpec::parse("kill:x:1"); }),
                  "LOOM_INJECT_FAULT's rank expects an integer");
}

// A save killed mid-write leaves a locked temporary while its writer lives (never touched) and an
// orphan once it is dead, which the next run removes and reports.
TEST_F(Trainer, TheNextRunRemovesTemporariesOfKilledSaves) {
  const std::string ck = options().checkpoint_dir;
  fs::create_directories(ck);
  // The child writes a large checkpoint; it is stopped while its temporary exists.
  // Made before fork: the child only reads it and runs no parallel work (the pool's threads are not
  // in the child).
  const Tensor big = zeros({64, 1024, 1024});  // 256 MiB: long enough to be caught mid-write
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipefd[0]);
    (void)!::write(pipefd[1], "x", 1);
    io::save_checkpoint(ck, 1, {{"model.w", big}}, Json::object());
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char c;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1);
  ::close(pipefd[0]);
  // Stopped once bytes are in its temporary: the writer locks it before writing.
  std::string temp;
  std::error_code ec;
  for (int i = 0; i < 20000 && temp.empty(); ++i) {
    for (const auto& e : fs::directory_iterator(ck)) {
      const std::string p = e.path().string();
      if (p.find(".tmp.") != std::string::npos && fs::file_size(p, ec) > 0 && !ec) temp = p;
    }
    if (temp.empty()) ::usleep(100);
  }
  ::kill(child, SIGSTOP);
  if (temp.empty() || !fs::exists(temp)) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    GTEST_SKIP() << "the child finished its save before it could be stopped mid-write";
  }
  // Alive and holding its lock: not an orphan, even when old.
  EXPECT_TRUE(io::remove_orphan_temp_files(ck, /*min_age_seconds=*/0).files.empty());
  EXPECT_TRUE(fs::exists(temp));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(fs::exists(temp));
  RecordingReporter rep;
  train::TrainOptions o = options();
  o.max_steps = 1;
  train::Trainer(o, &rep).run();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_CONTAINS(rep.all_messages(), "removed 1 temporary file(s)");
  EXPECT_CONTAINS(rep.all_messages(), "that interrupted checkpoint writes left in " + ck);
}

}  // namespace
}  // namespace loom::testing
