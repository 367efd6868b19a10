// Autocast: the thread's mixed-precision state, AutocastGuard, and the kernel of the Autocast
// dispatch key that casts the arguments of listed operators (the lists are in autocast_policy.cpp).
#include "loom/autocast.h"

#include <array>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autograd/autocast_policy.h"
#include "autograd/autograd_meta.h"
#include "loom/autograd.h"
#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom {

// Note [Autocast]
//   The Autocast key sits above Autograd. AutocastGuard adds it to the thread's included keys, so
//   every operator call sees it; the key's backend fallback is a fallthrough, so an operator that
//   is not listed skips it at no cost (no boxing, the dispatcher masks the key out). A listed
//   operator overload has a boxed kernel there, registered for its policy:
//     - the call's device type is the highest backend key of the call (CUDA over CPU, as PyTorch's
//       per-device Autocast keys); nothing is cast unless autocast is on for that device type;
//     - floating Tensor, Tensor? and Tensor[] arguments on that device type are cast (float64 ones
//       never: autocast lowers float32, it does not touch what the user made double) to the
//       autocast dtype (LowerPrecision), to float32 (Float32), or to the widest floating dtype
//       among them (Promote); a Float32 operator with a dtype= argument (softmax, sum) gets
//       dtype=float32 instead of a cast copy of its input, unless the caller passed a dtype;
//     - the casts are ordinary `to(dtype)` calls, so autograd records a _to_copy node whose
//       backward casts the gradient back: a float32 parameter gets a float32 gradient;
//     - the operator then runs below Autocast with Autocast excluded, like PyTorch's autocast
//       wrappers: a listed composite (linear -> _linear -> addmm) is cast once at the top, and what
//       it decomposes into is not cast again.
//   out= and in-place overloads are never listed (PyTorch does not cast them either: the caller
//   chose the output's dtype). Backward passes run outside the guard as PyTorch recommends; inside
//   it, the backward's listed operators are autocast too, and the engine casts each gradient to
//   its input's dtype anyway.
//
// Note [Autocast cast cache]
//   A parameter (a float32 leaf that requires grad) used by several listed operators is cast to
//   the autocast dtype once per outermost guard: the copy is cached by tensor identity and dropped
//   when the outermost guard exits (PyTorch's cache, which keeps a weight shared by layers or used
//   in several time steps from being cast each time). Two refinements over PyTorch's: an entry
//   remembers the storage version it was made from, so a parameter updated in place inside the
//   guard is cast again rather than read stale; and a copy made with grad mode off (no history) is
//   not reused once grad mode is on, where it would cut the parameter off from its gradient.

