// Atomic training checkpoints: safetensors + JSON sidecar + a `latest` pointer.
#include "loom/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "loom/error.h"

namespace loom::io {
namespace {

namespace fs = std::filesystem;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%09lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors,
                            const Json& sidecar, int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, "[checkpoint] cannot create directory ", dir, ": ", ec.message());
  const std::string name = step_name(step);
  const std::string prefix = dir + "/" + name;
  Json meta = Json::object({{"format", "loom-checkpoint"}, {"version", 1}, {"step", step}});
  save_safetensors(prefix + ".safetensors", tensors, {{"format", "pt"}, {"loom_step", std::to_string(step)}});
  Json side = sidecar;
  side.set("checkpoint", meta);
  atomic_write_file(prefix + ".json", side.dump(1) + "\n");
  atomic_write_file(dir + "/latest", name + "\n");
  // Remove checkpoints older than the newest `keep`.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("step-", 0) == 0 && f.size() > 5 && e.path().extension() == ".json") {
      names.push_back(f.substr(0, f.size() - 5));
    }
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < names.size(); ++i) {
    fs::remove(dir + "/" + names[i] + ".json", ec);
    fs::remove(dir + "/" + names[i] + ".safetensors", ec);
  }
  return prefix;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir) {
  const std::string latest = dir + "/latest";
  struct stat st;
  if (::stat(latest.c_str(), &st) != 0) return std::nullopt;
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos) {
    LOOM_THROW(DataError, "[checkpoint] ", latest, " does not name a checkpoint (content \"", name, "\")");
  }
  Checkpoint c;
  c.path = dir + "/" + name;
  c.sidecar = Json::parse(read_file(c.path + ".json"), c.path + ".json");
  SafetensorsFile f = load_safetensors(c.path + ".safetensors");
  c.tensors = std::move(f.tensors);
  const Json* meta = c.sidecar.find("checkpoint");
  if (meta == nullptr || !meta->is_object() || meta->at("format").as_string() != "loom-checkpoint") {
    LOOM_THROW(DataError, "[checkpoint] ", c.path, ".json is not a loom checkpoint sidecar");
  }
  c.step = meta->at("step").as_int();
  auto it = f.metadata.find("loom_step");
  if (it == f.metadata.end() || it->second != std::to_string(c.step)) {
    LOOM_THROW(DataError, "[checkpoint] ", c.path, ".safetensors belongs to a different step than its "
               "sidecar (", it == f.metadata.end() ? std::string("none") : it->second, " vs ", c.step, ")");
  }
  return c;
}

}  // namespace loom::io
