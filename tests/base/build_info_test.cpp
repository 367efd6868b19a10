// What `loom info` reports about the build agrees with what the build is.
#include <gtest/gtest.h>

#include <set>

#include "loom/build_info.h"
#include "loom/cuda.h"

namespace loom {
namespace {

TEST(BuildInfo, PartsAgreeWithTheBuild) {
  const std::vector<BuildPart> parts = build_parts();
  std::set<std::string> names;
  for (const BuildPart& p : parts) {
    names.insert(p.name);
    EXPECT_FALSE(p.detail.empty()) << p.name << ": a part says what it is or how to enable it";
    if (p.name == "cuda") EXPECT_EQ(p.built, cuda::is_built());
    // A toolkit library can be part of the build only with the CUDA backend.
    if (p.name != "cuda" && p.name != "io_uring" && !cuda::is_built())
      EXPECT_FALSE(p.built) << p.name;
  }
  for (const char* n : {"cuda", "cublasLt", "cudnn", "cupti", "nvrtc", "nccl", "io_uring"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  for (const BuildPart& p : parts) {
    if (p.name == "cuda" && p.built) EXPECT_NE(p.detail.find("90"), std::string::npos) << p.detail;
  }
}

TEST(BuildInfo, TheCudaSelfCheckNamesWhyItCannotRun) {
  if (cuda::is_available())
    GTEST_SKIP() << "a GPU is present; the self-check runs (loom info --cuda-check)";
  const std::string why = cuda::self_check();
  EXPECT_NE(why.find("[cuda]"), std::string::npos) << why;
}

}  // namespace
}  // namespace loom
