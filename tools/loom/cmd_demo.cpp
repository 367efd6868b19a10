// `loom demo`: a short tour of the eager runtime: tensors and views, the dispatcher's choices, one
// kernel per operator as the profiler hook sees it, Meta tensors (shapes without data), and the
// counter-based generator's saved state. The README's first command runs it until `loom train`
// exists.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "cli.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "loom/parallel.h"

namespace loom::cli {
namespace {

Tensor mlp_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                   const Tensor& b2) {
  Tensor h = relu(linear(x, w1, b1));
  return log_softmax(linear(h, w2, b2), 1);
}

int run_demo(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"batch"});
  if (args.flag("help")) {
    std::printf("usage: loom demo [--batch N]\n  A tour of the eager runtime (see README).\n");
    return 0;
  }
  const int64_t batch = args.get_int("batch", 256, 1, int64_t{1} << 20);
  std::printf("== tensors and views ==\n");
  Tensor a = arange(0, 6, 1, kFloat32).view({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "a.t() shares storage: " << a.t() << " (strides " << IntArrayRef(a.t().strides())
            << ", contiguous=" << a.t().is_contiguous() << ")\n";
  std::cout << "a + 1.5 * ones = " << add(a, ones({3}), 1.5) << "\n";
  std::cout << "int32 + 2.5 promotes: " << add(arange(3, kInt32), 2.5) << "\n\n";

  std::printf("== the dispatcher ==\n");
  OperatorHandle add_op = Dispatcher::singleton().find_or_throw("loom::add");
  std::printf("%s\n", add_op.schema().str().c_str());
  std::printf("  CPU tensors  -> %s kernel [%s]\n",
              dispatch_key_name(add_op.dispatch_key_for(DispatchKeySet(DispatchKey::CPU))),
              add_op.kernel_source(DispatchKey::CPU).c_str());
  std::printf("  Meta tensors -> %s kernel [%s]\n\n",
              dispatch_key_name(add_op.dispatch_key_for(DispatchKeySet(DispatchKey::Meta))),
              add_op.kernel_source(DispatchKey::Meta).c_str());

  std::printf("== eager execution: one kernel per operator (MLP 784-256-10, batch %lld) ==\n",
              static_cast<long long>(batch));
  manual_seed(0);
  Tensor x = randn({batch, 784});
  Tensor w1 = randn({256, 784}).mul_(0.05), b1 = zeros({256});
  Tensor w2 = randn({10, 256}).mul_(0.05), b2 = zeros({10});
  // The profiler hook sees every operator call, nested ones too (linear decomposes into t and
  // addmm): print the call tree of one forward pass.
  struct Call {
    int depth;
    std::string name, shapes;
    int64_t ns = 0;
  };
  std::mutex mu;
  std::vector<Call> calls;
  std::vector<size_t> open;
  uint64_t h = add_record_callbacks(
      RecordFunctionCallbacks{[&](OpEvent& ev) {
                                std::lock_guard<std::mutex> lock(mu);
                                std::string shapes;
                                for (const auto& sh : ev.input_shapes) {
                                  std::ostringstream os;
                                  os << sh.ref();
                                  if (!shapes.empty()) shapes += ' ';
                                  shapes += os.str();
                                }
                                open.push_back(calls.size());
                                calls.push_back(Call{ev.depth, std::string(ev.name), shapes});
                              },
                              [&](OpEvent& ev) {
                                std::lock_guard<std::mutex> lock(mu);
                                calls[open.back()].ns = ev.end_ns - ev.start_ns;
                                open.pop_back();
                              },
                              true});
  mlp_forward(x, w1, b1, w2, b2);  // warm-up (first-touch of BLAS buffers), not recorded
  calls.clear();
  auto t0 = std::chrono::steady_clock::now();
  Tensor logp = mlp_forward(x, w1, b1, w2, b2);
  auto t1 = std::chrono::steady_clock::now();
  remove_record_callbacks(h);
  std::printf("%-28s %10s  %s\n", "operator (nested calls indented)", "time(us)", "input shapes");
  for (const Call& c : calls) {
    std::string n = std::string(static_cast<size_t>(2 * c.depth), ' ') + c.name;
    std::printf("%-28s %10.1f  %s\n", n.c_str(), c.ns / 1e3, c.shapes.c_str());
  }
  std::printf("forward: %.2f ms on %d thread(s); output %s, rows sum to exp(logp): %.4f\n\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(), get_num_threads(),
              logp.shape_str().c_str(), exp(logp).sum({1}).mean().item<double>());

  std::printf("== Meta tensors: the same program, shapes and dtypes only ==\n");
  TensorOptions meta = TensorOptions().with_device(kMeta);
  Tensor mo = mlp_forward(empty({batch, 784}, meta), empty({256, 784}, meta), empty({256}, meta),
                          empty({10, 256}, meta), empty({10}, meta));
  std::cout << mo << "\n\n";

  std::printf("== counter-based random numbers (Philox) ==\n");
  manual_seed(42);
  GeneratorState st = default_generator().state();
  Tensor r1 = rand({4});
  default_generator().set_state(st);
  Tensor r2 = rand({4});
  std::cout << "state (seed=" << st.seed << ", offset=" << st.offset << ") -> " << r1
            << "\nrestored state draws the same: " << (equal(r1, r2) ? "yes" : "NO") << "\n";
  return 0;
}

const RegisterCommand kDemo("demo", "a short tour of the eager runtime", run_demo);

}  // namespace
}  // namespace loom::cli
