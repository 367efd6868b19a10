// `loom fuzz compile`: the compiler's differential tester over many random programs (CI runs 1000;
// this runs as many as asked), printing the failures with the programs that reproduce them.
#include <cstdio>
#include <vector>

#include "cli.h"
#include "loom/compiler/fuzz.h"

namespace loom::cli {
namespace {

int run_fuzz_compile(const std::vector<std::string>& argv) {
  Args args(argv, {"help"}, {"programs", "seed"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom fuzz compile [--programs N] [--seed S]\n"
        "  Runs N random operator programs (default 10000) from seed S (default 1) eagerly and\n"
        "  through loom::compile (three calls each; odd seeds change a size between calls, so\n"
        "  the third replays a graph with symbolic sizes) and compares outputs, mutated inputs\n"
        "  and gradients. Exits 1 when any differs, printing the program.\n");
    return 0;
  }
  const int64_t n = args.get_int("programs", 10000, 1, int64_t{1} << 40);
  const int64_t seed = args.get_int("seed", 1, 0, int64_t{1} << 62);
  const compiler::FuzzReport r = compiler::fuzz_compile(static_cast<uint64_t>(seed), n);
  std::printf("%s", r.str().c_str());
  return r.failures.empty() ? 0 : 1;
}

const RegisterCommand kFuzzCompile("fuzz compile",
                                   "the compiler's differential tester: random programs, eager "
                                   "vs compiled",
                                   run_fuzz_compile);

}  // namespace
}  // namespace loom::cli
