// Step-numbered checkpoints: the `latest` pointer, rotation, and errors for damaged checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

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
    io::save_checkpoint(d.path, step, state(static_cast<float>(step)),
                        Json::object({{"epoch", step / 10}}), 2);
  }
  auto c = io::load_latest_checkpoint(d.path);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 40);
  EXPECT_EQ(c->sidecar.at("epoch").as_int(), 4);
  EXPECT_EQ(to_vector<float>(c->tensors[0].second), std::vector<float>(6, 40.0f));
  int files = 0;
  for (const auto& e : fs::directory_iterator(d.path))
    files += e.path().filename().string().rfind("step-", 0) == 0;
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
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "step-000000005.json");
  std::ofstream(d.path + "/latest") << "../../etc/passwd\n";
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "does not name a checkpoint");
}

TEST(Checkpoint, MismatchedStepBetweenFilesIsDetected) {
  TempDir d;
  const std::string a = io::save_checkpoint(d.path, 5, state(1.0f), Json::object(), 5);
  const std::string b = io::save_checkpoint(d.path, 6, state(2.0f), Json::object(), 5);
  fs::copy_file(a + ".safetensors", b + ".safetensors", fs::copy_options::overwrite_existing);
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "different step");
}

TEST(Checkpoint, AFlippedBitInATensorIsCaughtAndNamed) {
  TempDir d;
  const std::string prefix =
      io::save_checkpoint(d.path, 5, state(1.0f), Json::object({{"epoch", 1}}));
  // The last byte of the file is the last byte of the last tensor's data.
  std::fstream f(prefix + ".safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-8, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(-8, std::ios::end);
  f.write(&c, 1);
  f.close();
  const std::string msg = error_of<DataError>([&] { io::load_latest_checkpoint(d.path); });
  EXPECT_CONTAINS(
      msg,
      "step-000000005.safetensors: the bytes of tensor 'optim.state.0.step' fail their CRC32C");
  EXPECT_CONTAINS(msg, "the file is corrupt");
}

TEST(Checkpoint, AnEditedSidecarFailsItsChecksum) {
  TempDir d;
  const std::string prefix =
      io::save_checkpoint(d.path, 5, state(1.0f), Json::object({{"epoch", 1}}));
  auto c = io::load_latest_checkpoint(d.path);
  ASSERT_TRUE(c.has_value() && c->verified);
  std::string text = io::read_file(prefix + ".json");
  text.replace(text.find("\"epoch\": 1"), 10, "\"epoch\": 2");
  io::atomic_write_file(prefix + ".json", text);
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "step-000000005.json fails its CRC32C");
  // Whitespace is not content: the checksum covers the JSON value, not its layout.
  Json side = Json::parse(io::read_file(prefix + ".json"), "x");
  side.at("epoch") = Json(1);
  io::atomic_write_file(prefix + ".json", side.dump(4));
  EXPECT_TRUE(io::load_latest_checkpoint(d.path).has_value());
}

TEST(Checkpoint, ATensorMissingFromTheFileOrRenamedIsCaught) {
  TempDir d;
  const std::string prefix = io::save_checkpoint(d.path, 5, state(1.0f), Json::object());
  io::save_safetensors(prefix + ".safetensors", {{"model.w", full({2, 3}, 1.0f)}},
                       {{"loom_step", "5"}});
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "holds 1 tensors but its sidecar lists 2");
  io::save_safetensors(
      prefix + ".safetensors",
      {{"model.v", full({2, 3}, 1.0f)}, {"optim.state.0.step", from_vector<int64_t>({7})}},
      {{"loom_step", "5"}});
  EXPECT_CONTAINS(error_of<DataError>([&] { io::load_latest_checkpoint(d.path); }),
                  "tensor 0 is 'model.v' but the sidecar lists 'model.w'");
}

TEST(Checkpoint, KeepsTheNewestKAndAtLeastOne) {
  TempDir d;
  for (int step = 1; step <= 5; ++step)
    io::save_checkpoint(d.path, step, state(1.0f), Json::object(), /*keep=*/1);
  int jsons = 0;
  for (const auto& e : fs::directory_iterator(d.path)) jsons += e.path().extension() == ".json";
  EXPECT_EQ(jsons, 1);
  EXPECT_EQ(io::load_latest_checkpoint(d.path)->step, 5);
}

TEST(OrphanTemporaries, OnlyUnlockedFilesOfDeadWritersGo) {
  TempDir d;
  // A temporary of a process that is gone (pid 2^22 + 1 is above any pid_max default), and files
  // that only look alike.
  std::ofstream(d.path + "/step-000000001.safetensors.tmp.4194305.0") << "partial";
  std::ofstream(d.path + "/notes.tmp.txt") << "keep";
  std::ofstream(d.path + "/step-000000001.json") << "{}";
  // A temporary named after this (live) process that nobody locks: kept while young, removed once
  // older than the threshold (its pid was reused).
  std::ofstream(d.path + "/latest.tmp." + std::to_string(::getpid()) + ".9") << "x";
  io::OrphanSweep s = io::remove_orphan_temp_files(d.path);
  ASSERT_EQ(s.files.size(), 1u);
  EXPECT_EQ(s.files[0], "step-000000001.safetensors.tmp.4194305.0");
  EXPECT_EQ(s.bytes, 7u);
  s = io::remove_orphan_temp_files(d.path, /*min_age_seconds=*/0);
  ASSERT_EQ(s.files.size(), 1u);
  EXPECT_EQ(s.files[0], "latest.tmp." + std::to_string(::getpid()) + ".9");
  EXPECT_TRUE(fs::exists(d.path + "/notes.tmp.txt"));
  EXPECT_TRUE(fs::exists(d.path + "/step-000000001.json"));
  EXPECT_TRUE(io::remove_orphan_temp_files(d.path + "/missing").files.empty());
}

}  // namespace
}  // namespace loom
