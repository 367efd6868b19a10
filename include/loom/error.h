// Errors and checks (base layer).
//
// User errors throw a typed exception derived from loom::Error; the message starts with "[op]" or
// "[component]" and names the shapes, dtypes, ranks, files or offsets involved. LOOM_CHECK* are for
// user-facing conditions; LOOM_INTERNAL_ASSERT is for invariants of loom itself (a failure is a bug
// and throws InternalError). Everything here is thread-safe.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "loom/export.h"

namespace loom {

class LOOM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
  // Name of the Python-like exception class ("ValueError", ...), for printing and tests.
  virtual const char* kind() const noexcept { return "Error"; }
};

#define LOOM_DECLARE_ERROR(Name)                                 \
  class LOOM_API Name : public Error {                           \
   public:                                                       \
    using Error::Error;                                          \
    const char* kind() const noexcept override { return #Name; } \
  };

LOOM_DECLARE_ERROR(ValueError)
LOOM_DECLARE_ERROR(TypeError)
LOOM_DECLARE_ERROR(IndexError)
LOOM_DECLARE_ERROR(NotImplementedError)
LOOM_DECLARE_ERROR(OutOfMemoryError)
LOOM_DECLARE_ERROR(DistError)
LOOM_DECLARE_ERROR(TimeoutError)
LOOM_DECLARE_ERROR(DataError)
LOOM_DECLARE_ERROR(CompileError)
// An accelerator's runtime or library refused a call (CUDA, cuBLAS, cuDNN): the message names the
// call, the operator running and the runtime's own error name.
LOOM_DECLARE_ERROR(DeviceError)
LOOM_DECLARE_ERROR(InternalError)
#undef LOOM_DECLARE_ERROR

namespace detail {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Out of line so that the throwing path does not bloat callers.
template <class E>
[[noreturn]] LOOM_NOINLINE void throw_error(const std::string& msg) {
  throw E(msg);
}

[[noreturn]] LOOM_API void throw_internal(const char* file, int line, const char* cond,
                                          const std::string& msg);

}  // namespace detail
}  // namespace loom

// LOOM_CHECK(cond, "[op] expected ... but got ", x): throws ValueError.
#define LOOM_CHECK_AS(E, cond, ...)                                         \
  do {                                                                      \
    if (LOOM_UNLIKELY(!(cond))) {                                           \
      ::loom::detail::throw_error<E>(::loom::detail::str_cat(__VA_ARGS__)); \
    }                                                                       \
  } while (0)

#define LOOM_CHECK(cond, ...) LOOM_CHECK_AS(::loom::ValueError, cond, __VA_ARGS__)
#define LOOM_CHECK_TYPE(cond, ...) LOOM_CHECK_AS(::loom::TypeError, cond, __VA_ARGS__)
#define LOOM_CHECK_INDEX(cond, ...) LOOM_CHECK_AS(::loom::IndexError, cond, __VA_ARGS__)
#define LOOM_THROW(E, ...) ::loom::detail::throw_error<E>(::loom::detail::str_cat(__VA_ARGS__))

#define LOOM_INTERNAL_ASSERT(cond, ...)                                                       \
  do {                                                                                        \
    if (LOOM_UNLIKELY(!(cond))) {                                                             \
      ::loom::detail::throw_internal(__FILE__, __LINE__, #cond,                               \
                                     ::loom::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                         \
  } while (0)
