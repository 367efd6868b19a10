// The libtorch side of `loom bench`: runs the same figures as loom's suites and prints
// "name value" lines. Built only when libtorch is found (Debian's libtorch-dev); run by loom.
// libtorch's intra-op threads and OpenBLAS's are set together for each thread count, as loom does.
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

void set_blas_threads(int n) {
  // Resolved at run time from the OpenBLAS that libtorch loaded through libblas.so.3.
  using Fn = void (*)(int);
  if (auto f = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

std::string blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("blas") != std::string::npos) return line.substr(line.find('/'));
  }
  return "unknown";
}

double median_seconds(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    fn();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

// The core suite: the same names, sizes and formulas as bench/core_suite.cpp.
double core(const std::string& name, bool quick) {
  static const int64_t big = 16 * 1024 * 1024;
  static auto a8 = torch::rand({8}), b8 = torch::rand({8});
  static auto x = torch::rand({big}), y = torch::rand({big}), out = torch::empty({big});
  static auto m1 = torch::rand({1024, 1024}), m2 = torch::rand({1024, 1024});
  static auto act = torch::rand({128, 784}), w = torch::rand({512, 784}),
              g = torch::rand({128, 512});
  const int reps = quick ? 2 : 5;
  auto base =
      name.substr(0, name.rfind("_t") == std::string::npos ? name.size() : name.rfind("_t"));
  if (name == "eager_add_8") {
    const int iters = quick ? 20000 : 100000;
    double t = median_seconds(
        [&] {
          for (int i = 0; i < iters; ++i) auto c = at::add(a8, b8);
        },
        reps);
    return t / iters * 1e9;
  }
  if (base == "matmul_1024") {
    return 2.0 * 1024 * 1024 * 1024 / median_seconds([&] { torch::mm(m1, m2); }, reps) / 1e9;
  }
  if (base == "mm_mlp_fwd") {
    return 2.0 * 128 * 784 * 512 / median_seconds([&] { torch::mm(act, w.t()); }, reps) / 1e9;
  }
  if (base == "mm_mlp_wgrad") {
    return 2.0 * 128 * 784 * 512 / median_seconds([&] { torch::mm(g.t(), act); }, reps) / 1e9;
  }
  if (base == "add_16M")
    return 3.0 * 4 * big / median_seconds([&] { torch::add_out(out, x, y); }, reps) / 1e9;
  if (base == "exp_16M")
    return 2.0 * 4 * big / median_seconds([&] { torch::exp_out(out, x); }, reps) / 1e9;
  if (base == "sum_16M") return 4.0 * big / median_seconds([&] { torch::sum(x); }, reps) / 1e9;
  return NAN;
}

// ---- the train suite ----
// Note [train suite model]
// What `loom bench train` measures; the loom side must build exactly this.
//  * Model: Linear(784, 512) -> ReLU -> Linear(512, 256) -> ReLU -> Linear(256, 10), float32, with
//    biases, libtorch's default init (kaiming-uniform weights, uniform(+-1/sqrt(fan_in)) biases;
//    the values do not affect the time).
//  * Data: one fixed batch, x = rand([128, 784]) (uniform [0, 1)), y = randint(0, 10, [128]) int64,
//    reused by every step. No data loading or shuffling is timed.
//  * Loss: cross_entropy(logits, y), mean over the batch (log_softmax + nll_loss in libtorch).
//  * Optimizer: SGD lr 0.01, momentum 0.9, dampening 0, weight decay 0, not Nesterov; the momentum
//    buffer is created (as a copy of the gradient) on the first step.
//  * One step = optimizer.zero_grad() (grads zeroed in place, not set to none: libtorch 1.13's
//    Optimizer::zero_grad) ; loss = cross_entropy(model(x), y) ; loss.backward() ;
//    optimizer.step().
//  * Timing: model and optimizer live for the whole process and keep training across queries. Each
//    query runs 3 warm-up steps, then 5 repetitions of K = 10 steps (--quick: 2 of 3); the figure
//    is the median over repetitions of (time of K steps) / K, in ms. Autograd is on (no
//    InferenceMode, no NoGradGuard); nothing reads the loss inside the timed loop (no item() per
//    step).
//  * mlp_step_tN: N threads; libtorch runs its best configuration, 1 intra-op thread + N OpenBLAS
//    threads (loom: its one pool of N). mlp_step_none_tN: the same with gradients set to
//    none instead of zeroed before each step (PyTorch >= 2.0's default zero_grad). autograd_add_8:
//    1 thread, ns per `a + b` where a, b are 8-element float32 tensors with requires_grad=true; the
//    result (which records an AddBackward node) is dropped each iteration, as in eager_add_8 of the
//    core suite (100000 iterations, median of 5 repetitions after one warm-up; --quick: 20000 and
//    2).
struct Mlp : torch::nn::Module {
  Mlp()
      : fc1(register_module("fc1", torch::nn::Linear(784, 512))),
        fc2(register_module("fc2", torch::nn::Linear(512, 256))),
        fc3(register_module("fc3", torch::nn::Linear(256, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1, fc2, fc3;
};

struct TrainState {
  std::shared_ptr<Mlp> model = std::make_shared<Mlp>();
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)};
  torch::Tensor x = torch::rand({128, 784});
  torch::Tensor y = torch::randint(0, 10, {128}, torch::kInt64);
  torch::Tensor last_loss;  // detached; read only after timing, so no item() per step
  // set_to_none: gradients are dropped instead of zeroed (PyTorch >= 2.0's default zero_grad; in
  // libtorch 1.13 done by resetting each parameter's grad), so backward writes them fresh.
  void step(bool set_to_none = false) {
    if (set_to_none) {
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    } else {
      opt.zero_grad();
    }
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    last_loss = loss.detach();
  }
};

double train(const std::string& name, bool quick) {
  static TrainState st;
  static auto a8 = torch::rand({8}, torch::requires_grad()),
              b8 = torch::rand({8}, torch::requires_grad());
  const int reps = quick ? 2 : 5;
  auto base =
      name.substr(0, name.rfind("_t") == std::string::npos ? name.size() : name.rfind("_t"));
  if (name == "autograd_add_8") {
    if (!at::GradMode::is_enabled() || !(a8 + b8).requires_grad()) return NAN;  // not recording
    const int iters = quick ? 20000 : 100000;
    double t = median_seconds(
        [&] {
          for (int i = 0; i < iters; ++i) auto c = a8 + b8;
        },
        reps);
    return t / iters * 1e9;
  }
  if (base == "mlp_step" || base == "mlp_step_none") {
    const bool none = base == "mlp_step_none";
    // libtorch's best configuration for this step on 2 cores: one intra-op thread, and OpenBLAS
    // (already set to the requested count) threads the matrix products.
    torch::set_num_threads(1);
    const int steps = quick ? 3 : 10;
    for (int i = 0; i < 3; ++i) st.step(none);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto a = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) st.step(none);
      auto b = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double>(b - a).count() / steps);
    }
    if (!std::isfinite(st.last_loss.item<float>())) return NAN;  // a diverged model is no benchmark
    std::sort(t.begin(), t.end());
    double med = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
    return med * 1e3;
  }
  return NAN;
}

}  // namespace

