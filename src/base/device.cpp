#include "loom/device.h"

#include <cstdlib>
#include <ostream>

#include "loom/error.h"

namespace loom {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Meta: return "meta";
  }
  return "?";
}

Device::Device(const std::string& spec) : type_(DeviceType::CPU), index_(-1) {
  std::string kind = spec;
  std::string idx;
  if (auto colon = spec.find(':'); colon != std::string::npos) {
    kind = spec.substr(0, colon);
    idx = spec.substr(colon + 1);
  }
  if (kind == "cpu") {
    type_ = DeviceType::CPU;
  } else if (kind == "cuda") {
    type_ = DeviceType::CUDA;
    index_ = 0;
  } else if (kind == "meta") {
    type_ = DeviceType::Meta;
  } else {
    LOOM_THROW(ValueError, "[device] unknown device '", spec, "' (expected cpu, cuda[:N] or meta)");
  }
  if (!idx.empty()) {
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    LOOM_CHECK(end && *end == '\0' && v >= 0 && v < 128, "[device] bad device index in '", spec, "'");
    LOOM_CHECK(type_ == DeviceType::CUDA, "[device] only cuda devices take an index: '", spec, "'");
    index_ = static_cast<int8_t>(v);
  }
}

std::string Device::str() const {
  std::string s = device_type_name(type_);
  if (type_ == DeviceType::CUDA) {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict on ":" + std::to_string(...).
    s += ':';
    s += std::to_string(index_ < 0 ? 0 : index_);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace loom
