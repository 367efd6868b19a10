// The libtorch side of `loom bench`: runs the same figures as loom's suites and prints
// "name value" lines. Built only when libtorch is found (Debian's libtorch-dev); run by loom.
// libtorch's intra-op threads and OpenBLAS's are set together for each thread count, as loom does.
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
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

void core(const std::vector<int>& threads, bool quick) {
  const int reps = quick ? 2 : 7;
  const int64_t big = 16 * 1024 * 1024;
  // InferenceMode is libtorch's fastest eager setting (no autograd or version-counter work).
  c10::InferenceMode inference;
  torch::set_num_threads(1);
  set_blas_threads(1);
  {
    auto a = torch::rand({8}), b = torch::rand({8});
    const int iters = quick ? 20000 : 200000;
    double t = median_seconds(
        [&] {
          for (int i = 0; i < iters; ++i) {
            auto c = at::add(a, b);
          }
        },
        reps);
    std::printf("eager_add_8 %.6g\n", t / iters * 1e9);
  }
  auto x = torch::rand({big}), y = torch::rand({big}), out = torch::empty({big});
  auto m1 = torch::rand({1024, 1024}), m2 = torch::rand({1024, 1024});
  for (int th : threads) {
    torch::set_num_threads(th);
    set_blas_threads(th);
    std::string sfx = "_t" + std::to_string(th);
    double t = median_seconds([&] { torch::mm(m1, m2); }, quick ? 2 : 5);
    std::printf("matmul_1024%s %.6g\n", sfx.c_str(), 2.0 * 1024 * 1024 * 1024 / t / 1e9);
    t = median_seconds([&] { torch::add_out(out, x, y); }, reps);
    std::printf("add_16M%s %.6g\n", sfx.c_str(), 3.0 * 4 * big / t / 1e9);
    t = median_seconds([&] { torch::exp_out(out, x); }, reps);
    std::printf("exp_16M%s %.6g\n", sfx.c_str(), 2.0 * 4 * big / t / 1e9);
    t = median_seconds([&] { torch::sum(x); }, reps);
    std::printf("sum_16M%s %.6g\n", sfx.c_str(), 4.0 * big / t / 1e9);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loom-anchor-torch SUITE [--threads 1,2] [--quick] [--info]\n");
    return 2;
  }
  std::string suite = argv[1];
  std::vector<int> threads = {1, 2};
  bool quick = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads.clear();
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) threads.push_back(std::stoi(item));
    }
  }
  std::fprintf(stderr, "anchor: libtorch %s, BLAS %s\n", TORCH_VERSION, blas_library().c_str());
  if (suite == "core") {
    core(threads, quick);
  } else {
    std::fprintf(stderr, "anchor: unknown suite %s\n", suite.c_str());
    return 2;
  }
  return 0;
}
