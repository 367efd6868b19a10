// Boxing machinery for the dispatcher (dispatch layer, internal but header-only because typed calls
// and kernel registration instantiate it in user code).
//
// Every schema type has exactly one canonical C++ parameter type, so that a typed call and a kernel
// registered for the same schema always have the same function-pointer type:
//   Tensor -> const Tensor&        Tensor? -> const std::optional<Tensor>&   Tensor[] -> TensorList
//   int -> int64_t                 int? -> std::optional<int64_t>            int[] -> IntArrayRef
//   int[]? -> std::optional<IntArrayRef>      float -> double    float? -> std::optional<double>
//   bool -> bool   Scalar -> const Scalar&   Scalar? -> const std::optional<Scalar>&
//   ScalarType -> DType   ScalarType? -> std::optional<DType>   Device? -> std::optional<Device>
//   str -> std::string_view   str? -> std::optional<std::string_view>
//   Generator? -> const std::optional<Generator>&
// Returns: Tensor, std::tuple<Tensor, ...>, std::vector<Tensor>, void, double, int64_t, bool,
// Scalar.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/dispatch_key.h"
#include "loom/ivalue.h"

namespace loom::detail {

template <class T>
struct ArgTraits {
  static_assert(sizeof(T) == 0,
                "loom dispatcher: this C++ parameter type has no schema type; use the canonical "
                "types listed in loom/detail/boxing.h (e.g. const Tensor&, int64_t, IntArrayRef)");
};

#define LOOM_ARG_TRAITS(CppType, Tag, UnboxExpr, BoxExpr)    \
  template <>                                                \
  struct ArgTraits<CppType> {                                \
    static constexpr const char* tag = Tag;                  \
    static auto unbox(const IValue& v) { return UnboxExpr; } \
    static IValue box(CppType x) { return BoxExpr; }         \
  };

template <>
struct ArgTraits<const Tensor&> {
  static constexpr const char* tag = "Tensor";
  static const Tensor& unbox(const IValue& v) { return v.to_tensor(); }
  static IValue box(const Tensor& x) { return IValue(x); }
};
LOOM_ARG_TRAITS(const std::optional<Tensor>&, "Tensor?",
                v.is_none() ? std::optional<Tensor>() : std::optional<Tensor>(v.to_tensor()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(TensorList, "Tensor[]", TensorList(v.to_tensor_list()),
                IValue(std::vector<Tensor>(x.begin(), x.end())))
LOOM_ARG_TRAITS(int64_t, "int", v.to_int(), IValue(x))
LOOM_ARG_TRAITS(std::optional<int64_t>, "int?",
                v.is_none() ? std::optional<int64_t>() : std::optional<int64_t>(v.to_int()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(IntArrayRef, "int[]", IntArrayRef(v.to_int_list()), IValue(x.vec()))
LOOM_ARG_TRAITS(std::optional<IntArrayRef>, "int[]?",
                v.is_none() ? std::optional<IntArrayRef>()
                            : std::optional<IntArrayRef>(IntArrayRef(v.to_int_list())),
                x ? IValue(x->vec()) : IValue())
LOOM_ARG_TRAITS(double, "float", v.to_double(), IValue(x))
LOOM_ARG_TRAITS(std::optional<double>, "float?",
                v.is_none() ? std::optional<double>() : std::optional<double>(v.to_double()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(bool, "bool", v.to_bool(), IValue(x))
LOOM_ARG_TRAITS(const Scalar&, "Scalar", v.to_scalar(), IValue(x))
LOOM_ARG_TRAITS(const std::optional<Scalar>&, "Scalar?",
                v.is_none() ? std::optional<Scalar>() : std::optional<Scalar>(v.to_scalar()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(DType, "ScalarType", v.to_dtype(), IValue(x))
LOOM_ARG_TRAITS(std::optional<DType>, "ScalarType?",
                v.is_none() ? std::optional<DType>() : std::optional<DType>(v.to_dtype()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(std::optional<Device>, "Device?",
                v.is_none() ? std::optional<Device>() : std::optional<Device>(v.to_device()),
                x ? IValue(*x) : IValue())
LOOM_ARG_TRAITS(std::string_view, "str", std::string_view(v.to_string()), IValue(std::string(x)))
LOOM_ARG_TRAITS(std::optional<std::string_view>, "str?",
                v.is_none() ? std::optional<std::string_view>()
                            : std::optional<std::string_view>(std::string_view(v.to_string())),
                x ? IValue(std::string(*x)) : IValue())
LOOM_ARG_TRAITS(const std::optional<Generator>&, "Generator?",
                v.is_none() ? std::optional<Generator>()
                            : std::optional<Generator>(v.to_generator()),
                x ? IValue(*x) : IValue())
#undef LOOM_ARG_TRAITS

// ---- returns ----
template <class T>
struct RetTraits {
  static_assert(sizeof(T) == 0, "loom dispatcher: unsupported kernel return type");
};
template <>
struct RetTraits<void> {
  static constexpr const char* tag = "()";
  static constexpr size_t count = 0;
};
#define LOOM_RET_TRAITS(CppType, Tag, PopExpr)                                \
  template <>                                                                 \
  struct RetTraits<CppType> {                                                 \
    static constexpr const char* tag = Tag;                                   \
    static constexpr size_t count = 1;                                        \
    static void push(Stack& s, CppType&& x) { s.emplace_back(std::move(x)); } \
    static CppType pop(Stack& s) {                                            \
      const IValue& v = s.back();                                             \
      CppType r = PopExpr;                                                    \
      s.pop_back();                                                           \
      return r;                                                               \
    }                                                                         \
  };
LOOM_RET_TRAITS(Tensor, "Tensor", v.to_tensor())
LOOM_RET_TRAITS(std::vector<Tensor>, "Tensor[]", v.to_tensor_list())
LOOM_RET_TRAITS(double, "float", v.to_double())
LOOM_RET_TRAITS(int64_t, "int", v.to_int())
LOOM_RET_TRAITS(bool, "bool", v.to_bool())
LOOM_RET_TRAITS(Scalar, "Scalar", v.to_scalar())
#undef LOOM_RET_TRAITS

template <class... Ts>
struct RetTraits<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "tuple returns must be tuples of Tensor");
  static constexpr size_t count = sizeof...(Ts);
  static std::string tag_string() {
    std::string s = "(";
    for (size_t i = 0; i < count; ++i) s += i ? ", Tensor" : "Tensor";
    return s + ")";
  }
  static void push(Stack& s, std::tuple<Ts...>&& x) {
    std::apply([&](auto&... t) { (s.emplace_back(std::move(t)), ...); }, x);
  }
  static std::tuple<Ts...> pop(Stack& s) {
    size_t base = s.size() - count;
    auto r = pop_impl(s, base, std::index_sequence_for<Ts...>{});
    s.resize(base);
    return r;
  }
  template <size_t... I>
  static std::tuple<Ts...> pop_impl(Stack& s, size_t base, std::index_sequence<I...>) {
    return std::tuple<Ts...>(s[base + I].to_tensor()...);
  }
};

template <class T>
std::string ret_tag() {
  if constexpr (requires { RetTraits<T>::tag_string(); }) {
    return RetTraits<T>::tag_string();
  } else {
    return RetTraits<T>::tag;
  }
}

// The C++ side of a signature, as schema type tags: used to check kernels and typed calls.
struct CppSignature {
  std::vector<std::string> args;
  std::string ret;
  std::string str() const;
};

template <class Ret, class... Args>
CppSignature cpp_signature() {
  return CppSignature{{ArgTraits<Args>::tag...}, ret_tag<Ret>()};
}

// ---- dispatch keys of arguments ----
// An undefined tensor in a Tensor or Tensor[] argument sets this bit (that of
// DispatchKey::Undefined, which no tensor's key set holds); the dispatcher's entry tests it once
// and names the argument (Note [undefined tensors] in loom/tensor.h). A Tensor? holding an
// undefined tensor is "none".
constexpr uint64_t kUndefinedTensorBit = uint64_t{1} << static_cast<int>(DispatchKey::Undefined);

inline void collect_keys(DispatchKeySet& ks, const Tensor& t) {
  ks = ks | (LOOM_LIKELY(t.defined()) ? t.impl()->key_set()
                                      : DispatchKeySet::from_raw(kUndefinedTensorBit));
}
inline void collect_keys(DispatchKeySet& ks, const std::optional<Tensor>& t) {
  if (t && t->defined()) ks = ks | t->impl()->key_set();
}
inline void collect_keys(DispatchKeySet& ks, TensorList l) {
  for (const Tensor& t : l) collect_keys(ks, t);
}
inline void collect_keys(DispatchKeySet& ks, const std::optional<Device>& d) {
  if (d) ks = ks.add(backend_key(d->type()));
}
template <class T>
inline void collect_keys(DispatchKeySet&, const T&) {}

template <class... Args>
inline DispatchKeySet keys_of(const Args&... args) {
  DispatchKeySet ks;
  (collect_keys(ks, args), ...);
  return ks;
}

// Where the first undefined tensor argument is, for the error message: its position among the
// arguments and, in a Tensor[], its element (-1 otherwise).
struct UndefinedArgument {
  int position = -1;
  int64_t element = -1;
};
inline void find_undefined(UndefinedArgument& r, int position, const Tensor& t) {
  if (r.position < 0 && !t.defined()) r.position = position;
}
inline void find_undefined(UndefinedArgument& r, int position, TensorList l) {
  for (size_t i = 0; r.position < 0 && i < l.size(); ++i) {
    if (!l[i].defined()) {
      r.position = position;
      r.element = static_cast<int64_t>(i);
    }
  }
}
template <class T>
inline void find_undefined(UndefinedArgument&, int, const T&) {}

template <class... Args>
UndefinedArgument first_undefined(const Args&... args) {
  UndefinedArgument r;
  int position = 0;
  (find_undefined(r, position++, args), ...);
  return r;
}

}  // namespace loom::detail
