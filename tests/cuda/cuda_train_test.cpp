// The main job on one GPU (Note [Training on a device] in src/train/trainer.cpp): the same seed
// gives the CPU's loss curve within TF32's tolerance (the model is initialised on the CPU and
// moved, so both runs start from the same parameters and see the same batches), the CNN trains, and
// checkpoints move between the devices both ways. Label `cuda`: every test skips, saying so, where
// no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "loom/cuda.h"
#include "loom/error.h"
#include "train/train_fixture.h"

namespace loom::testing {
namespace {

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible"

class DeviceReporter : public RecordingReporter {
 public:
  void on_start(const train::RunInfo& r) override { device = r.device; }
  std::string device;
};

// cuBLASLt may run float32 products in TF32 (10-bit mantissa): losses agree to about 1e-3.
double loss_tolerance(double cpu) {
  return 1e-2 + 1e-2 * std::fabs(cpu);
}

using CudaTrain = TinyTraining;

TEST_F(CudaTrain, MlpFollowsTheCpuLossCurveForTheSameSeed) {
  REQUIRE_GPU();
  train::TrainOptions o = options();
  o.checkpoint_dir.clear();
  o.validate = false;
  o.seed = 11;
  DeviceReporter cpu_rep, gpu_rep;
  const train::TrainResult cpu = train::Trainer(o, &cpu_rep).run();
  o.device = "cuda";
  const train::TrainResult gpu = train::Trainer(o, &gpu_rep).run();
  ASSERT_EQ(gpu.status, train::TrainResult::Status::Finished);
  EXPECT_EQ(gpu_rep.device.rfind("cuda:0 (", 0), 0u) << gpu_rep.device;
  EXPECT_EQ(cpu_rep.device, "");
  EXPECT_EQ(gpu.global_step, cpu.global_step);
  // 8 steps an epoch: the device run reads its loss back every step (steps_per_epoch / 5 == 1),
  // so both runs report every step.
  ASSERT_EQ(gpu_rep.steps.size(), cpu_rep.steps.size());
  for (size_t i = 0; i < cpu_rep.steps.size(); ++i) {
    EXPECT_EQ(gpu_rep.steps[i].global_step, cpu_rep.steps[i].global_step);
    EXPECT_NEAR(gpu_rep.steps[i].loss, cpu_rep.steps[i].loss, loss_tolerance(cpu_rep.steps[i].loss))
        << "step " << i;
    EXPECT_NEAR(gpu_rep.steps[i].running_loss, cpu_rep.steps[i].running_loss,
                loss_tolerance(cpu_rep.steps[i].running_loss))
        << "step " << i;
  }
  ASSERT_EQ(gpu_rep.epochs.size(), 2u);
  EXPECT_NEAR(gpu_rep.epochs[1].train_loss, cpu_rep.epochs[1].train_loss,
              loss_tolerance(cpu_rep.epochs[1].train_loss));
  // The evaluation ran on the device and scores what the CPU scores.
  EXPECT_NEAR(gpu.test_loss, cpu.test_loss, loss_tolerance(cpu.test_loss));
  EXPECT_NEAR(gpu.test_accuracy, cpu.test_accuracy, 0.05);
}

TEST_F(CudaTrain, CnnTrainsAFewSteps) {
  REQUIRE_GPU();
  train::TrainOptions o = options();
  o.checkpoint_dir.clear();
  o.model = "cnn";
  o.epochs = 1;
  o.device = "cuda:0";
  RecordingReporter rep;
  const train::TrainResult r = train::Trainer(o, &rep).run();
  ASSERT_EQ(r.status, train::TrainResult::Status::Finished);
  EXPECT_EQ(r.global_step, 8);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  ASSERT_EQ(rep.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(rep.epochs[0].val_accuracy));
  EXPECT_TRUE(std::isfinite(r.test_accuracy));
}

// A finished GPU run's checkpoint, resumed on the CPU, holds exactly the GPU's parameters: the
// resumed run evaluates them (nothing is left to train) and gets the bits a CPU evaluation of the
// checkpoint file gets, and close to what the GPU measured.
TEST_F(CudaTrain, CheckpointSavedOnCudaResumesOnCpuWithIdenticalParameters) {
  REQUIRE_GPU();
  train::TrainOptions o = options();
  o.epochs = 1;
  o.device = "cuda";
  const train::TrainResult gpu = train::Trainer(o, nullptr).run();
  ASSERT_EQ(gpu.status, train::TrainResult::Status::Finished);
  o.device = "cpu";
  o.resume = true;
  const train::TrainResult cpu = train::Trainer(o, nullptr).run();
  ASSERT_EQ(cpu.status, train::TrainResult::Status::AlreadyFinished);
  const train::EvalReport file =
      train::evaluate_saved_model(o.checkpoint_dir, o.data_dir, 1000, nullptr);
  EXPECT_DOUBLE_EQ(cpu.test_loss, file.loss);
  EXPECT_DOUBLE_EQ(cpu.test_accuracy, file.accuracy);
  EXPECT_NEAR(cpu.test_loss, gpu.test_loss, loss_tolerance(gpu.test_loss));
}

// Stopped mid-run on one device, finished on the other (optimizer state and loader position
// included), both ways: the result stays within tolerance of a run that never stopped.
TEST_F(CudaTrain, RunsContinueAcrossDevicesFromMidRunCheckpoints) {
  REQUIRE_GPU();
  train::TrainOptions o = options();
  o.validate = false;
  o.checkpoint_dir.clear();
  const train::TrainResult straight = train::Trainer(o, nullptr).run();
  for (const auto& [first, second] : {std::pair<std::string, std::string>{"cuda", "cpu"},
                                      std::pair<std::string, std::string>{"cpu", "cuda"}}) {
    train::TrainOptions a = options();
    a.validate = false;
    a.checkpoint_dir = dir_ / ("ck-" + first);
    a.device = first;
    a.max_steps = 5;
    const train::TrainResult stopped = train::Trainer(a, nullptr).run();
    ASSERT_EQ(stopped.status, train::TrainResult::Status::Stopped) << first;
    ASSERT_EQ(stopped.global_step, 5) << first;
    a.device = second;
    a.max_steps = 0;
    a.resume = true;
    const train::TrainResult finished = train::Trainer(a, nullptr).run();
    ASSERT_EQ(finished.status, train::TrainResult::Status::Finished) << first << " -> " << second;
    EXPECT_EQ(finished.global_step, straight.global_step);
    EXPECT_EQ(finished.steps_run, straight.global_step - 5);
    EXPECT_NEAR(finished.final_loss, straight.final_loss, loss_tolerance(straight.final_loss))
        << first << " -> " << second;
    EXPECT_NEAR(finished.test_accuracy, straight.test_accuracy, 0.05) << first << " -> " << second;
  }
}

TEST(CudaTrainOptions, DataParallelOnCudaIsRefusedNotRunOnTheCpu) {
  REQUIRE_GPU();
  ::setenv("WORLD_SIZE", "2", 1);
  train::TrainOptions o;
  o.device = "cuda";
  // The refusal comes before the data is read and before a process group would wait for a peer.
  bool refused = false;
  try {
    train::Trainer(o, nullptr).run();
  } catch (const NotImplementedError& e) {
    refused = std::string(e.what()).find("needs the NCCL backend") != std::string::npos;
  }
  ::unsetenv("WORLD_SIZE");
  EXPECT_TRUE(refused);
}

}  // namespace
}  // namespace loom::testing
