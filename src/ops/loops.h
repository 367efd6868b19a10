// Inner loops for pointwise kernels (internal to the ops layer). Each takes the byte strides that
// TensorIterator hands to a Loop1d and picks a contiguous or scalar-broadcast fast path the
// compiler can vectorise, falling back to a strided loop.
#pragma once

#include <cstdint>

namespace loom {

template <class Out, class In, class F>
inline void unary_loop(char** data, const int64_t* s, int64_t n, const F& f) {
  if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
    Out* __restrict o = reinterpret_cast<Out*>(data[0]);
    const In* __restrict a = reinterpret_cast<const In*>(data[1]);
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
  } else if (s[0] == sizeof(Out) && s[1] == 0) {
    Out* __restrict o = reinterpret_cast<Out*>(data[0]);
    const Out r = f(*reinterpret_cast<const In*>(data[1]));
    for (int64_t i = 0; i < n; ++i) o[i] = r;
  } else {
    char* o = data[0];
    const char* a = data[1];
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<Out*>(o + i * s[0]) = f(*reinterpret_cast<const In*>(a + i * s[1]));
    }
  }
}

template <class Out, class A, class B, class F>
inline void binary_loop(char** data, const int64_t* s, int64_t n, const F& f) {
  if (s[0] == sizeof(Out)) {
    Out* __restrict o = reinterpret_cast<Out*>(data[0]);
    if (s[1] == sizeof(A) && s[2] == sizeof(B)) {
      const A* __restrict a = reinterpret_cast<const A*>(data[1]);
      const B* __restrict b = reinterpret_cast<const B*>(data[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
      return;
    }
    if (s[1] == sizeof(A) && s[2] == 0) {
      const A* __restrict a = reinterpret_cast<const A*>(data[1]);
      const B b = *reinterpret_cast<const B*>(data[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b);
      return;
    }
    if (s[1] == 0 && s[2] == sizeof(B)) {
      const A a = *reinterpret_cast<const A*>(data[1]);
      const B* __restrict b = reinterpret_cast<const B*>(data[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(a, b[i]);
      return;
    }
  }
  char* o = data[0];
  const char* a = data[1];
  const char* b = data[2];
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(o + i * s[0]) =
        f(*reinterpret_cast<const A*>(a + i * s[1]), *reinterpret_cast<const B*>(b + i * s[2]));
  }
}

template <class Out, class A, class B, class C, class F>
inline void ternary_loop(char** data, const int64_t* s, int64_t n, const F& f) {
  char* o = data[0];
  const char* a = data[1];
  const char* b = data[2];
  const char* c = data[3];
  if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B) && s[3] == sizeof(C)) {
    Out* __restrict op = reinterpret_cast<Out*>(o);
    const A* __restrict ap = reinterpret_cast<const A*>(a);
    const B* __restrict bp = reinterpret_cast<const B*>(b);
    const C* __restrict cp = reinterpret_cast<const C*>(c);
    for (int64_t i = 0; i < n; ++i) op[i] = f(ap[i], bp[i], cp[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(o + i * s[0]) =
        f(*reinterpret_cast<const A*>(a + i * s[1]), *reinterpret_cast<const B*>(b + i * s[2]),
          *reinterpret_cast<const C*>(c + i * s[3]));
  }
}

}  // namespace loom
