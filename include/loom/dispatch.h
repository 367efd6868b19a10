// The dispatcher (dispatch layer).
//
// Every operator has a schema and a table of kernels, one per dispatch key. A call computes the key
// set of its arguments (tensors' keys, the backend of a Device argument), adds the thread-local
// included keys, removes the excluded ones and the keys whose kernel is a fallthrough, and runs the
// kernel of the highest remaining key. A kernel may redispatch to the keys below its own. Kernels
// are registered unboxed (a typed function pointer, the fast path) and are callable boxed (a Stack
// of IValues) through a generated wrapper; a boxed kernel (e.g. a per-key fallback that handles any
// operator) is callable from typed calls by boxing the arguments.
//
// Thread-safety: calls are lock-free and may run on any thread. Registration takes a lock, but a
// kernel must not be (de)registered for an operator while another thread calls that operator.
// Operator entries live until the process ends, so handles stay valid.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/detail/boxing.h"
#include "loom/dispatch_key.h"
#include "loom/export.h"
#include "loom/ivalue.h"
#include "loom/record_function.h"
#include "loom/schema.h"

namespace loom {

class OperatorHandle;
class OperatorEntry;

// A boxed kernel: reads its arguments from the end of the stack and replaces them with its returns.
using BoxedKernelFn = void (*)(const OperatorHandle& op, DispatchKeySet keys, Stack* stack);

class LOOM_API KernelFunction {
 public:
  enum class Kind : uint8_t { Missing, Unboxed, Boxed, Fallthrough };
  using BoxedWrapperFn = void (*)(const KernelFunction& self, const OperatorHandle& op,
                                  DispatchKeySet keys, Stack* stack);

  KernelFunction() = default;

  // From a function pointer `Ret (*)(Args...)` or `Ret (*)(DispatchKeySet, Args...)`; the second
  // form receives the key set so that it can redispatch.
  template <class Ret, class... Args>
  static KernelFunction from_unboxed(Ret (*fn)(Args...));
  template <class Ret, class... Args>
  static KernelFunction from_unboxed(Ret (*fn)(DispatchKeySet, Args...));
  static KernelFunction from_boxed(BoxedKernelFn fn);
  static KernelFunction fallthrough();

  Kind kind() const { return kind_; }
  bool is_valid() const { return kind_ != Kind::Missing; }
  bool is_fallthrough() const { return kind_ == Kind::Fallthrough; }
  const detail::CppSignature* cpp_signature() const { return signature_.get(); }

  template <class Ret, class... Args>
  Ret call(const OperatorHandle& op, DispatchKeySet keys, Args... args) const;
  void call_boxed(const OperatorHandle& op, DispatchKeySet keys, Stack* stack) const {
    boxed_wrapper_(*this, op, keys, stack);
  }

  // Where the kernel was registered ("file.cpp:12"), for `loom ops` and error messages.
  std::string debug;

 private:
  template <bool TakesKeys, class Ret, class... Args, size_t... I>
  static void boxed_from_unboxed(const KernelFunction& self, DispatchKeySet keys, Stack* stack,
                                 std::index_sequence<I...>);

  Kind kind_ = Kind::Missing;
  bool takes_keys_ = false;
  void* unboxed_ = nullptr;
  BoxedKernelFn boxed_ = nullptr;
  BoxedWrapperFn boxed_wrapper_ = nullptr;
  std::shared_ptr<detail::CppSignature> signature_;
};

// A handle to a registered operator. Cheap to copy; valid for the life of the process.
class LOOM_API OperatorHandle {
 public:
  OperatorHandle() = default;
  explicit OperatorHandle(OperatorEntry* e) : entry_(e) {}

  const FunctionSchema& schema() const;
  const std::string& name() const;  // "loom::add.out"
  bool has_kernel(DispatchKey k) const;
  // Keys that have a kernel (directly, through an alias key or a fallback), highest first.
  std::vector<DispatchKey> kernel_keys() const;
  // How the kernel for key k was chosen and where it was registered, e.g.
  // "direct (src/ops/binary.cpp:210)", "CompositeExplicit (...)", "fallback (...)", "fallthrough";
  // empty when there is none.
  std::string kernel_source(DispatchKey k) const;
  // The key a call with these keys would run, after thread-local sets and fallthroughs.
  DispatchKey dispatch_key_for(DispatchKeySet keys) const;

