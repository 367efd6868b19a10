// RecordingAllocator, the step marks it logs, and recording a whole process (LOOM_MEM_RECORD; Note
// [recording a process] in loom/memory/alloc_trace.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "loom/config.h"
#include "loom/error.h"
#include "loom/memory/alloc_trace.h"

namespace loom::memory {
namespace {

// The live recorders, which mark_step() notifies. The count lets mark_step skip the lock while
// nothing records (the usual case: an optimizer step in a plain training run).
std::mutex g_recorders_mu;
std::vector<RecordingAllocator*>& recorders() {             // guarded by g_recorders_mu
  static auto* v = new std::vector<RecordingAllocator*>();  // leaked: used from static destructors
  return *v;
}
std::atomic<int> g_recorder_count{0};
std::atomic<int64_t> g_steps{0};

}  // namespace

void mark_step() {
  g_steps.fetch_add(1, std::memory_order_relaxed);
  if (g_recorder_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(g_recorders_mu);
  for (RecordingAllocator* r : recorders()) r->log_step();
}

int64_t steps_marked() {
  return g_steps.load(std::memory_order_relaxed);
}

// ---- RecordingAllocator ----

// Owns the inner allocation: deleting the context frees it through the inner deleter.
struct RecordingAllocator::Context {
  RecordingAllocator* self;
  int64_t id;
  DataPtr inner;
};

RecordingAllocator::RecordingAllocator(Allocator& inner, std::string source)
    : inner_(inner), source_(std::move(source)) {
  std::lock_guard<std::mutex> lock(g_recorders_mu);
  recorders().push_back(this);
  g_recorder_count.fetch_add(1, std::memory_order_relaxed);
}

RecordingAllocator::~RecordingAllocator() {
  std::lock_guard<std::mutex> lock(g_recorders_mu);
  auto& v = recorders();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
  g_recorder_count.fetch_sub(1, std::memory_order_relaxed);
}

// The operator names are interned: a trace of a training run names a few dozen operators over
// hundreds of thousands of allocations. Runs of allocations by one operator are common, so the last
// name is compared first (by content: a scope's name may reuse the address of another's).
int32_t RecordingAllocator::intern(const char* context) {
  if (context == nullptr) return -1;
  if (last_context_id_ >= 0 &&
      std::strcmp(context, contexts_[static_cast<size_t>(last_context_id_)].c_str()) == 0) {
    return last_context_id_;
  }
  auto [it, inserted] = context_ids_.try_emplace(context, static_cast<int32_t>(contexts_.size()));
  if (inserted) contexts_.push_back(it->first);
  last_context_id_ = it->second;
  return it->second;
}

DataPtr RecordingAllocator::allocate(size_t nbytes) {
  DataPtr inner = inner_.allocate(nbytes);  // OutOfMemoryError propagates: nothing logged
  const StreamId stream = current_stream(inner.device()).id();
  return log_alloc(std::move(inner), nbytes, stream);
}

DataPtr RecordingAllocator::allocate_on(size_t nbytes, const Stream& stream) {
  return log_alloc(inner_.allocate_on(nbytes, stream), nbytes, stream.id());
}

DataPtr RecordingAllocator::log_alloc(DataPtr inner, size_t nbytes, StreamId stream) {
  void* data = inner.get();
  const Device device = inner.device();
  auto ctx = std::make_unique<Context>(Context{this, 0, std::move(inner)});
  const char* context = current_alloc_context();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ids_.empty()) {
      ctx->id = next_id_++;
    } else {
      ctx->id = free_ids_.back();
      free_ids_.pop_back();
    }
    events_.push_back(AllocEvent{AllocEvent::Op::Alloc, ctx->id, static_cast<int64_t>(nbytes),
                                 stream, intern(context)});
  }
  return DataPtr(data, ctx.release(), &RecordingAllocator::deleter, device);
}

void RecordingAllocator::deleter(void* raw) {
  auto* ctx = static_cast<Context*>(raw);
  ctx->self->log_free(ctx->id);
  delete ctx;
}

void RecordingAllocator::log_free(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(AllocEvent{AllocEvent::Op::Free, id, 0, 0, -1});
  free_ids_.push_back(id);
}

void RecordingAllocator::log_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(AllocEvent{AllocEvent::Op::Step, ++steps_, 0, 0, -1});
}

AllocTrace RecordingAllocator::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocTrace t;
  t.source = source_;
  t.events = events_;
  t.contexts = contexts_;
  return t;
}

// ---- recording a process (Note [recording a process]) ----
namespace {

struct ProcessRecording {
  std::mutex mu;
  std::string path;                   // guarded by mu
  RecordingAllocator* rec = nullptr;  // leaked: deleters of tensors freed at exit log into it
  bool replaced_reported = false;     // guarded by mu
};
ProcessRecording& process_recording() {
  static auto* p = new ProcessRecording();  // leaked for the same reason
  return *p;
}

std::string expand_pid(std::string path) {
  for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at)) {
    const std::string pid = std::to_string(::getpid());
    path.replace(at, 2, pid);
    at += pid.size();
  }
  return path;
}

void write_at_exit() {
  try {
    flush_process_recording();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[mem record] could not write the allocation trace at exit: %s\n",
                 e.what());
  }
}

// LOOM_MEM_RECORD is honoured when libloom loads, before main(), so that the trace starts with
// the program's first allocation.
[[maybe_unused]] const bool kRecordingFromConfig = [] {
  const std::string path = config::declare(
      "LOOM_MEM_RECORD", "",
      "record every CPU allocation and free of the process, with its operator and a marker per "
      "optimizer step, as a loom-alloc-trace written to this file at exit (%p: the process id); "
      "`loom mem replay` and `loom mem snapshot --trace` read it");
  if (path.empty()) return false;
  try {
    start_process_recording(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[mem record] LOOM_MEM_RECORD=%s is ignored: %s\n", path.c_str(),
                 e.what());
    return false;
  }
  return true;
}();

}  // namespace

void start_process_recording(const std::string& path_in) {
  LOOM_CHECK(!path_in.empty(), "[mem record] the trace file name is empty");
  ProcessRecording& p = process_recording();
  std::lock_guard<std::mutex> lock(p.mu);
  LOOM_CHECK(p.rec == nullptr, "[mem record] this process already records into ", p.path);
  p.path = expand_pid(path_in);
  p.rec = new RecordingAllocator(*get_allocator(DeviceType::CPU),
                                 "LOOM_MEM_RECORD: process " + std::to_string(::getpid()));
  set_allocator(DeviceType::CPU, p.rec);
  std::atexit(write_at_exit);
}

bool flush_process_recording() {
  ProcessRecording& p = process_recording();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.rec == nullptr) return false;
  if (get_allocator(DeviceType::CPU) != p.rec && !p.replaced_reported) {
    // Never silent: the trace misses whatever the new allocator served.
    std::fprintf(stderr,
                 "[mem record] warning: the CPU allocator was replaced while recording; "
                 "allocations made through the new one are not in %s\n",
                 p.path.c_str());
    p.replaced_reported = true;
  }
  write_trace(p.path, p.rec->trace());
  return true;
}

}  // namespace loom::memory
