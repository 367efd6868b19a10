// Devices (base layer): where a tensor's memory lives. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "loom/export.h"

namespace loom {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1, Meta = 2 };
constexpr int kNumDeviceTypes = 3;

LOOM_API const char* device_type_name(DeviceType t);

class LOOM_API Device {
 public:
  constexpr Device(DeviceType type = DeviceType::CPU, int8_t index = -1)
      : type_(type), index_(index) {}
  // Parses "cpu", "cuda", "cuda:1", "meta"; throws ValueError naming the string otherwise.
  explicit Device(const std::string& spec);

  constexpr DeviceType type() const { return type_; }
  constexpr int8_t index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;

  constexpr bool operator==(const Device& o) const {
    return type_ == o.type_ && (index_ == o.index_ || (type_ != DeviceType::CUDA));
  }
  constexpr bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_;
  int8_t index_;
};

constexpr Device kCPU{DeviceType::CPU};
constexpr Device kMeta{DeviceType::Meta};
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, static_cast<int8_t>(index)); }

LOOM_API std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace loom