namespace {

// Per device type (CPU, CUDA); Meta never autocasts. Constant-initialised thread-locals: no guard
// variable on access.
struct AutocastState {
  std::array<bool, 2> enabled{false, false};
  std::array<DType, 2> dtype{kBFloat16, kBFloat16};
  int depth = 0;  // guards alive on this thread (enabled or not)
};
thread_local AutocastState tls_state __attribute__((tls_model("initial-exec")));

struct CachedCast {
  Tensor source;  // held so that the key (its TensorImpl) cannot be reused while cached
  Tensor cast;
  uint32_t version = 0;
  bool with_history = false;
};
using CastCache = std::unordered_map<const TensorImpl*, CachedCast>;
CastCache& cast_cache() {
  thread_local CastCache cache;
  return cache;
}

int slot_of(DeviceType d) {
  return d == DeviceType::CPU ? 0 : (d == DeviceType::CUDA ? 1 : -1);
}

bool is_lower_precision(DType t) {
  return t == kBFloat16 || t == kFloat16;
}

// Per-operator facts from the schema, computed once (as the Autograd fallback's).
struct OpFacts {
  size_t nargs = 0;
  std::vector<int> tensor_args;  // Tensor, Tensor? and Tensor[] positions
  int dtype_arg = -1;            // a "dtype" ScalarType argument (softmax, sum, ...)
  bool writes = false;           // out= or in-place: never cast
};

OpFacts compute_facts(const OperatorHandle& op) {
  const FunctionSchema& s = op.schema();
  OpFacts f;
  f.nargs = s.arguments.size();
  for (size_t i = 0; i < s.arguments.size(); ++i) {
    const Argument& a = s.arguments[i];
    if (a.type.kind == SchemaType::Kind::Tensor) f.tensor_args.push_back(static_cast<int>(i));
    if (a.type.kind == SchemaType::Kind::ScalarType && a.name == "dtype") {
      f.dtype_arg = static_cast<int>(i);
    }
    f.writes = f.writes || a.is_write;
  }
  return f;
}

const OpFacts& op_facts(const OperatorHandle& op) {
  thread_local const OperatorEntry* last_entry = nullptr;
  thread_local const OpFacts* last_facts = nullptr;
  if (op.entry() == last_entry) return *last_facts;
  static std::mutex mu;
  static std::unordered_map<const OperatorEntry*, std::unique_ptr<OpFacts>> facts;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = facts[op.entry()];
  if (!slot) slot = std::make_unique<OpFacts>(compute_facts(op));
  last_entry = op.entry();
  last_facts = slot.get();
  return *slot;
}

DeviceType call_device_type(DispatchKeySet keys) {
  switch ((keys & DispatchKeySet::backends()).highest()) {
    case DispatchKey::CPU:
      return DeviceType::CPU;
    case DispatchKey::CUDA:
      return DeviceType::CUDA;
    default:
      return DeviceType::Meta;
  }
}

// A tensor autocast may cast: floating, not float64, on the call's device type, and not a wrapped
// C++ number (`where(c, x, 0.5)`), which keeps its weak part in type promotion.
bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type() == device && is_floating(t.dtype()) &&
         t.dtype() != kFloat64 && !t.impl()->is_wrapped_number();
}

Tensor cast_to(const Tensor& t, DType to, DeviceType device) {
  if (!eligible(t, device) || t.dtype() == to) return t;
  // Note [Autocast cast cache]: parameters (float32 leaves that require grad, not views) only.
  const autograd::AutogradMeta* m = autograd::meta_of(t);
  const bool cacheable = to == tls_state.dtype[slot_of(device)] && t.dtype() == kFloat32 &&
                         m != nullptr && m->requires_grad_ && m->grad_fn_ == nullptr &&
                         !m->is_view_;
  if (!cacheable) return t.to(to);
  const bool grad_on = autograd::GradMode::is_enabled();
  CachedCast& c = cast_cache()[t.impl()];
  if (c.cast.defined() && c.cast.dtype() == to && c.version == t.version() &&
      (c.with_history || !grad_on)) {
    return c.cast;
  }
  c.source = t;
  c.cast = t.to(to);
  c.version = t.version();
  c.with_history = grad_on;
  return c.cast;
}

