#include "loom/device.h"

#include <cstdlib>
#include <ostream>

#include "loom/error.h"

namespace loom {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda";
    case DeviceType::Meta:
      return "meta";
  }
  return "?";
}

namespace detail {
void throw_bad_device_index(DeviceType type, int index) {
  if (type != DeviceType::CUDA) {
    LOOM_THROW(ValueError, "[device] a ", device_type_name(type),
               " device has only index 0 (or -1 for ", "the current one) but got ", index);
  }
  LOOM_THROW(ValueError, "[device] a cuda device index must be -1 (the current device) or 0 .. ",
             kMaxDeviceIndex - 1, " but got ", index);
}
}  // namespace detail

Device::Device(const std::string& spec) : type_(DeviceType::CPU), index_(0) {
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
    if (idx.empty()) index_ = detail::current_device_index(DeviceType::CUDA);
  } else if (kind == "meta") {
    type_ = DeviceType::Meta;
  } else {
    LOOM_THROW(ValueError, "[device] unknown device '", spec, "' (expected cpu, cuda[:N] or meta)");
  }
  if (!idx.empty()) {
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    LOOM_CHECK(end && *end == '\0' && v >= 0 && v < kMaxDeviceIndex,
               "[device] bad device index in '", spec, "'");
    LOOM_CHECK(type_ == DeviceType::CUDA, "[device] only cuda devices take an index: '", spec, "'");
    index_ = static_cast<int8_t>(v);
  }
}

std::string Device::str() const {
  std::string s = device_type_name(type_);
  if (type_ == DeviceType::CUDA) {
    // Appended piece by piece: GCC 12 reports a false -Wrestrict on ":" + std::to_string(...).
    s += ':';
    s += std::to_string(index_);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}

}  // namespace loom
