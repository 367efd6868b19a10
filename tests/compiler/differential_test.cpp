// The differential tester (loom/compiler/fuzz.h) over 1000 random programs with a fixed seed:
// every compiled call (a capture and two replays per program) matches the eager run in outputs,
// mutated inputs and gradients. `loom fuzz compile --programs N --seed S` runs more.
#include <gtest/gtest.h>

#include "loom/compiler/fuzz.h"

namespace loom::compiler {
namespace {

TEST(CompileDifferential, ThousandRandomProgramsMatchEager) {
  const FuzzReport r = fuzz_compile(/*first_seed=*/1, /*count=*/1000);
  EXPECT_EQ(r.programs, 1000);
  EXPECT_TRUE(r.failures.empty()) << r.str();
  // Most programs replay (those that raise eagerly, say an in-place update of a tensor saved for
  // backward, raise compiled too and are counted apart).
  EXPECT_GT(r.replays, 1000) << r.str();
  // Programs with a branch on a host read resume after the break (about one in five).
  EXPECT_GT(r.resumed_breaks, 100) << r.str();
  EXPECT_GT(r.dynamic_replays, 100) << r.str();
  // Programs without in-place steps or breaks whose results require grad have a joint graph; the
  // smaller ones had their min cut checked against every choice of saved tensors.
  EXPECT_GT(r.joint_graphs, 100) << r.str();
  EXPECT_GT(r.min_cuts_checked, 50) << r.str();
  // Graphs with symbolic sizes get joint graphs too (Note [Joint graph], dynamic sizes).
  EXPECT_GT(r.dynamic_joint_graphs, 20) << r.str();
  // Note [Memory planning]: kernels wrote into dead buffers (refusals are counted in r.str()).
  EXPECT_GT(r.buffers_taken, 100) << r.str();
}

TEST(CompileDifferential, ProgramsAreReproducibleFromTheirSeed) {
  EXPECT_EQ(fuzz_program_text(42), fuzz_program_text(42));
  EXPECT_NE(fuzz_program_text(42), fuzz_program_text(43));
  EXPECT_NE(fuzz_program_text(42).find("= input"), std::string::npos) << fuzz_program_text(42);
}

}  // namespace
}  // namespace loom::compiler