// The boxed kernel of every listed operator; `policy` comes from the table (one function per
// policy, so a call does not look its operator up).
void autocast_kernel(const OperatorHandle& op, DispatchKeySet keys, Stack* stack,
                     CastPolicy policy) {
  const DispatchKeySet below = keys & DispatchKeySet::below(DispatchKey::Autocast);
  const OpFacts& f = op_facts(op);
  const DeviceType device = call_device_type(keys);
  const int slot = slot_of(device);
  IValue* args = stack->data() + (stack->size() - f.nargs);
  if (slot < 0 || !tls_state.enabled[slot] || f.writes) {
    op.redispatch_boxed(below, *stack);
    return;
  }
  if (policy == CastPolicy::Float32 && f.dtype_arg >= 0) {
    // An operator with a dtype= argument (softmax, sum, prod) computes in float32 when asked to,
    // without a float32 copy of its input; a dtype the caller chose wins.
    if (args[f.dtype_arg].is_none() && !f.tensor_args.empty() &&
        args[f.tensor_args[0]].is_tensor() &&
        eligible(args[f.tensor_args[0]].to_tensor(), device)) {
      args[f.dtype_arg] = IValue(kFloat32);
    }
    ExcludeDispatchKeyGuard no_autocast(DispatchKey::Autocast);
    op.redispatch_boxed(below, *stack);
    return;
  }
  DType to = kFloat32;
  if (policy == CastPolicy::LowerPrecision) {
    to = tls_state.dtype[slot];
  } else if (policy == CastPolicy::Promote) {
    std::optional<DType> widest;
    auto see = [&](const Tensor& t) {
      if (eligible(t, device)) widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
    };
    for (int p : f.tensor_args) {
      const IValue& v = args[p];
      if (v.is_tensor()) see(v.to_tensor());
      if (v.is_tensor_list()) {
        for (const Tensor& t : v.to_tensor_list()) see(t);
      }
    }
    if (!widest) {
      op.redispatch_boxed(below, *stack);
      return;
    }
    to = *widest;
  }
  // Cast in place on the stack; the keys of the new arguments join the call's (a cast of a tensor
  // that requires grad carries the Autograd key even if the original reached here through TLS).
  DispatchKeySet cast_keys;
  for (int p : f.tensor_args) {
    IValue& v = args[p];
    if (v.is_tensor()) {
      Tensor c = cast_to(v.to_tensor(), to, device);
      if (c.defined()) cast_keys = cast_keys | c.key_set();
      v = IValue(std::move(c));
    } else if (v.is_tensor_list()) {
      std::vector<Tensor> list = v.to_tensor_list();
      for (Tensor& t : list) {
        t = cast_to(t, to, device);
        cast_keys = cast_keys | t.key_set();
      }
      v = IValue(std::move(list));
    }
  }
  const DispatchKeySet ks = (below | (cast_keys - detail::tls_dispatch_keys.excluded)) &
                            DispatchKeySet::below(DispatchKey::Autocast);
  ExcludeDispatchKeyGuard no_autocast(DispatchKey::Autocast);
  op.redispatch_boxed(ks, *stack);
}

void lower_precision_kernel(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  autocast_kernel(op, keys, stack, CastPolicy::LowerPrecision);
}
void float32_kernel(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  autocast_kernel(op, keys, stack, CastPolicy::Float32);
}
void promote_kernel(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  autocast_kernel(op, keys, stack, CastPolicy::Promote);
}

// cross_entropy is on the float32 list, but where the fused kernel applies ((N, V) 16-bit logits,
// class indices, mean, no class weight) it reads the logits as they are and sums in float into a
// float32 loss: no float32 copy of the (N, V) logits (1.6 GB for GPT-2's vocabulary at 8 x 1024
// tokens), the same loss dtype as the cast would give (Note [Fused cross-entropy]).
void cross_entropy_kernel(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) {
  const OpFacts& f = op_facts(op);
  const DeviceType device = call_device_type(keys);
  const int slot = slot_of(device);
  IValue* args = stack->data() + (stack->size() - f.nargs);
  auto fused_applies = [&] {
    if (slot < 0 || !tls_state.enabled[slot] || f.writes || f.nargs != 6) return false;
    if (!args[0].is_tensor() || !args[1].is_tensor()) return false;
    const Tensor& x = args[0].to_tensor();
    const Tensor& t = args[1].to_tensor();
    const bool no_weight =
        args[2].is_none() || (args[2].is_tensor() && !args[2].to_tensor().defined());
    return no_weight && args[3].to_int() == 1 && x.defined() && t.defined() && x.dim() == 2 &&
           is_lower_precision(x.dtype()) && eligible(x, device) && t.dim() == 1 &&
           t.dtype() == kInt64 && t.device() == x.device();
  };
  if (!fused_applies()) {
    autocast_kernel(op, keys, stack, CastPolicy::Float32);
    return;
  }
  const Tensor x = args[0].to_tensor(), t = args[1].to_tensor();
  const int64_t ignore_index = args[4].to_int();
  const double smoothing = args[5].to_double();
  ExcludeDispatchKeyGuard no_autocast(DispatchKey::Autocast);
  Tensor loss = std::get<0>(_fused_cross_entropy(x, t, ignore_index, smoothing));
  stack->erase(stack->end() - static_cast<std::ptrdiff_t>(f.nargs), stack->end());
  stack->emplace_back(std::move(loss));
}

