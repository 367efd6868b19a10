// Atomic training checkpoints: safetensors + JSON sidecar + a `latest` pointer, with checksums
// (Note [Checkpoint checksums] in checkpoint.h).
#include "loom/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "loom/crc32c.h"
#include "loom/error.h"

namespace loom::io {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVersion = 2;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%09lld", static_cast<long long>(step));
  return buf;
}

uint32_t tensor_crc(const Tensor& t) {
  const Tensor c = t.contiguous();
  return crc32c(c.data_ptr(), c.nbytes());
}

Json shape_json(const Tensor& t) {
  Json s = Json::array();
  for (int64_t d : t.sizes()) s.push_back(d);
  return s;
}

void verify_tensors(const Checkpoint& c, const Json& listed) {
  const std::string file = c.path + ".safetensors";
  LOOM_CHECK_AS(DataError, listed.is_array(), "[checkpoint] ", c.path,
                ".json: \"checkpoint\".\"tensors\" must be a list");
  LOOM_CHECK_AS(DataError, listed.size() == c.tensors.size(), "[checkpoint] ", file, " holds ",
                c.tensors.size(), " tensors but its sidecar lists ", listed.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const auto& [name, t] = c.tensors[i];
    const Json& e = listed.at(i);
    LOOM_CHECK_AS(DataError, e.at("name").as_string() == name, "[checkpoint] ", file, ": tensor ",
                  i, " is '", name, "' but the sidecar lists '", e.at("name").as_string(), "'");
    LOOM_CHECK_AS(
        DataError,
        e.at("dtype").as_string() == dtype_name(t.dtype()) && e.at("shape") == shape_json(t),
        "[checkpoint] ", file, ": tensor '", name, "' is ", dtype_name(t.dtype()), " ",
        t.shape_str(), " but the sidecar says ", e.at("dtype").as_string(), " ",
        e.at("shape").dump());
    uint32_t want = 0;
    LOOM_CHECK_AS(DataError, parse_crc32c_hex(e.at("crc32c").as_string(), &want), "[checkpoint] ",
                  c.path, ".json: the CRC32C of tensor '", name,
                  "' is not 8 hex digits: ", e.at("crc32c").dump());
    const uint32_t got = tensor_crc(t);
    LOOM_CHECK_AS(DataError, got == want, "[checkpoint] ", file, ": the bytes of tensor '", name,
                  "' fail their CRC32C (computed ", crc32c_hex(got), ", the sidecar says ",
                  crc32c_hex(want), "): the file is corrupt");
  }
}

}  // namespace

uint32_t sidecar_checksum(const Json& sidecar) {
  Json copy = sidecar;
  if (Json* meta = copy.find("checkpoint"); meta && meta->is_object()) {
    auto& members = meta->as_object();
    members.erase(std::remove_if(members.begin(), members.end(),
                                 [](const Json::Member& m) { return m.first == "sidecar_crc32c"; }),
                  members.end());
  }
  const std::string text = copy.dump();
  return crc32c(text.data(), text.size());
}

std::string save_checkpoint(const std::string& dir, int64_t step, const TensorMap& tensors,
                            const Json& sidecar, int keep) {
  LOOM_CHECK(sidecar.is_object() && !sidecar.contains("checkpoint"),
             "[checkpoint] the sidecar must be a JSON object without a \"checkpoint\" member");
  LOOM_CHECK(step >= 0, "[checkpoint] step must be non-negative but is ", step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, "[checkpoint] cannot create directory ", dir, ": ", ec.message());
  remove_orphan_temp_files(dir);
  const std::string name = step_name(step);
  const std::string prefix = dir + "/" + name;
  Json listed = Json::array();
  for (const auto& [tname, t] : tensors) {
    LOOM_CHECK(t.defined() && t.is_cpu(), "[checkpoint] tensor '", tname,
               "' must be a defined CPU tensor");
    listed.push_back(Json::object({{"name", tname},
                                   {"dtype", dtype_name(t.dtype())},
                                   {"shape", shape_json(t)},
                                   {"crc32c", crc32c_hex(tensor_crc(t))}}));
  }
  save_safetensors(prefix + ".safetensors", tensors,
                   {{"format", "pt"}, {"loom_step", std::to_string(step)}});
  Json side = sidecar;
  side.set("checkpoint", Json::object({{"format", "loom-checkpoint"},
                                       {"version", kVersion},
                                       {"step", step},
                                       {"tensors", std::move(listed)}}));
  side.at("checkpoint").set("sidecar_crc32c", crc32c_hex(sidecar_checksum(side)));
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
    if (names[i] == name) continue;
    fs::remove(dir + "/" + names[i] + ".json", ec);
    fs::remove(dir + "/" + names[i] + ".safetensors", ec);
  }
  return prefix;
}

Checkpoint load_checkpoint(const std::string& prefix) {
  Checkpoint c;
  c.path = prefix;
  const std::string side_path = prefix + ".json";
  c.sidecar = Json::parse(read_file(side_path), side_path);
  const Json* meta = c.sidecar.find("checkpoint");
  if (meta == nullptr || !meta->is_object() || !meta->contains("format") ||
      !meta->at("format").is_string() || meta->at("format").as_string() != "loom-checkpoint") {
    LOOM_THROW(DataError, "[checkpoint] ", side_path, " is not a loom checkpoint sidecar");
  }
  const int64_t version =
      meta->contains("version") && meta->at("version").is_int() ? meta->at("version").as_int() : -1;
  LOOM_CHECK_AS(DataError, version == 1 || version == kVersion, "[checkpoint] ", side_path,
                ": unsupported checkpoint version ",
                meta->contains("version") ? meta->at("version").dump() : "(none)",
                " (this loom reads versions 1 and ", kVersion, ")");
  if (version >= 2) {
    uint32_t want = 0;
    const Json* stored = meta->find("sidecar_crc32c");
    LOOM_CHECK_AS(DataError,
                  stored && stored->is_string() && parse_crc32c_hex(stored->as_string(), &want),
                  "[checkpoint] ", side_path,
                  ": \"checkpoint\".\"sidecar_crc32c\" is missing or not 8 hex digits");
    const uint32_t got = sidecar_checksum(c.sidecar);
    LOOM_CHECK_AS(DataError, got == want, "[checkpoint] ", side_path,
                  " fails its CRC32C (computed ", crc32c_hex(got), ", stored ", crc32c_hex(want),
                  "): the sidecar was altered or is corrupt");
  }
  c.step = meta->at("step").as_int();
  SafetensorsFile f = load_safetensors(prefix + ".safetensors");
  c.tensors = std::move(f.tensors);
  auto it = f.metadata.find("loom_step");
  if (it == f.metadata.end() || it->second != std::to_string(c.step)) {
    LOOM_THROW(DataError, "[checkpoint] ", prefix,
               ".safetensors belongs to a different step than its "
               "sidecar (",
               it == f.metadata.end() ? std::string("none") : it->second, " vs ", c.step, ")");
  }
  if (version >= 2) {
    verify_tensors(c, meta->at("tensors"));
    c.verified = true;
  }
  return c;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir) {
  const std::string latest = dir + "/latest";
  struct stat st;
  if (::stat(latest.c_str(), &st) != 0) return std::nullopt;
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos) {
    LOOM_THROW(DataError, "[checkpoint] ", latest, " does not name a checkpoint (content \"", name,
               "\")");
  }
  return load_checkpoint(dir + "/" + name);
}

}  // namespace loom::io
