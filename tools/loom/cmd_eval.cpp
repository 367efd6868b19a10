// `loom eval`: evaluates a model written by `loom train --save-final`, or the newest checkpoint of
// a checkpoint directory, on the Fashion-MNIST test split.
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "cli.h"
#include "loom/error.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

const char* const kClasses[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

int run_eval(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "no-progress"}, {"data", "batch"});
  if (args.flag("help") || args.positionals().size() != 1) {
    std::printf(
        "usage: loom eval MODEL [--data DIR] [--batch N]\n"
        "  MODEL is a file written by `loom train --save-final` (safetensors with the architecture "
        "and\n"
        "  input normalisation in its metadata) or a --checkpoint-dir (its newest checkpoint). "
        "Prints the\n"
        "  test-split loss, accuracy and per-class accuracy.\n");
    return args.flag("help") ? 0 : 2;
  }
  const int64_t batch = args.get_int("batch", 1000, 1, 1 << 20);
  std::unique_ptr<train::Reporter> reporter =
      train::make_console_reporter(isatty(STDOUT_FILENO) && !args.flag("no-progress"));
  const train::EvalReport r = train::evaluate_saved_model(
      args.positionals()[0], args.get_or("data", ""), batch, reporter.get());
  std::printf("%s\ntest split: %lld samples, loss %.4f, accuracy %.2f%%\n", r.source.c_str(),
              static_cast<long long>(r.samples), r.loss, 100.0 * r.accuracy);
  for (size_t c = 0; c < r.class_accuracy.size(); ++c) {
    std::printf("  %-12s %6.2f%%\n", c < 10 ? kClasses[c] : std::to_string(c).c_str(),
                100.0 * r.class_accuracy[c]);
  }
  return 0;
}

const RegisterCommand kEval("eval", "evaluate a saved model or a checkpoint on the test split",
                            run_eval);

}  // namespace
}  // namespace loom::cli