BoxedKernelFn kernel_for(CastPolicy p) {
  switch (p) {
    case CastPolicy::LowerPrecision:
      return &lower_precision_kernel;
    case CastPolicy::Float32:
      return &float32_kernel;
    case CastPolicy::Promote:
      return &promote_kernel;
    case CastPolicy::None:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[autocast] no kernel for cast policy ", cast_policy_name(p));
  return nullptr;
}

}  // namespace

// ---- the guard and the state ----

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : device_(device) {
  const int slot = slot_of(device);
  LOOM_CHECK(slot >= 0, "[autocast] autocast is for CPU and CUDA tensors, not ",
             device_type_name(device));
  LOOM_CHECK(is_lower_precision(dtype),
             "[autocast] the autocast dtype must be bfloat16 or float16 "
             "(a lower-precision floating dtype), but got ",
             dtype, " for device type ", device_type_name(device));
  prev_enabled_ = tls_state.enabled[slot];
  prev_dtype_ = tls_state.dtype[slot];
  prev_key_included_ = detail::tls_dispatch_keys.included.has(DispatchKey::Autocast);
  tls_state.enabled[slot] = enabled;
  tls_state.dtype[slot] = dtype;
  ++tls_state.depth;
  const bool any = tls_state.enabled[0] || tls_state.enabled[1];
  auto& included = detail::tls_dispatch_keys.included;
  included = any ? included.add(DispatchKey::Autocast) : included.remove(DispatchKey::Autocast);
}

AutocastGuard::~AutocastGuard() {
  const int slot = slot_of(device_);
  tls_state.enabled[slot] = prev_enabled_;
  tls_state.dtype[slot] = prev_dtype_;
  auto& included = detail::tls_dispatch_keys.included;
  included = prev_key_included_ ? included.add(DispatchKey::Autocast)
                                : included.remove(DispatchKey::Autocast);
  if (--tls_state.depth == 0) cast_cache().clear();
}

bool autocast_enabled(DeviceType device) {
  const int slot = slot_of(device);
  // Off inside a listed operator, which runs with the key excluded (as PyTorch's).
  return slot >= 0 && tls_state.enabled[slot] &&
         !detail::tls_dispatch_keys.excluded.has(DispatchKey::Autocast);
}

DType autocast_dtype(DeviceType device) {
  const int slot = slot_of(device);
  return slot >= 0 ? tls_state.dtype[slot] : kBFloat16;
}

const char* autocast_exception(const std::string& op_name) {
  if (op_name == "loom::cross_entropy" || op_name == "cross_entropy") {
    return "(N, V) 16-bit logits with class indices, mean reduction and no class weight are not "
           "cast: the fused kernel reads them as they are and sums in float into a float32 loss";
  }
  return "";
}

size_t autocast_cached_casts() {
  return cast_cache().size();
}

// Every operator falls through the Autocast key unless the table gives it a kernel.
LOOM_LIBRARY_IMPL(_, Autocast, m) {
  m.fallback(fallthrough_kernel());
}

LOOM_LIBRARY_IMPL(loom, Autocast, m) {
  for (const autocast::PolicyEntry& e : autocast::policy_table()) {
    m.impl(e.name, std::string_view(e.name) == "cross_entropy" ? &cross_entropy_kernel
                                                               : kernel_for(e.policy));
  }
}

}  // namespace loom
