// RecordFunction (dispatch layer): hook points at the dispatcher entry for the profiler.
//
// Callbacks registered here see every top-level operator call (not redispatches) and every user
// scope: the operator name, the shapes and dtypes of its inputs and a per-thread sequence number.
// No tensor is held. Scopes of other kinds come from the autograd engine (backward nodes, linked to
// their forward operators), the process group (collectives) and the data loader (stages). With no
// callback registered, a call pays one predictable branch on a global flag. Registering and
// removing callbacks is thread-safe (a recorded call takes no lock); callbacks run on the calling
// thread, must be thread-safe themselves and must not register or remove callbacks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/array_ref.h"
#include "loom/dtype.h"
#include "loom/export.h"
#include "loom/tensor.h"

namespace loom {

class FunctionSchema;

struct OpEvent {
  // Operator: a dispatcher call. The others are scopes: UserScope (user code), Backward (an
  // autograd node run by the engine), Collective (a ProcessGroup collective), DataStage (data
  // loader stages), CommWait (a thread blocked on communication it started, e.g. DDP waiting for
  // gradient allreduce).
  enum class Kind : uint8_t { Operator, UserScope, Backward, Collective, DataStage, CommWait };
  Kind kind = Kind::Operator;
  std::string_view name;  // "loom::add" (operators: full name with overload) or the scope name
  const FunctionSchema* schema = nullptr;  // null for scopes
  uint64_t sequence_nr = 0;                // per-thread count of recorded events
  int depth = 0;                           // nesting: 0 for a call made by user code
  int64_t start_ns = 0;                    // steady clock, set on entry
  int64_t end_ns = 0;                      // set before on_exit
  // Forward-backward link, (autograd thread id, node sequence number); fwd_thread 0: none. Backward
  // scopes carry their node's; an Operator gets the node it recorded (set by autograd while the
  // operator runs, so visible in on_exit only).
  uint64_t fwd_thread = 0;
  uint64_t fwd_sequence_nr = 0;
  int64_t bytes = -1;  // Collective: bytes this rank contributes; -1: not applicable
  // Free for a callback's on_enter to tag the call for its on_exit (the profiler keeps the GPU
  // correlation id it pushed here); 0 on entry.
  uint64_t correlation_id = 0;
  bool record_scalars = true;  // whether scalar_args are filled (some callback asked for them)
  // One entry per tensor argument (tensor lists contribute one entry per element).
  std::vector<DimVector> input_shapes;
  std::vector<DType> input_dtypes;
  std::vector<std::string> scalar_args;  // other arguments, printed
};

struct RecordFunctionCallbacks {
  std::function<void(OpEvent&)> on_enter;  // may be empty
  std::function<void(OpEvent&)> on_exit;   // may be empty
  bool needs_inputs = true;                // fill input_shapes / input_dtypes
  bool needs_scalar_args = true;           // with needs_inputs: also print the other arguments
};

// Registers callbacks for all threads; returns a handle for remove_record_callbacks.
LOOM_API uint64_t add_record_callbacks(RecordFunctionCallbacks cb);
LOOM_API void remove_record_callbacks(uint64_t handle);

namespace detail {
extern LOOM_API std::atomic<int> g_record_callbacks;
struct SpareInputs;
}  // namespace detail
inline bool record_function_active() {
  return detail::g_record_callbacks.load(std::memory_order_relaxed) != 0;
}

// Used by the dispatcher's slow path: fills the event with `fill`, then calls on_enter; on_exit on
// destruction.
class LOOM_API RecordFunctionGuard {
 public:
  // `name` must outlive the guard (the dispatcher passes the operator entry's name).
  template <class Fill>
  RecordFunctionGuard(const std::string& name, const FunctionSchema& schema, const Fill& fill) {
    begin_operator(name, schema);
    if (needs_inputs_) fill(event_);
    enter();
  }
  // A user scope: RecordFunctionGuard g("data_wait");
  explicit RecordFunctionGuard(std::string_view scope_name);
  // A scope of another kind (Backward, Collective, DataStage, CommWait), with its bytes and forward
  // link.
  // Callers on hot paths test record_function_active() before building `name`.
  RecordFunctionGuard(OpEvent::Kind kind, std::string name, int64_t bytes = -1,
                      uint64_t fwd_thread = 0, uint64_t fwd_sequence_nr = 0);
  ~RecordFunctionGuard();
  RecordFunctionGuard(const RecordFunctionGuard&) = delete;
  RecordFunctionGuard& operator=(const RecordFunctionGuard&) = delete;

 private:
  void begin_operator(const std::string& name, const FunctionSchema& schema);
  void enter();
  OpEvent event_;
  OpEvent* parent_op_ = nullptr;          // the enclosing recorded operator (operators only)
  detail::SpareInputs* spare_ = nullptr;  // recycled input vectors (record_function.cpp)
  std::string name_storage_;
  const char* saved_alloc_context_ = nullptr;  // Note [allocation context] (loom/memory)
  bool active_ = false;
  bool needs_inputs_ = false;
};

namespace detail {
// Called by autograd when it records a node for the operator running on this thread: links the
// innermost recorded operator to that node (the first node wins).
LOOM_API void record_autograd_node(uint64_t thread_id, uint64_t sequence_nr);
LOOM_API void record_input(OpEvent& ev, const Tensor& t);
LOOM_API void record_input(OpEvent& ev, const std::optional<Tensor>& t);
LOOM_API void record_input(OpEvent& ev, TensorList l);
LOOM_API void record_input(OpEvent& ev, const Scalar& s);
LOOM_API void record_input(OpEvent& ev, IntArrayRef v);
LOOM_API void record_input(OpEvent& ev, int64_t v);
LOOM_API void record_input(OpEvent& ev, double v);
LOOM_API void record_input(OpEvent& ev, bool v);
template <class T>
void record_input(OpEvent&, const T&) {}
}  // namespace detail

}  // namespace loom
