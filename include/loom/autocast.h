// Automatic mixed precision (autograd layer), as torch.autocast: inside an AutocastGuard, operators
// on an autocast list run in the precision the list chooses (matrix products and convolutions in
// bfloat16 or float16, numerically sensitive ones in float32), the rest in their inputs' dtype.
//
// The mechanism is the Autocast dispatch key (Note [Autocast] in src/autograd/autocast.cpp): the
// guard adds it to the thread's included keys; listed operators have a kernel there that casts
// their floating tensor arguments through the ordinary `to(dtype)` (so autograd records the casts
// and float32 master weights get float32 gradients) and redispatches; other operators fall through.
// Thread-safety: the state (enabled device types, their dtypes, the cast cache) is per thread.
#pragma once

#include <cstddef>
#include <string>

#include "loom/device.h"
#include "loom/dtype.h"
#include "loom/export.h"

namespace loom {

// RAII like `with torch.autocast(device_type, dtype, enabled)`: enables (or, with enabled=false,
// disables) autocast for tensors of `device` type on this thread; nests, and restores the previous
// state on destruction. The dtype must be a lower-precision floating dtype (bfloat16 or float16;
// anything else is a ValueError), as must the device type (CPU or CUDA). Leaving the outermost
// guard clears the cast cache.
class LOOM_API AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device, DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_key_included_;
};

// Whether autocast is on for tensors of this device type on this thread (false for Meta).
LOOM_API bool autocast_enabled(DeviceType device);
// The lower-precision dtype of the device type: the innermost guard's, bfloat16 by default.
LOOM_API DType autocast_dtype(DeviceType device);

// What autocast does to an operator's floating tensor arguments that live on an enabled device
// type (float64 arguments are never cast, integer and bool ones neither).
enum class CastPolicy {
  None,            // not listed: runs in its inputs' dtype
  LowerPrecision,  // cast to the autocast dtype (bfloat16 by default)
  Float32,         // cast to float32; an explicit dtype= argument wins (softmax(x, dtype=f16))
  Promote,         // cast to the widest floating dtype among the arguments
};

// The policy of an operator: "loom::mm", "mm", "loom::pow.Tensor_Scalar", or a name without its
// overload ("loom::pow": the policy of its listed overloads). out= and in-place overloads
// ("loom::mm.out", "loom::pow_.Scalar") are never cast: None.
LOOM_API CastPolicy autocast_policy(const std::string& op_name);
// "none", "lower precision", "float32", "promote".
LOOM_API const char* cast_policy_name(CastPolicy policy);
// One line on what the policy does, for `loom ops --explain`.
LOOM_API const char* cast_policy_explanation(CastPolicy policy);
// What an operator's autocast kernel does beyond its policy ("" for most): cross_entropy runs the
// fused kernel on 16-bit logits without the float32 cast where it applies.
LOOM_API const char* autocast_exception(const std::string& op_name);

// The number of low-precision copies of parameters (leaves that require grad) cached on this
// thread since the outermost guard was entered (Note [Autocast cast cache]).
LOOM_API size_t autocast_cached_casts();

}  // namespace loom
