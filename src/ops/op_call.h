// Helpers shared by the operator files (internal to the ops layer).
#pragma once

#include <type_traits>

#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/ops.h"

// Calls a registered operator through the dispatcher; the typed handle is looked up once.
//   return LOOM_CALL_OP("loom::add", Tensor(const Tensor&, const Tensor&, const Scalar&), a, b,
//   alpha);
#define LOOM_CALL_OP(NAME, SIG, ...)                                                           \
  do {                                                                                         \
    static const auto loom_op_handle_ = ::loom::Dispatcher::singleton().find_typed<SIG>(NAME); \
    return loom_op_handle_.call(__VA_ARGS__);                                                  \
  } while (0)

// For in-place and out= operators: kernels return the written tensor by value (as the schema's
// Tensor(a!) return); the C++ API returns a reference to the caller's argument, which is the first
// argument after SIG (self for in-place ops, out for *_out ops).
#define LOOM_CALL_INPLACE(NAME, SIG, FIRST, ...)                                               \
  do {                                                                                         \
    static const auto loom_op_handle_ = ::loom::Dispatcher::singleton().find_typed<SIG>(NAME); \
    loom_op_handle_.call(FIRST __VA_OPT__(, ) __VA_ARGS__);                                    \
    return FIRST;                                                                              \
  } while (0)

#define LOOM_CALL_OUT(NAME, SIG, OUT, ...)                                                     \
  do {                                                                                         \
    static const auto loom_op_handle_ = ::loom::Dispatcher::singleton().find_typed<SIG>(NAME); \
    loom_op_handle_.call(__VA_ARGS__, OUT);                                                    \
    return OUT;                                                                                \
  } while (0)

namespace loom {

// Converts between element types the way a cast does in PyTorch (bool: nonzero; 16-bit floats
// through float).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != From(0);
    }
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// The arithmetic type used to compute on T: float for 16-bit floats, T otherwise.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

// True for the 16-bit float types, which kernels compute in float.
template <class T>
constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Checks that an op's tensor argument is defined, naming the op and the argument. The dispatcher
// already rejects undefined Tensor arguments at every operator's entry (Note [undefined tensors]);
// this is a second line for kernels also reached with tensors they made themselves.
inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  LOOM_CHECK(t.defined(), "[", op, "] argument '", arg, "' is an undefined tensor");
}

}  // namespace loom