  // Boxed call: the arguments (all of them, defaults filled in) are on the stack; returns replace
  // them. Keys come from the tensor and device arguments on the stack.
  void call_boxed(Stack& stack) const;
  void redispatch_boxed(DispatchKeySet keys, Stack& stack) const;

  OperatorEntry* entry() const { return entry_; }

 protected:
  OperatorEntry* entry_ = nullptr;
};

template <class Sig>
class TypedOperatorHandle;

// The unboxed fast path for one signature. Obtain with Dispatcher::find_typed, which checks that
// the signature matches the schema.
template <class Ret, class... Args>
class TypedOperatorHandle<Ret(Args...)> : public OperatorHandle {
 public:
  TypedOperatorHandle() = default;
  explicit TypedOperatorHandle(OperatorEntry* e) : OperatorHandle(e) {}

  Ret call(Args... args) const;
  // Runs the kernel for `keys` as given (the caller has already removed its own key and above).
  Ret redispatch(DispatchKeySet keys, Args... args) const;
};

namespace detail {

struct LocalDispatchKeySet {
  DispatchKeySet included;
  DispatchKeySet excluded;
};
extern LOOM_API thread_local LocalDispatchKeySet tls_dispatch_keys
    __attribute__((tls_model("initial-exec")));

// A stack for boxing a typed call into a boxed kernel, borrowed from a per-thread pool (one stack
// per nesting depth) and given back empty: a typed call into the Autograd fallback would otherwise
// allocate and free a vector every time. The kernel must not keep the stack.
class LOOM_API BorrowedStack {
 public:
  BorrowedStack();
  ~BorrowedStack();
  BorrowedStack(const BorrowedStack&) = delete;
  BorrowedStack& operator=(const BorrowedStack&) = delete;
  Stack& get() { return *stack_; }

