// The libtorch side of `loom bench`: runs the same figures as loom's suites and prints
// "name value" lines. Built only when libtorch is found (Debian's libtorch-dev); run by loom.
// libtorch's intra-op threads and OpenBLAS's are set together for each thread count, as loom does.
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
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

// The core suite: the same names, sizes and formulas as bench/core_suite.cpp.
double core(const std::string& name, bool quick) {
  static const int64_t big = 16 * 1024 * 1024;
  static auto a8 = torch::rand({8}), b8 = torch::rand({8});
  static auto x = torch::rand({big}), y = torch::rand({big}), out = torch::empty({big});
  static auto m1 = torch::rand({1024, 1024}), m2 = torch::rand({1024, 1024});
  const int reps = quick ? 2 : 5;
  auto base = name.substr(0, name.rfind("_t") == std::string::npos ? name.size() : name.rfind("_t"));
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
  if (base == "add_16M") return 3.0 * 4 * big / median_seconds([&] { torch::add_out(out, x, y); }, reps) / 1e9;
  if (base == "exp_16M") return 2.0 * 4 * big / median_seconds([&] { torch::exp_out(out, x); }, reps) / 1e9;
  if (base == "sum_16M") return 4.0 * big / median_seconds([&] { torch::sum(x); }, reps) / 1e9;
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
  if (suite != "core") {
    std::fprintf(stderr, "anchor: unknown suite %s\n", suite.c_str());
    return 2;
  }
  std::fprintf(stderr, "anchor: libtorch %s, BLAS %s\n", TORCH_VERSION, blas_library().c_str());
  // InferenceMode is libtorch's fastest eager setting (no autograd or version-counter work).
  c10::InferenceMode inference;
  char line[512];
  while (std::fgets(line, sizeof(line), stdin)) {
    std::istringstream is(line);
    std::string name;
    int threads = 1, quick = 0;
    if (!(is >> name >> threads >> quick)) continue;
    torch::set_num_threads(threads);
    set_blas_threads(threads);
    double v = core(name, quick != 0);
    std::printf("%s %.6g\n", name.c_str(), v);
    std::fflush(stdout);
  }
  return 0;
}
