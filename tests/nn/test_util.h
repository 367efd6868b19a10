// Helpers shared by the nn and optim tests.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "loom/ops.h"
#include "test_errors.h"

namespace loom::testing {

inline std::vector<double> values(const Tensor& t) {
  return to_vector<double>(t);
}

inline Tensor f64(std::vector<double> v, std::vector<int64_t> shape) {
  return from_vector<double>(v, shape);
}

// Runs `script` with /usr/bin/python3; returns "key -> numbers" from lines "key v1 v2 ...", or an
// empty map when python or torch is unavailable.
inline std::map<std::string, std::vector<double>> run_python(const std::string& script) {
  std::map<std::string, std::vector<double>> out;
  if (!std::filesystem::exists("/usr/bin/python3")) return out;
  const auto path = std::filesystem::temp_directory_path() /
                    ("loom_torch_compare_" + std::to_string(::getpid()) + ".py");
  std::ofstream(path) << script;
  FILE* pipe = ::popen(("/usr/bin/python3 " + path.string() + " 2>/dev/null").c_str(), "r");
  std::string text;
  if (pipe) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
    ::pclose(pipe);
  }
  std::filesystem::remove(path);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key.empty() || key == "NO_TORCH") continue;
    std::string tok;
    while (ls >> tok) out[key].push_back(std::stod(tok));
  }
  return out;
}

inline std::string py_list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[64];
  for (double x : v) {
    std::snprintf(buf, sizeof(buf), "%.17g, ", x);
    s += buf;
  }
  return s + "]";
}

}  // namespace loom::testing