 private:
  Stack* stack_;
};

// Cold paths, out of line.
[[noreturn]] LOOM_API void report_missing_kernel(const OperatorEntry& e, DispatchKeySet keys);
// ValueError "[loom::add] argument 'other' is an undefined tensor (...)" (Note [undefined tensors]
// in loom/tensor.h); element >= 0 names the element of a Tensor[] argument.
[[noreturn]] LOOM_API void report_undefined_argument(const OperatorEntry& e, int position,
                                                     int64_t element);
LOOM_API const KernelFunction& entry_table(const OperatorEntry& e, DispatchKey k);
LOOM_API DispatchKeySet entry_non_fallthrough(const OperatorEntry& e);

// Note [Capture breaks]: code below the compiler that does something a captured graph cannot
// replay (the autograd engine running a backward pass) reports it while the thread includes the
// Capture key; the compiler installs the handler that turns the report into a graph break. A
// no-op otherwise.
using CaptureBreakHandler = void (*)(const char* reason);
LOOM_API void set_capture_break_handler(CaptureBreakHandler handler);
LOOM_API void report_capture_break(const char* reason);

}  // namespace detail

// Thread-local include/exclude sets, as RAII guards.
class LOOM_API IncludeDispatchKeyGuard {
 public:
  explicit IncludeDispatchKeyGuard(DispatchKey k);
  ~IncludeDispatchKeyGuard();
  IncludeDispatchKeyGuard(const IncludeDispatchKeyGuard&) = delete;
  IncludeDispatchKeyGuard& operator=(const IncludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

class LOOM_API ExcludeDispatchKeyGuard {
 public:
  explicit ExcludeDispatchKeyGuard(DispatchKeySet keys);
  explicit ExcludeDispatchKeyGuard(DispatchKey k) : ExcludeDispatchKeyGuard(DispatchKeySet(k)) {}
  ~ExcludeDispatchKeyGuard();
  ExcludeDispatchKeyGuard(const ExcludeDispatchKeyGuard&) = delete;
  ExcludeDispatchKeyGuard& operator=(const ExcludeDispatchKeyGuard&) = delete;

 private:
  DispatchKeySet saved_;
};

class LOOM_API Dispatcher {
 public:
  static Dispatcher& singleton();

  // "loom::add" (the overload-less name) or "loom::add.out".
  std::optional<OperatorHandle> find(const std::string& name);
  // Throws ValueError naming the operator (and similar names) if it does not exist.
  OperatorHandle find_or_throw(const std::string& name);
  // Throws TypeError if the C++ signature does not match the schema.
  template <class Sig>
  TypedOperatorHandle<Sig> find_typed(const std::string& name);
  std::vector<OperatorHandle> all_operators();

  // Registration (normally through Library). Each returns a function that undoes it.
  std::function<void()> register_def(FunctionSchema schema, const std::string& debug);
  std::function<void()> register_impl(const std::string& name, DispatchKey key, KernelFunction k);
  std::function<void()> register_fallback(DispatchKey key, KernelFunction k);
  // The backend fallback for a key, or null.
  const KernelFunction* fallback(DispatchKey key) const;

  void check_signature(const OperatorHandle& op, const detail::CppSignature& sig,
                       const char* what) const;

 private:
  Dispatcher();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A set of registrations in one namespace, undone when the Library is destroyed. Used through the
// LOOM_LIBRARY macros below, or directly (e.g. in a test that registers a temporary operator).
class LOOM_API Library {
 public:
  enum class Kind { Def, Fragment, Impl };
  Library(Kind kind, std::string ns, std::optional<DispatchKey> key, const char* file, int line);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Declares an operator: "add(Tensor self, Tensor other) -> Tensor".
  Library& def(const std::string& schema);
  // Declares an operator and registers `fn` as its CompositeImplicit kernel.
  template <class F>
  Library& def(const std::string& schema, F* fn) {
    def(schema);
    return impl(parse_schema(schema, ns_).op_name(), DispatchKey::CompositeImplicit, fn);
  }

  // Registers a kernel for the library's key (LOOM_LIBRARY_IMPL) or for `key`.
  template <class F>
  Library& impl(const std::string& name, F* fn) {
    return impl_kernel(name, required_key(), KernelFunction::from_unboxed(fn));
  }
  template <class F>
  Library& impl(const std::string& name, DispatchKey key, F* fn) {
    return impl_kernel(name, key, KernelFunction::from_unboxed(fn));
  }
  Library& impl(const std::string& name, BoxedKernelFn fn) {
    return impl_kernel(name, required_key(), KernelFunction::from_boxed(fn));
  }
  Library& impl(const std::string& name, DispatchKey key, BoxedKernelFn fn) {
    return impl_kernel(name, key, KernelFunction::from_boxed(fn));
  }
  Library& impl(const std::string& name, KernelFunction k) {
    return impl_kernel(name, required_key(), std::move(k));
  }
  Library& impl(const std::string& name, DispatchKey key, KernelFunction k) {
    return impl_kernel(name, key, std::move(k));
  }
  // A backend fallback for the library's key: runs for every operator without its own kernel there.
  Library& fallback(KernelFunction k);

  const std::string& ns() const { return ns_; }

 private:
  Library& impl_kernel(const std::string& name, DispatchKey key, KernelFunction k);
  DispatchKey required_key() const;
  std::string where() const;

  Kind kind_;
  std::string ns_;
  std::optional<DispatchKey> key_;
  std::string file_;
  int line_;
  std::vector<std::function<void()>> undo_;
};

namespace detail {
// Runs a library's init function at static-initialisation time and owns the Library.
class LOOM_API LibraryInit {
 public:
  LibraryInit(Library::Kind kind, const char* ns, std::optional<DispatchKey> key,
              void (*init)(Library&), const char* file, int line)
      : lib_(kind, ns, key, file, line) {
    init(lib_);
  }

 private:
  Library lib_;
};
}  // namespace detail

// A kernel that makes the dispatcher skip this key and go on to the next one.
inline KernelFunction fallthrough_kernel() {
  return KernelFunction::fallthrough();
}

}  // namespace loom

#define LOOM_CONCAT_(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_(a, b)

#define LOOM_LIBRARY_BODY_(kind, ns, key, m, uid)                                  \
  static void LOOM_CONCAT(loom_library_init_, uid)(::loom::Library&);              \
  static const ::loom::detail::LibraryInit LOOM_CONCAT(loom_library_static_, uid)( \
      kind, #ns, key, &LOOM_CONCAT(loom_library_init_, uid), __FILE__, __LINE__);  \
  void LOOM_CONCAT(loom_library_init_, uid)(::loom::Library & m)

// Defines operators of namespace `ns` (once per namespace in a program).
#define LOOM_LIBRARY(ns, m)                                           \
  LOOM_LIBRARY_BODY_(::loom::Library::Kind::Def, ns, std::nullopt, m, \
                     LOOM_CONCAT(ns##_, __COUNTER__))
// Defines more operators of a namespace (any number of times).
#define LOOM_LIBRARY_FRAGMENT(ns, m)                                       \
  LOOM_LIBRARY_BODY_(::loom::Library::Kind::Fragment, ns, std::nullopt, m, \
                     LOOM_CONCAT(ns##_frag_, __COUNTER__))
// Registers kernels of namespace `ns` for one dispatch key: LOOM_LIBRARY_IMPL(myops, CPU, m).
#define LOOM_LIBRARY_IMPL(ns, KEY, m)                                              \
  LOOM_LIBRARY_BODY_(::loom::Library::Kind::Impl, ns, ::loom::DispatchKey::KEY, m, \
                     LOOM_CONCAT(ns##_##KEY##_, __COUNTER__))

// ---------------------------------------------------------------------------------------------
// Template definitions.
namespace loom {

template <class Ret, class... Args>
KernelFunction KernelFunction::from_unboxed(Ret (*fn)(Args...)) {
  KernelFunction k;
  k.kind_ = Kind::Unboxed;
  k.unboxed_ = reinterpret_cast<void*>(fn);
  k.takes_keys_ = false;
  k.signature_ = std::make_shared<detail::CppSignature>(detail::cpp_signature<Ret, Args...>());
  k.boxed_wrapper_ = [](const KernelFunction& self, const OperatorHandle&, DispatchKeySet keys,
                        Stack* stack) {
    boxed_from_unboxed<false, Ret, Args...>(self, keys, stack, std::index_sequence_for<Args...>{});
  };
  return k;
}

template <class Ret, class... Args>
KernelFunction KernelFunction::from_unboxed(Ret (*fn)(DispatchKeySet, Args...)) {
  KernelFunction k;
  k.kind_ = Kind::Unboxed;
  k.unboxed_ = reinterpret_cast<void*>(fn);
  k.takes_keys_ = true;
  k.signature_ = std::make_shared<detail::CppSignature>(detail::cpp_signature<Ret, Args...>());
  k.boxed_wrapper_ = [](const KernelFunction& self, const OperatorHandle&, DispatchKeySet keys,
                        Stack* stack) {
    boxed_from_unboxed<true, Ret, Args...>(self, keys, stack, std::index_sequence_for<Args...>{});
  };
  return k;
}

template <bool TakesKeys, class Ret, class... Args, size_t... I>
void KernelFunction::boxed_from_unboxed(const KernelFunction& self, DispatchKeySet keys,
                                        Stack* stack, std::index_sequence<I...>) {
  const size_t base = stack->size() - sizeof...(Args);
  auto invoke = [&]() -> Ret {
    if constexpr (TakesKeys) {
      auto fn = reinterpret_cast<Ret (*)(DispatchKeySet, Args...)>(self.unboxed_);
      return fn(keys, detail::ArgTraits<Args>::unbox((*stack)[base + I])...);
    } else {
      auto fn = reinterpret_cast<Ret (*)(Args...)>(self.unboxed_);
      return fn(detail::ArgTraits<Args>::unbox((*stack)[base + I])...);
    }
  };
  if constexpr (std::is_void_v<Ret>) {
    invoke();
    stack->resize(base);
  } else {
    Ret r = invoke();
    stack->resize(base);
    detail::RetTraits<Ret>::push(*stack, std::move(r));
  }
}

template <class Ret, class... Args>
Ret KernelFunction::call(const OperatorHandle& op, DispatchKeySet keys, Args... args) const {
  if (LOOM_LIKELY(kind_ == Kind::Unboxed)) {
    if (takes_keys_) {
      return reinterpret_cast<Ret (*)(DispatchKeySet, Args...)>(unboxed_)(keys, args...);
    }
    return reinterpret_cast<Ret (*)(Args...)>(unboxed_)(args...);
  }
  // A boxed kernel: box the arguments, run it, unbox the returns.
  detail::BorrowedStack borrowed;
  Stack& stack = borrowed.get();
  stack.reserve(sizeof...(Args));
  (stack.push_back(detail::ArgTraits<Args>::box(args)), ...);
  boxed_wrapper_(*this, op, keys, &stack);
  if constexpr (!std::is_void_v<Ret>) return detail::RetTraits<Ret>::pop(stack);
}

namespace detail {
inline DispatchKeySet finalize_keys(DispatchKeySet ks) {
  // No tensor and no device argument (undefined tensors were rejected): the CPU backend.
  if (LOOM_UNLIKELY((ks & DispatchKeySet::backends()).empty())) ks = ks.add(DispatchKey::CPU);
  const LocalDispatchKeySet& tls = tls_dispatch_keys;
  return (ks | tls.included) - tls.excluded;
}

template <class Ret, class... Args>
LOOM_NOINLINE Ret call_recorded(const TypedOperatorHandle<Ret(Args...)>& op, DispatchKeySet ks,
                                Args... args) {
  RecordFunctionGuard guard(op.name(), op.schema(),
                            [&](OpEvent& ev) { (record_input(ev, args), ...); });
  return op.redispatch(ks, args...);
}

template <class... Args>
[[noreturn]] LOOM_NOINLINE void throw_undefined_argument(const OperatorEntry& e,
                                                         const Args&... args) {
  const UndefinedArgument u = first_undefined(args...);
  report_undefined_argument(e, u.position, u.element);
}
}  // namespace detail

template <class Ret, class... Args>
Ret TypedOperatorHandle<Ret(Args...)>::call(Args... args) const {
  const DispatchKeySet arg_keys = detail::keys_of(args...);
  // One predictable branch rejects every undefined Tensor / Tensor[] argument of every operator.
  if (LOOM_UNLIKELY(arg_keys.raw() & detail::kUndefinedTensorBit)) {
    detail::throw_undefined_argument(*entry_, args...);
  }
  DispatchKeySet ks = detail::finalize_keys(arg_keys);
  if (LOOM_UNLIKELY(record_function_active())) {
    return detail::call_recorded<Ret, Args...>(*this, ks, args...);
  }
  return redispatch(ks, args...);
}

template <class Ret, class... Args>
Ret TypedOperatorHandle<Ret(Args...)>::redispatch(DispatchKeySet keys, Args... args) const {
  DispatchKeySet live = keys & detail::entry_non_fallthrough(*entry_);
  const KernelFunction& k = detail::entry_table(*entry_, live.highest());
  if (LOOM_UNLIKELY(!k.is_valid())) detail::report_missing_kernel(*entry_, live);
  return k.template call<Ret, Args...>(*this, keys, args...);
}

template <class Sig>
TypedOperatorHandle<Sig> Dispatcher::find_typed(const std::string& name) {
  OperatorHandle h = find_or_throw(name);
  auto sig = []<class Ret, class... Args>(Ret (*)(Args...)) {
    return detail::cpp_signature<Ret, Args...>();
  }(static_cast<Sig*>(nullptr));
  check_signature(h, sig, "typed call");
  return TypedOperatorHandle<Sig>(h.entry());
}

}  // namespace loom
