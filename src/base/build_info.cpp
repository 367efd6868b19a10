#include "loom/build_info.h"

#include <sstream>

// Set by CMakeLists.txt on this file only, so that a change of build parts recompiles one file.
#ifndef LOOM_BUILD_CUDA
#define LOOM_BUILD_CUDA 0
#define LOOM_BUILD_CUDA_PARTS ""
#define LOOM_BUILD_CUDA_ARCHS ""
#define LOOM_BUILD_URING 0
#endif

namespace loom {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

std::vector<BuildPart> build_parts() {
  std::vector<BuildPart> parts;
  const std::string archs = LOOM_BUILD_CUDA_ARCHS;
  parts.push_back({"cuda", LOOM_BUILD_CUDA != 0,
                   LOOM_BUILD_CUDA
                       ? "architectures " + archs
                       : "install the CUDA toolkit, then reconfigure with -DLOOM_CUDA=ON"});
  const std::vector<std::string> found = split_commas(LOOM_BUILD_CUDA_PARTS);
  for (const char* lib : {"cublasLt", "cudnn", "cupti", "nvrtc", "nccl"}) {
    bool built = false;
    for (const std::string& f : found) built = built || f == lib;
    parts.push_back({lib, built,
                     built             ? "found"
                     : LOOM_BUILD_CUDA ? "not found in the CUDA toolkit; install it and reconfigure"
                                       : "needs the CUDA backend"});
  }
  parts.push_back(
      {"io_uring", LOOM_BUILD_URING != 0,
       LOOM_BUILD_URING ? "found" : "install liburing-dev, then reconfigure with -DLOOM_URING=ON"});
  return parts;
}

}  // namespace loom
