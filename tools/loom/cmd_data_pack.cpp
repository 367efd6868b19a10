// `loom data pack SRC OUT`: converts Fashion-MNIST IDX files, WebDataset-style tar shards or a
// directory of files into a loom shard dataset (loom/data/pack.h), with a progress bar.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.h"
#include "loom/data/pack.h"
#include "loom/datasets.h"
#include "loom/error.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

double megabytes(uint64_t bytes) {
  return static_cast<double>(bytes) / 1e6;
}

// Draws "\r[=====>   ] 12000 samples 8.1 MB 45 MB/s" on a terminal (a few times a second), else a
// plain line at every tenth of the source (or every 10 s when its size is unknown).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(STDOUT_FILENO) == 1), start_(Clock::now()) {}

  void update(int64_t samples, uint64_t written, uint64_t read, uint64_t total) {
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? megabytes(written) / elapsed : 0.0;
    const double fraction =
        total > 0 ? std::min(1.0, static_cast<double>(read) / static_cast<double>(total)) : 0.0;
    if (tty_) {
      if (now - last_ < std::chrono::milliseconds(100) && read < total) return;
      last_ = now;
      constexpr int kWidth = 30;
      std::string bar(kWidth, ' ');
      if (total > 0) {
        const int filled = static_cast<int>(fraction * kWidth);
        for (int i = 0; i < filled; ++i) bar[i] = '=';
        if (filled < kWidth) bar[filled] = '>';
      }
      std::printf("\r[%s] %lld samples %.1f MB %.0f MB/s   ", bar.c_str(),
                  static_cast<long long>(samples), megabytes(written), rate);
      std::fflush(stdout);
      drawn_ = true;
      return;
    }
    const int step = total > 0 ? static_cast<int>(fraction * 10) : static_cast<int>(elapsed / 10);
    if (step <= last_step_) return;
    last_step_ = step;
    if (total > 0) {
      std::printf("%3d%%  %lld samples  %.1f MB written  %.0f MB/s\n", step * 10,
                  static_cast<long long>(samples), megabytes(written), rate);
    } else {
      std::printf("%lld samples  %.1f MB written  %.0f MB/s\n", static_cast<long long>(samples),
                  megabytes(written), rate);
    }
    std::fflush(stdout);
  }

  // Ends the bar's line so that what follows starts on a fresh one.
  void finish() {
    if (drawn_) std::printf("\n");
    drawn_ = false;
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  bool tty_;
  Clock::time_point start_;
  Clock::time_point last_{};
  bool drawn_ = false;
  int last_step_ = 0;
};

void usage() {
  std::printf(
      "usage: loom data pack SRC OUT [--shard-mb N] [--zstd LEVEL] [--align N] [--split "
      "train|test]\n"
      "  Converts SRC into a shard dataset in the directory OUT. SRC is one of:\n"
      "    a Fashion-MNIST / MNIST IDX directory (e.g. %s): columns image, label\n"
      "    a .tar file or a directory of .tar files (WebDataset style): __key__ and one column "
      "per\n"
      "      extension (.cls/.label/.index become integers)\n"
      "    any other directory: one sample per regular file, columns path and data\n"
      "  --shard-mb N     target shard size in MiB (default 64; fractions allowed)\n"
      "  --zstd LEVEL     compress each sample with zstd at LEVEL 1..19 (default 0: none)\n"
      "  --align N        align records to N bytes, a power of two 8..4096 (default 64)\n"
      "  --split S        train or test, for IDX sources (default train)\n",
      data::default_fashion_mnist_dir().c_str());
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"shard-mb", "zstd", "align", "split"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  const auto& pos = args.positionals();
  if (pos.size() != 2) {
    usage();
    LOOM_THROW(ValueError, "[loom data pack] expected SRC and OUT but got ", pos.size(),
               " argument(s)");
  }
  data::PackOptions options;
  if (auto mb = args.get("shard-mb")) {
    const double v = args.get_double("shard-mb", 0, 1.0 / (1 << 20), 1 << 20);
    options.writer.shard_bytes = std::max<size_t>(1, static_cast<size_t>(v * (1 << 20)));
  }
  const int64_t level = args.get_int("zstd", 0, 0, 19);  // 0: off
  options.writer.zstd_level = static_cast<int>(level);
  const int64_t align =
      args.get_int("align", static_cast<int64_t>(options.writer.sample_align), 8, 4096);
  LOOM_CHECK(align >= 8 && align <= 4096 && (align & (align - 1)) == 0,
             "[loom data pack] --align expects a power of two from 8 to 4096 but got ", align);
  options.writer.sample_align = static_cast<size_t>(align);
  options.split = args.get_or("split", "train");
  LOOM_CHECK(options.split == "train" || options.split == "test",
             "[loom data pack] --split expects train or test but got '", options.split, "'");

  ProgressPrinter printer;
  options.progress = [&](int64_t samples, uint64_t written, uint64_t read, uint64_t total) {
    printer.update(samples, written, read, total);
  };
  data::PackResult result;
  try {
    result = data::pack(pos[0], pos[1], options);
  } catch (...) {
    printer.finish();
    throw;
  }
  printer.finish();
  std::printf("packed %lld samples into %d shard%s (%.1f MB) in %s in %.1f s\n",
              static_cast<long long>(result.samples), result.shards, result.shards == 1 ? "" : "s",
              megabytes(result.bytes), pos[1].c_str(), printer.seconds());
  return 0;
}

const RegisterCommand kPack("data pack",
                            "convert IDX files, tar shards or a directory into loom shards", run);

}  // namespace
}  // namespace loom::cli
