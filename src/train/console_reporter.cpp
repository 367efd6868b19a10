// ConsoleReporter: what `loom train` prints. A progress bar redrawn in place on a terminal; about
// five lines per epoch otherwise (logs, CI). Loss shown as this step's and as the epoch's running
// mean; ETA for the epoch and for the whole run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "loom/train/trainer.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

std::string duration(double s) {
  char buf[32];
  const long t = std::lround(std::max(0.0, std::min(s, 360000.0)));
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

class ConsoleReporter : public Reporter {
 public:
  explicit ConsoleReporter(bool bar) : bar_(bar) {}

  void on_start(const RunInfo& r) override {
    std::printf(
        "loom train: %s, %s %lld train / %lld %s, batch %lld, %s, %lld epochs of %lld "
        "steps, "
        "%d threads, seed %llu\n",
        r.model.c_str(), r.dataset.c_str(), static_cast<long long>(r.train_samples),
        static_cast<long long>(r.test_samples), r.test_split.c_str(),
        static_cast<long long>(r.batch), r.optimizer.c_str(), static_cast<long long>(r.epochs),
        static_cast<long long>(r.steps_per_epoch), r.threads,
        static_cast<unsigned long long>(r.seed));
    if (!r.device.empty()) std::printf("device: %s\n", r.device.c_str());
    if (!r.parallel.empty()) std::printf("data parallel: %s\n", r.parallel.c_str());
    std::printf("data: %s\n", r.data.c_str());
    if (!r.fault.empty()) std::printf("fault injection: %s\n", r.fault.c_str());
    std::fflush(stdout);
  }

  void on_message(const std::string& line) override {
    end_line();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  void on_step(const StepInfo& s) override {
    const auto now = Clock::now();
    if (bar_) {
      if (!s.last_in_epoch && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
      last_draw_ = now;
      const int width = 24;
      const int fill =
          static_cast<int>(width * s.step_in_epoch / std::max<int64_t>(s.steps_per_epoch, 1));
      std::string b(static_cast<size_t>(fill), '=');
      if (fill < width) b += '>' + std::string(static_cast<size_t>(width - fill - 1), ' ');
      std::printf(
          "\repoch %lld/%lld [%s] %lld/%lld loss %.4f (avg %.4f) %.0f samples/s ETA %s (run %s)   ",
          static_cast<long long>(s.epoch + 1), static_cast<long long>(s.epochs), b.c_str(),
          static_cast<long long>(s.step_in_epoch), static_cast<long long>(s.steps_per_epoch),
          s.loss, s.running_loss, s.samples_per_second, duration(s.eta_epoch_seconds).c_str(),
          duration(s.eta_run_seconds).c_str());
      in_line_ = true;
      std::fflush(stdout);
      return;
    }
    if (!s.last_in_epoch && s.step_in_epoch % std::max<int64_t>(s.steps_per_epoch / 5, 1) != 0)
      return;
    std::printf(
        "epoch %lld/%lld step %lld/%lld loss %.4f (avg %.4f) %.0f samples/s ETA %s (run %s)\n",
        static_cast<long long>(s.epoch + 1), static_cast<long long>(s.epochs),
        static_cast<long long>(s.step_in_epoch), static_cast<long long>(s.steps_per_epoch), s.loss,
        s.running_loss, s.samples_per_second, duration(s.eta_epoch_seconds).c_str(),
        duration(s.eta_run_seconds).c_str());
    std::fflush(stdout);
  }

  void on_eval_progress(const std::string& what, int64_t done, int64_t total) override {
    if (!bar_) return;  // logs get the result line only
    std::printf("\r%s: %lld/%lld samples   ", what.c_str(), static_cast<long long>(done),
                static_cast<long long>(total));
    in_line_ = done < total;
    if (!in_line_) std::printf("\r%*s\r", 40, "");
    std::fflush(stdout);
  }

  void on_epoch_end(const EpochReport& e) override {
    end_line();
    if (std::isnan(e.val_accuracy)) {
      std::printf("epoch %lld done in %s: train loss %.4f\n", static_cast<long long>(e.epoch + 1),
                  duration(e.seconds).c_str(), e.train_loss);
    } else {
      std::printf(
          "epoch %lld done in %s: train loss %.4f | validation (test split) loss %.4f, accuracy "
          "%.2f%%\n",
          static_cast<long long>(e.epoch + 1), duration(e.seconds).c_str(), e.train_loss,
          e.val_loss, 100.0 * e.val_accuracy);
    }
    std::fflush(stdout);
  }

  void on_checkpoint(const CheckpointInfo& c) override {
    end_line();
    std::printf("checkpoint: step %lld written to %s.{safetensors,json} (%.1f MB, %.0f ms; %s)\n",
                static_cast<long long>(c.step), c.path.c_str(), static_cast<double>(c.bytes) / 1e6,
                c.seconds * 1e3, c.why.c_str());
    std::fflush(stdout);
  }

  void on_end(const TrainResult& r) override {
    end_line();
    switch (r.status) {
      case TrainResult::Status::Stopped:
        std::printf("stopped at step %lld (%s)\n", static_cast<long long>(r.global_step),
                    r.signal ? strsignal(r.signal) : "--max-steps");
        break;
      case TrainResult::Status::AlreadyFinished:
        std::printf("checkpoint evaluated on the test split: loss %.4f, accuracy %.2f%%\n",
                    r.test_loss, 100.0 * r.test_accuracy);
        break;
      case TrainResult::Status::Finished:
        std::printf(
            "test accuracy %.2f%% | final loss %.4f | %lld steps in %.1f s | %.0f samples/s",
            100.0 * r.test_accuracy, r.final_loss, static_cast<long long>(r.steps_run), r.seconds,
            r.samples_per_second);
        if (r.validation_seconds > 0) std::printf(" (+%.1f s validating)", r.validation_seconds);
        std::printf("\n");
        break;
    }
    std::fflush(stdout);
  }

 private:
  void end_line() {
    if (in_line_) std::printf("\n");
    in_line_ = false;
  }

  bool bar_;
  bool in_line_ = false;
  Clock::time_point last_draw_{};
};

}  // namespace

std::unique_ptr<Reporter> make_console_reporter(bool bar) {
  return std::make_unique<ConsoleReporter>(bar);
}

}  // namespace loom::train
