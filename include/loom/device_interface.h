// Device interfaces (base layer): what loom needs from one device type — current device, streams,
// events, copies between devices, memory information — behind one small abstract class, like
// PyTorch's DeviceGuardImplInterface. One interface is registered per device type: CPU and Meta are
// built in; CUDA's slot holds an interface that throws NotImplementedError saying that no CUDA
// device is available until the CUDA backend registers its own (src/cuda). Interfaces must be
// thread-safe; device_interface() never fails. See Note [Why streams live in base] in stream.h.
#pragma once

#include <cstddef>

#include "loom/device.h"
#include "loom/export.h"
#include "loom/stream.h"

namespace loom {

struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

class LOOM_API DeviceInterface {
 public:
  virtual ~DeviceInterface() = default;
  virtual DeviceType type() const = 0;
  virtual int device_count() const = 0;

  // The calling thread's current device (never throws; 0 where there is no device).
  virtual DeviceIndex current_device() const = 0;
  // ValueError naming the index when there is no such device.
  virtual void set_device(DeviceIndex index) = 0;

  // A new stream on device `index`.
  virtual Stream new_stream(DeviceIndex index) = 0;
  // ValueError when `stream` is not one of this interface's streams.
  virtual void check_stream(const Stream& stream) const = 0;
  virtual bool query_stream(const Stream& stream) = 0;
  virtual void synchronize_stream(const Stream& stream) = 0;
  // Waits for all work on device `index`.
  virtual void synchronize_device(DeviceIndex index) = 0;

  // Events: *event is the interface's handle, created by the first record (null before).
  virtual void record_event(void** event, const Stream& stream) = 0;
  // Work queued on `stream` from now on waits for `event` (a recorded handle).
  virtual void block_stream(void* event, const Stream& stream) = 0;
  virtual bool query_event(void* event) = 0;
  virtual void synchronize_event(void* event) = 0;
  virtual void destroy_event(void* event) noexcept = 0;
  // Optional, for Event::timed: makes *event a handle that records timestamps (record_event then
  // reuses it), and the milliseconds between two recorded ones once both passed. Types without
  // timing keep these defaults, which throw NotImplementedError naming the type.
  virtual void create_timing_event(void** event, DeviceIndex index);
  virtual double elapsed_ms(void* start, void* end);

  // Copies n bytes from src (on src_device) to dst (on dst_device), one of which is of this type,
  // ordered on `stream` (of this type). Returns when done unless non_blocking.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
                    const Stream& stream, bool non_blocking) = 0;
  virtual DeviceMemoryInfo memory_info(DeviceIndex index) = 0;
};

// The interface of a device type (never null).
LOOM_API DeviceInterface& device_interface(DeviceType type);
// Registers the interface of a device type (the caller keeps ownership, which must outlive all
// use); nullptr restores the built-in one.
LOOM_API void register_device_interface(DeviceType type, DeviceInterface* interface);

// Copies n bytes between devices through the interface of the non-CPU side (CPU's when both are
// CPU), on that device's current stream.
LOOM_API void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n,
                         bool non_blocking = false);

}  // namespace loom
