// Step-numbered checkpoints: the `latest` pointer, rotation, and errors for damaged checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loom/checkpoint.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/loom_ckpt_XXXXXX";
    path = mkdtemp(buf);
  }
  ~TempDir() { fs::remove_all(path); }
};

io::TensorMap state(float v) {
  return {{"model.w", full({2, 3}, v)}, {"optim.state.0.step", from_vector<int64_t>({7})}};
}

TEST(Checkpoint, LatestNamesTheNewestAndOldOnesAreRotated) {
  TempDir d;
  EXPECT_FALSE(io::load_latest_checkpoint(d.path).has_value());
  for (int step = 10; step <= 40; step += 10) {
    io::save_checkpoint(d.path, step, state(static_cast<float>(step)), Json::object({{"epoch", step / 10}}), 2);
  }
  auto c = io::load_latest_checkpoint(d.path);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 40);
  EXPECT_EQ(c->sidecar.at("epoch").as_int(), 4);
  EXPECT_EQ(to_vector<float>(c->tensors[0].second), std::vector<float>(6, 40.0f));
  int files = 0;
  for (const auto& e : fs::directory_iterator(d.path)) files += e.path().filename().string().rfind("step-", 0) == 0;
  EXPECT_EQ(files, 4);  // two checkpoints, two files each
  EXPECT_TRUE(fs::exists(d.path + "/step-000000030.safetensors"));
  EXPECT_FALSE(fs::exists(d.path + "/step-000000020.safetensors"));
}

TEST(Checkpoint, TruncatedTensorFileNamesFileAndTensor) {
  TempDir d;
  const std::string prefix = io::save_checkpoint(d.path, 5, state(1.0f), Json::object());
  fs::resize_file(prefix + ".safetensors", fs::file_size(prefix + ".safetensors") - 4);
  std::string msg = error_of<DataError>([&] { io::load_latest_checkpoint(d.path); });
  EXPECT_CONTAINS(msg, "step-000000005.safetensors");
  EXPECT_CONTAINS(msg, "optim.state.0.step");
}

TEST(Checkpoint, CorruptSidecarAndPointerAreDataErrors) {
  TempDir d;
  const std::string prefix = io::save_checkpoint(d.path, 5, state(1.0f), Json::object());
  std::ofstream(prefix + ".json") << "{\"checkpoint\": {\"format\": ";
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }), "step-000000005.json");
  std::ofstream(d.path + "/latest") << "../../etc/passwd\n";
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }), "does not name a checkpoint");
}

TEST(Checkpoint, MismatchedStepBetweenFilesIsDetected) {
  TempDir d;
  const std::string a = io::save_checkpoint(d.path, 5, state(1.0f), Json::object(), 5);
  const std::string b = io::save_checkpoint(d.path, 6, state(2.0f), Json::object(), 5);
  fs::copy_file(a + ".safetensors", b + ".safetensors", fs::copy_options::overwrite_existing);
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }), "different step");
}

}  // namespace
}  // namespace loom
