// Streams, events and guards (base layer): the order in which work runs on a device.
//
// A Stream is a value (device, id): id 0 is the device's default stream, others come from
// new_stream(). Each thread has a current stream per device (default stream until set), and a
// current device per device type; DeviceGuard and StreamGuard set them for a scope and restore them
// on exit, so they nest. An Event marks a point in a stream's work; it owns its backend handle
// (move-only). CPU streams are synchronous: their work has finished when it returns. All functions
// are thread-safe; current devices and streams are per thread (as PyTorch's c10).
//
// Note [Why streams live in base]
//   The caching allocator (memory layer, below core) keeps its free blocks per stream and waits for
//   events before reusing a block another stream used, so Stream and Event must sit below memory.
//   They only name devices and call the per-type DeviceInterface (loom/device_interface.h), which
//   needs nothing from higher layers either; so Device, Stream, Event and DeviceInterface are base.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "loom/device.h"
#include "loom/export.h"

namespace loom {

using StreamId = int64_t;  // 0: the device's default stream

class LOOM_API Stream {
 public:
  constexpr Stream() = default;  // the CPU's default stream
  constexpr explicit Stream(Device device, StreamId id = 0) : device_(device), id_(id) {}

  constexpr Device device() const { return device_; }
  constexpr DeviceType device_type() const { return device_.type(); }
  constexpr DeviceIndex device_index() const { return device_.index(); }
  constexpr StreamId id() const { return id_; }
  constexpr bool is_default() const { return id_ == 0; }
  // True when all work queued on the stream so far has finished.
  bool query() const;
  // Waits until all work queued on the stream so far has finished.
  void synchronize() const;
  std::string str() const;  // "cuda:0 stream 3"

  constexpr bool operator==(const Stream& o) const { return device_ == o.device_ && id_ == o.id_; }
  constexpr bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  Device device_;
  StreamId id_ = 0;
};

LOOM_API std::ostream& operator<<(std::ostream& os, const Stream& s);

inline Stream default_stream(Device device) {
  return Stream(device, 0);
}
// The calling thread's current stream on `device` (its default stream until set).
LOOM_API Stream current_stream(Device device);
// Makes `stream` the calling thread's current stream on its device. ValueError for a stream its
// device's interface does not know.
LOOM_API void set_current_stream(const Stream& stream);
// A new stream on `device` from its DeviceInterface.
LOOM_API Stream new_stream(Device device);

// A point in a stream's work. Not recorded: query() is true and waiting on it does nothing.
class LOOM_API Event {
 public:
  explicit Event(DeviceType type = DeviceType::CPU) : type_(type), device_(type) {}
  // An event that records a timestamp, for elapsed_ms (device types whose interface supports it).
  static Event timed(DeviceType type) {
    Event e(type);
    e.timing_ = true;
    return e;
  }
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  // Marks the end of the work queued on `stream` so far (a stream of this event's device type;
  // ValueError otherwise). Recording again moves the mark.
  void record(const Stream& stream);
  // Makes work queued on `stream` from now on wait until this event has passed.
  void block(const Stream& stream) const;
  // True when the event has passed (or was never recorded).
  bool query() const;
  // Waits until the event has passed.
  void synchronize() const;
  bool was_recorded() const { return recorded_; }
  // Milliseconds from this event to `end` (both timed, recorded and passed; ValueError otherwise).
  double elapsed_ms(const Event& end) const;
  DeviceType device_type() const { return type_; }
  Device device() const { return device_; }  // of the last record

 private:
  DeviceType type_;
  Device device_;
  void* handle_ = nullptr;  // the DeviceInterface's event (null for types that need none)
  bool recorded_ = false;
  bool timing_ = false;
};

// Sets the calling thread's current device of device.type() for a scope; restores the previous one.
class LOOM_API DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Device original_device() const { return original_; }
  Device current_device() const { return current_; }

 private:
  Device original_;
  Device current_;
};

// Sets the current device to stream.device() and that device's current stream to `stream` for a
// scope; restores both.
class LOOM_API StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  Stream original_stream() const { return original_; }
  Stream current_stream() const { return current_; }

 private:
  DeviceGuard device_;
  Stream original_;
  Stream current_;
};

}  // namespace loom
