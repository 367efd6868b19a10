// Devices (base layer): where a tensor's memory lives. Plain values; thread-safe.
//
// Note [Canonical devices]
//   A Device always names one concrete device: CPU and Meta have the single index 0, and a CUDA
//   device built without an index ("cuda", Device(DeviceType::CUDA)) takes the calling thread's
//   current CUDA device at construction (0 when no device or no CUDA backend exists). So equality
//   is plain (type, index) equality: "cuda" never compares unequal to the device it means, and
//   tables indexed by (type, index) (allocators, current streams) need no special case for -1.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "loom/export.h"

namespace loom {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1, Meta = 2 };
constexpr int kNumDeviceTypes = 3;
using DeviceIndex = int8_t;
// Device indices are 0 .. kMaxDeviceIndex - 1 (tables per device are this long).
constexpr int kMaxDeviceIndex = 64;

LOOM_API const char* device_type_name(DeviceType t);

namespace detail {
// The calling thread's current device of `type` (its DeviceInterface's current_device()).
LOOM_API DeviceIndex current_device_index(DeviceType type);
[[noreturn]] LOOM_API void throw_bad_device_index(DeviceType type, int index);
}  // namespace detail

class LOOM_API Device {
 public:
  // The CPU. Kept apart from the constructor below so that default-constructed members (a
  // DataPtr's, moved on every allocation) stay two stores with nothing for the inliner to weigh.
  constexpr Device() : type_(DeviceType::CPU), index_(0) {}
  // index -1 means "the current device of this type" (Note [Canonical devices]).
  constexpr Device(DeviceType type, int index = -1)
      : type_(type), index_(canonical_index(type, index)) {}
  // Parses "cpu", "cuda", "cuda:1", "meta"; throws ValueError naming the string otherwise.
  explicit Device(const std::string& spec);

  constexpr DeviceType type() const { return type_; }
  constexpr DeviceIndex index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;

  constexpr bool operator==(const Device& o) const {
    return type_ == o.type_ && index_ == o.index_;
  }
  constexpr bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  static constexpr DeviceIndex canonical_index(DeviceType type, int index) {
    if (index < -1 || index >= kMaxDeviceIndex) detail::throw_bad_device_index(type, index);
    if (type != DeviceType::CUDA) {
      if (index > 0) detail::throw_bad_device_index(type, index);
      return 0;
    }
    return index < 0 ? detail::current_device_index(type) : static_cast<DeviceIndex>(index);
  }

  DeviceType type_;
  DeviceIndex index_;
};

constexpr Device kCPU{DeviceType::CPU};
constexpr Device kMeta{DeviceType::Meta};
inline Device cuda_device(int index = 0) {
  return Device(DeviceType::CUDA, index);
}

LOOM_API std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace loom