// Protocol: `loom-anchor-torch serve SUITE` reads "NAME THREADS QUICK" lines on stdin and answers
// "NAME VALUE" on stdout, one measurement at a time, so that loom can alternate with it.
int main(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "serve") != 0) {
    std::fprintf(stderr, "usage: loom-anchor-torch serve SUITE   (driven by `loom bench SUITE`)\n");
    return 2;
  }
  std::string suite = argv[2];
  double (*measure)(const std::string&, bool) = nullptr;
  if (suite == "core") measure = core;
  if (suite == "train") measure = train;
  if (measure == nullptr) {
    std::fprintf(stderr, "anchor: unknown suite %s\n", suite.c_str());
    return 2;
  }
  std::fprintf(stderr, "anchor: libtorch %s, BLAS %s\n", TORCH_VERSION, blas_library().c_str());
  // InferenceMode is libtorch's fastest eager setting (no autograd or version-counter work); the
  // train suite measures autograd itself, so it runs in libtorch's default (grad) mode.
  std::optional<c10::InferenceMode> inference;
  if (suite == "core") inference.emplace();
  char line[512];
  while (std::fgets(line, sizeof(line), stdin)) {
    std::istringstream is(line);
    std::string name;
    int threads = 1, quick = 0;
    if (!(is >> name >> threads >> quick)) continue;
    torch::set_num_threads(threads);
    set_blas_threads(threads);
    double v = measure(name, quick != 0);
    std::printf("%s %.6g\n", name.c_str(), v);
    std::fflush(stdout);
  }
  return 0;
}
