// `loom autograd`: shows the autograd layer at work on a small MLP: the backward graph recorded by
// the forward pass, the order in which the engine runs its nodes (with their times), how many
// operators have derivatives, and the error that an in-place change of a saved tensor produces.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "cli.h"
#include "loom/autograd.h"
#include "loom/derivatives.h"
#include "loom/ops.h"
#include "loom/record_function.h"

namespace loom::cli {
namespace {

int run_autograd(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "list"}, {});
  if (args.flag("help")) {
    std::printf(
        "usage: loom autograd [--list]\n  The backward graph of a small MLP and how the engine "
        "runs it;\n"
        "  --list prints every operator's derivative (or non-differentiable mark).\n");
    return 0;
  }
  if (args.flag("list")) {
    auto all = autograd::all_derivatives();
    std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->op < b->op; });
    for (const auto* d : all) {
      std::printf("%-34s %s  (%s)\n", d->op.c_str(),
                  d->differentiable ? "derivative" : "non-differentiable", d->file);
    }
    return 0;
  }
  Generator gen(0);
  Tensor x = randn({4, 8}, {}, gen), y = from_vector<int64_t>({1, 0, 2, 1});
  Tensor w1 = mul(randn({16, 8}, {}, gen), 0.3).requires_grad_(), b1 = zeros({16}).requires_grad_();
  Tensor w2 = mul(randn({3, 16}, {}, gen), 0.3).requires_grad_(), b2 = zeros({3}).requires_grad_();
  Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y);
  std::printf(
      "== forward: loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y) = %.4f ==\n",
      loss.item<double>());
  std::printf("The graph recorded for loss (node #sequence-number <- forward operator):\n%s\n",
              autograd::describe_graph(loss).c_str());

  struct Ran {
    std::string name;
    int64_t ns;
  };
  std::vector<Ran> ran;
  std::mutex mu;
  RecordFunctionCallbacks cb;
  cb.needs_inputs = false;
  cb.on_exit = [&](OpEvent& ev) {
    if (ev.kind != OpEvent::Kind::Backward) return;
    std::lock_guard<std::mutex> lock(mu);
    ran.push_back({std::string(ev.name), ev.end_ns - ev.start_ns});
  };
  uint64_t h = add_record_callbacks(cb);
  loss.backward();
  remove_record_callbacks(h);
  std::printf(
      "== backward: the engine ran (highest sequence number first; AccumulateGrad as soon as "
      "ready) ==\n");
  for (size_t i = 0; i < ran.size(); ++i) {
    std::printf("  %2zu. %-28s %8.1f us\n", i + 1, ran[i].name.c_str(),
                static_cast<double>(ran[i].ns) / 1e3);
  }
  std::printf("  w1.grad norm %.4f, b2.grad = %s\n\n", norm(w1.grad()).item<double>(),
              b2.grad().str().c_str());

  // A second step with the gradients kept: linear's weight gradients go straight into .grad().
  const uint64_t in_place = autograd::grads_accumulated_in_place();
  cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y).backward();
  std::printf(
      "== a second backward into the kept .grad(): %llu weight gradients added in place by the\n"
      "   GEMM (no temporary, no separate add); w1.grad norm now %.4f ==\n\n",
      static_cast<unsigned long long>(autograd::grads_accumulated_in_place() - in_place),
      norm(w1.grad()).item<double>());

  int diff = 0, nondiff = 0;
  for (const auto* d : autograd::all_derivatives()) (d->differentiable ? diff : nondiff)++;
  std::printf(
      "== derivatives: %d operators have one, %d are declared non-differentiable (loom autograd "
      "--list) ==\n\n",
      diff, nondiff);

  std::printf("== version counters: a saved tensor modified in place ==\n");
  Tensor a = mul(w1, 1.0);
  Tensor b = mul(a, a);  // mul saves a
  add_(a, 1.0);
  try {
    sum(b).backward();
  } catch (const Error& e) {
    std::printf("  %s\n", e.what());
  }
  return 0;
}

const RegisterCommand kAutograd("autograd",
                                "show the backward graph of a small MLP and how the engine runs it",
                                run_autograd);

}  // namespace
}  // namespace loom::cli
