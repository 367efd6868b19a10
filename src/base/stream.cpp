// Streams, events, guards and the per-thread current streams (see loom/stream.h).
#include "loom/stream.h"

#include <ostream>
#include <utility>

#include "loom/device_interface.h"
#include "loom/error.h"

namespace loom {
namespace {

// The current stream of every device, per thread; zero (each default stream) until set. Plain
// zero-initialised thread-local storage: no constructor runs when a thread starts.
thread_local StreamId tls_current[kNumDeviceTypes][kMaxDeviceIndex];

}  // namespace

bool Stream::query() const {
  return device_interface(device_type()).query_stream(*this);
}
void Stream::synchronize() const {
  device_interface(device_type()).synchronize_stream(*this);
}

std::string Stream::str() const {
  return device_.str() + " stream " + std::to_string(id_);
}

std::ostream& operator<<(std::ostream& os, const Stream& s) {
  return os << s.str();
}

Stream current_stream(Device device) {
  return Stream(device, tls_current[static_cast<int>(device.type())][device.index()]);
}

void set_current_stream(const Stream& stream) {
  if (!stream.is_default()) device_interface(stream.device_type()).check_stream(stream);
  tls_current[static_cast<int>(stream.device_type())][stream.device_index()] = stream.id();
}

Stream new_stream(Device device) {
  return device_interface(device.type()).new_stream(device.index());
}

Event::~Event() {
  if (handle_ != nullptr) device_interface(type_).destroy_event(handle_);
}

Event::Event(Event&& o) noexcept
    : type_(o.type_),
      device_(o.device_),
      handle_(std::exchange(o.handle_, nullptr)),
      recorded_(std::exchange(o.recorded_, false)),
      timing_(o.timing_) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (handle_ != nullptr) device_interface(type_).destroy_event(handle_);
    type_ = o.type_;
    device_ = o.device_;
    handle_ = std::exchange(o.handle_, nullptr);
    recorded_ = std::exchange(o.recorded_, false);
    timing_ = o.timing_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  LOOM_CHECK(stream.device_type() == type_, "[event] an event of ", device_type_name(type_),
             " cannot be recorded on ", stream);
  LOOM_CHECK(handle_ == nullptr || stream.device() == device_, "[event] an event created on ",
             device_, " cannot be recorded on ", stream);
  if (timing_ && handle_ == nullptr)
    device_interface(type_).create_timing_event(&handle_, stream.device_index());
  device_interface(type_).record_event(&handle_, stream);
  device_ = stream.device();
  recorded_ = true;
}

double Event::elapsed_ms(const Event& end) const {
  LOOM_CHECK(timing_ && end.timing_, "[event] elapsed_ms needs two events made by Event::timed");
  LOOM_CHECK(recorded_ && end.recorded_, "[event] elapsed_ms of an event that was not recorded");
  LOOM_CHECK(type_ == end.type_ && device_ == end.device_, "[event] elapsed_ms between ", device_,
             " and ", end.device_);
  return device_interface(type_).elapsed_ms(handle_, end.handle_);
}

void Event::block(const Stream& stream) const {
  if (!recorded_) return;
  LOOM_CHECK(stream.device_type() == type_, "[event] a stream of ", stream.device(),
             " cannot wait for an event of ", device_type_name(type_));
  device_interface(type_).block_stream(handle_, stream);
}

bool Event::query() const {
  return !recorded_ || device_interface(type_).query_event(handle_);
}

void Event::synchronize() const {
  if (recorded_) device_interface(type_).synchronize_event(handle_);
}

DeviceGuard::DeviceGuard(Device device) : original_(device), current_(device) {
  DeviceInterface& i = device_interface(device.type());
  original_ = Device(device.type(), i.current_device());
  if (original_ != device) i.set_device(device.index());
}

DeviceGuard::~DeviceGuard() {
  if (original_ == current_) return;
  try {
    device_interface(original_.type()).set_device(original_.index());
  } catch (...) {
    // Restoring a device that was current moments ago cannot fail unless the backend broke;
    // a destructor must not throw.
  }
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), original_(loom::current_stream(stream.device())), current_(stream) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  tls_current[static_cast<int>(original_.device_type())][original_.device_index()] = original_.id();
}

}  // namespace loom
