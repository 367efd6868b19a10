// A small Fashion-MNIST look-alike (IDX files in a temporary directory) whose classes a model can
// learn in a few steps, a reporter that keeps what a run reported, and a cache directory of its
// own, so the trainer's tests run in seconds and never touch the real data set.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "loom/train/trainer.h"
#include "temp_dir.h"

namespace loom::testing {

// Class c is a bright 6x6 square at one of ten places plus noise, so that it is learnable.
inline void write_tiny_fashion_mnist(const std::string& dir, int64_t train, int64_t test) {
  auto write = [&](const std::string& name, int64_t n, bool images, uint32_t salt) {
    std::string s = {'\0', '\0', '\x08', static_cast<char>(images ? 3 : 1)};
    auto be32 = [&](uint32_t v) {
      for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xFF);
    };
    be32(static_cast<uint32_t>(n));
    if (images) {
      be32(28);
      be32(28);
    }
    uint32_t x = 2463534242u ^ salt;
    for (int64_t i = 0; i < n; ++i) {
      const int c = static_cast<int>((i * 7 + salt) % 10);
      if (!images) {
        s += static_cast<char>(c);
        continue;
      }
      const int r0 = 2 + (c / 5) * 12, c0 = 2 + (c % 5) * 5;
      for (int r = 0; r < 28; ++r) {
        for (int col = 0; col < 28; ++col) {
          x ^= x << 13;
          x ^= x >> 17;
          x ^= x << 5;
          const bool on = r >= r0 && r < r0 + 6 && col >= c0 && col < c0 + 4;
          s += static_cast<char>(on ? 200 + x % 56 : x % 40);
        }
      }
    }
    std::ofstream(dir + "/" + name, std::ios::binary) << s;
  };
  write("train-images-idx3-ubyte", train, true, 1);
  write("train-labels-idx1-ubyte", train, false, 1);
  write("t10k-images-idx3-ubyte", test, true, 5);
  write("t10k-labels-idx1-ubyte", test, false, 5);
}

class RecordingReporter : public train::Reporter {
 public:
  void on_message(const std::string& line) override { messages.push_back(line); }
  void on_epoch_end(const train::EpochReport& e) override { epochs.push_back(e); }
  void on_checkpoint(const train::CheckpointInfo& c) override { checkpoints.push_back(c); }
  void on_step(const train::StepInfo& s) override { steps.push_back(s); }
  std::string all_messages() const {
    std::string s;
    for (const auto& m : messages) s += m + "\n";
    return s;
  }
  std::vector<std::string> messages;
  std::vector<train::EpochReport> epochs;
  std::vector<train::CheckpointInfo> checkpoints;
  std::vector<train::StepInfo> steps;
};

// A temporary data set and cache; options() trains an MLP on it with batch 32 (8 steps an epoch).
class TinyTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_fashion_mnist(dir_.path(), 256, 100);
    ::setenv("LOOM_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  train::TrainOptions options() const {
    train::TrainOptions o;
    o.data_dir = dir_.path();
    o.epochs = 2;
    o.batch = 32;
    o.workers = 0;
    o.threads = 1;
    o.checkpoint_dir = dir_ / "ck";
    o.checkpoint_every = 3;
    return o;
  }
  TempDir dir_{"loom-train"};
};

}  // namespace loom::testing
