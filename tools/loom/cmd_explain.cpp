// `loom explain`: the compiler at work on small functions (lesson 2): a pointwise chain captured
// once and replayed, a new input shape that fails a guard and recompiles, and a host read that
// breaks the graph, each with loom::explain's report (graphs, guards with their failure counts,
// breaks with the user's call, recompile reasons).
#include <cstdio>
#include <vector>

#include "cli.h"
#include "loom/compile.h"
#include "loom/ops.h"
#include "loom/warning.h"

namespace loom::cli {
namespace {

using Tensors = std::vector<Tensor>;

// The function the demo compiles: a chain of pointwise operators and a reduction.
Tensors chain(const Tensors& in) {
  const Tensor y = sigmoid(add(mul(in[0], 2.0), in[1]));
  return {sum(mul(y, y), IntArrayRef{1})};
}

// A function whose control flow reads a value on the host: a graph break.
Tensors clipped(const Tensors& in) {
  const Tensor norm = sqrt(sum(mul(in[0], in[0])));
  if (gt(norm, 1.0).item<bool>()) return {div(in[0], norm)};
  return {in[0]};
}

int run_explain(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {});
  if (args.flag("help")) {
    std::printf(
        "usage: loom explain\n"
        "  Compiles two small functions with loom::compile and prints what the compiler did:\n"
        "  the captured graph, its guards, a recompile after an input changes shape, and a\n"
        "  graph break at a host read (item()) with the call that caused it, and guard growth\n"
        "  over 40 sequence lengths: dynamic shapes off, buckets, automatic dynamic; and the\n"
        "  joint forward/backward graph of a layer, split by a min cut (backend aot), and the\n"
        "  same layer through backend inductor: decompositions, fused halves, the memory plan.\n"
        "  LOOM_LOGS=recompiles,guards,graph_breaks,output_code prints the same as it happens.\n");
    return 0;
  }
  Generator gen(0);
  CompiledFunction f = compile(chain, {.name = "chain"});
  std::printf(
      "== chain(x, b) = sum(sigmoid(2x + b)^2, dim 1), called 3 times on [4, 8], then on "
      "[16, 8] ==\n");
  for (int i = 0; i < 3; ++i) f({randn({4, 8}, {}, gen), randn({4, 8}, {}, gen)});
  f({randn({16, 8}, {}, gen), randn({16, 8}, {}, gen)});
  std::printf("%s\n", f.report().str().c_str());

  std::printf(
      "== clipped(x): divides x by its norm when (norm > 1).item(); called on a large x, a "
      "small one, then another large and another small ==\n");
  WarningsToStderr quiet(false);  // the report below says it
  CompiledFunction g = compile(clipped, {.name = "clipped"});
  g({randn({8}, {}, gen)});
  g({mul(randn({8}, {}, gen), 0.01)});
  g({randn({8}, {}, gen)});
  g({mul(randn({8}, {}, gen), 0.01)});
  std::printf("%s", g.report().str().c_str());
  std::printf(
      "\nThe graph resumes after the break: a replay runs it up to the host read and goes on\n"
      "while the value is the captured one (a guard), so each branch has a graph of its own.\n"
      "With CompileOptions::fullgraph the break is a CompileError instead.\n");

  std::printf(
      "\n== lengths(x) = sum(2x, dim 1) over 40 sequence lengths (5 to 44): dynamic shapes "
      "off, then buckets 16/32/64, then automatic dynamic ==\n");
  TensorFunction lengths = [](const Tensors& in) -> Tensors {
    return {sum(mul(in[0], 2.0), IntArrayRef{1})};
  };
  CompiledFunction off = compile(lengths, {.dynamic = DynamicShapes::Off,
                                           .recompile_limit = 64,
                                           .name = "lengths (dynamic off)",
                                           .guard_budget = 100});
  CompiledFunction bucketed =
      compile(lengths, {.dynamic = DynamicShapes::Off,
                        .name = "lengths (buckets)",
                        .buckets = {{.input = 0, .dim = 1, .sizes = {16, 32, 64}}}});
  CompiledFunction automatic = compile(lengths, {.name = "lengths (automatic dynamic)"});
  for (int64_t len = 5; len < 45; ++len) {
    const Tensors in = {randn({4, len}, {}, gen)};
    off(in);
    bucketed(in);
    automatic(in);
  }
  for (const CompiledFunction* fn : {&off, &bucketed, &automatic}) {
    // The summary lines of the report: calls, graphs, guard growth, storms, buckets.
    const std::string text = fn->report().str();
    std::string head = text.substr(0, text.find('\n') + 1);
    for (const char* key : {"guards: ", "recompile storm: ", "bucket: "}) {
      for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
        if (at > 0 && text[at - 1] != '\n') continue;
        std::string line = text.substr(at, text.find('\n', at) - at);
        if (line.size() > 160) line = line.substr(0, 157) + "...";
        head += "  " + line + "\n";
      }
    }
    std::printf("%s", head.c_str());
  }
  std::printf(
      "\nWith dynamic shapes off every length is a graph: guards grow with the graphs, a call\n"
      "checks them in turn, and the recompile storm is said once. Buckets pad the length\n"
      "(the function must be blind to the padding, as a sum of zeros is), automatic dynamic\n"
      "makes it a symbol after the first change.\n");

  std::printf(
      "\n== layer(x) = sum(tanh(x @ W + b)) with parameters W [8, 4] and b [4] that require "
      "grad, backend aot, called twice with backward: the joint graph ==\n");
  const Tensor w = randn({8, 4}, {}, gen).requires_grad_(true);
  const Tensor b = randn({4}, {}, gen).requires_grad_(true);
  CompiledFunction layer =
      compile([&w, &b](const Tensors& in) -> Tensors { return {sum(tanh(add(mm(in[0], w), b)))}; },
              {.backend = CompileBackend::Aot, .name = "layer"});
  for (int i = 0; i < 2; ++i) layer({randn({2, 8}, {}, gen)})[0].backward();
  std::printf("%s", layer.report().str().c_str());
  std::printf(
      "\nThe function and its backward are one captured graph, split in two by a minimum cut:\n"
      "the forward returns what the backward reads (the saved tensors), choosing the fewest\n"
      "bytes; cheap pointwise operators the backward needs are recomputed there rather than\n"
      "saved, matrix products never. W and b get their gradients in .grad as eagerly.\n");

  std::printf(
      "\n== the same layer, backend inductor (the default), W [8, 64]: decompositions, fusion of "
      "both halves, the memory plan ==\n");
  const Tensor w2 = randn({8, 64}, {}, gen).requires_grad_(true);
  const Tensor b2 = randn({64}, {}, gen).requires_grad_(true);
  CompiledFunction fused = compile(
      [&w2, &b2](const Tensors& in) -> Tensors {
        return {mul(tanh(add(mm(in[0], w2), b2)), in[1])};
      },
      {.name = "layer (inductor)"});
  for (int i = 0; i < 3; ++i) {
    const Tensor out = fused({randn({16, 8}, {}, gen), randn({16, 64}, {}, gen)})[0];
    sum(out).backward();
  }
  const CompileReport fr = fused.report();
  for (const std::string& pass : fr.graphs[0].passes) std::printf("  pass: %s\n", pass.c_str());
  for (const KernelInfo& k : fr.graphs[0].kernels)
    std::printf("  kernel %s: %s\n", k.name.c_str(), k.ops.c_str());
  std::printf(
      "\ntanh's backward operator (tanh_backward) was captured as the primitives of its formula,\n"
      "g * (1 - y*y) (Note [Decompositions]); the min cut then moved 1 - y*y into the forward\n"
      "kernel, which saves it instead of y (the same bytes, nearer the backward), and the "
      "backward\n"
      "kernel multiplies the gradients. The memory plan lets a kernel write over a dead buffer\n"
      "or, in place, over an input that dies there, checked on every call (Note [Memory "
      "planning]).\n");
  return 0;
}

const RegisterCommand kExplain("explain",
                               "the compiler on two small functions: graphs, guards, a "
                               "recompile, a graph break",
                               run_explain);

}  // namespace
}  // namespace loom::cli
