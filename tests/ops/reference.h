// An independent float64 reference for operator tests: a dense row-major array with naive loops.
// Nothing here calls loom's kernels; values are read out of loom tensors with to_vector<double>.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "loom/ops.h"

namespace loom::testing {

struct Ref {
  std::vector<int64_t> shape;
  std::vector<double> v;

  Ref() = default;
  Ref(std::vector<int64_t> s, std::vector<double> values)
      : shape(std::move(s)), v(std::move(values)) {}
  static Ref of(const Tensor& t) { return Ref(t.sizes().vec(), to_vector<double>(t)); }
  static Ref filled(std::vector<int64_t> s, double x) {
    int64_t n = 1;
    for (auto d : s) n *= d;
    return Ref(std::move(s), std::vector<double>(static_cast<size_t>(n), x));
  }
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  std::vector<int64_t> strides() const {
    std::vector<int64_t> st(shape.size(), 1);
    for (int64_t d = dim() - 2; d >= 0; --d)
      st[static_cast<size_t>(d)] =
          st[static_cast<size_t>(d + 1)] * shape[static_cast<size_t>(d + 1)];
    return st;
  }
  // Index <-> coordinates.
  std::vector<int64_t> coords(int64_t i) const {
    std::vector<int64_t> c(shape.size());
    for (int64_t d = dim() - 1; d >= 0; --d) {
      c[static_cast<size_t>(d)] = i % shape[static_cast<size_t>(d)];
      i /= shape[static_cast<size_t>(d)];
    }
    return c;
  }
  int64_t offset(const std::vector<int64_t>& c) const {
    int64_t off = 0;
    auto st = strides();
    for (size_t d = 0; d < c.size(); ++d) off += c[d] * st[d];
    return off;
  }
  double at(const std::vector<int64_t>& c) const { return v[static_cast<size_t>(offset(c))]; }
  double& at(const std::vector<int64_t>& c) { return v[static_cast<size_t>(offset(c))]; }
};

// Elementwise map.
inline Ref ref_map(const Ref& a, const std::function<double(double)>& f) {
  Ref r = a;
  for (auto& x : r.v) x = f(x);
  return r;
}

// Broadcast shape of two shapes (numpy rules).
inline std::vector<int64_t> ref_broadcast_shape(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b) {
  size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> out(nd);
  for (size_t i = 0; i < nd; ++i) {
    int64_t x = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t y = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Value of `a` at output coordinates `c` of a broadcast result.
inline double ref_broadcast_at(const Ref& a, const std::vector<int64_t>& c) {
  std::vector<int64_t> ac(a.shape.size());
  size_t off = c.size() - a.shape.size();
  for (size_t i = 0; i < a.shape.size(); ++i) ac[i] = a.shape[i] == 1 ? 0 : c[off + i];
  return a.at(ac);
}

inline Ref ref_map2(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Ref r = Ref::filled(ref_broadcast_shape(a.shape, b.shape), 0);
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto c = r.coords(i);
    r.v[static_cast<size_t>(i)] = f(ref_broadcast_at(a, c), ref_broadcast_at(b, c));
  }
  return r;
}

inline Ref ref_map3(const Ref& a, const Ref& b, const Ref& c3,
                    const std::function<double(double, double, double)>& f) {
  Ref r = Ref::filled(ref_broadcast_shape(ref_broadcast_shape(a.shape, b.shape), c3.shape), 0);
  for (int64_t i = 0; i < r.numel(); ++i) {
    auto c = r.coords(i);
    r.v[static_cast<size_t>(i)] =
        f(ref_broadcast_at(a, c), ref_broadcast_at(b, c), ref_broadcast_at(c3, c));
  }
  return r;
}

// Reduces over `dims` (empty = all) with a function over the reduced values in index order.
inline Ref ref_reduce(const Ref& a, std::vector<int64_t> dims, bool keepdim,
                      const std::function<double(const std::vector<double>&)>& f) {
  const int64_t nd = a.dim();
  std::vector<bool> red(static_cast<size_t>(nd), dims.empty());
  for (auto d : dims) red[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  std::vector<int64_t> out_shape, keep_shape;
  for (int64_t d = 0; d < nd; ++d) {
    keep_shape.push_back(red[static_cast<size_t>(d)] ? 1 : a.shape[static_cast<size_t>(d)]);
    if (!red[static_cast<size_t>(d)]) out_shape.push_back(a.shape[static_cast<size_t>(d)]);
  }
  Ref keep = Ref::filled(keep_shape, 0);
  std::vector<std::vector<double>> groups(static_cast<size_t>(keep.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto c = a.coords(i);
    for (int64_t d = 0; d < nd; ++d) {
      if (red[static_cast<size_t>(d)]) c[static_cast<size_t>(d)] = 0;
    }
    groups[static_cast<size_t>(keep.offset(c))].push_back(a.v[static_cast<size_t>(i)]);
  }
  for (size_t g = 0; g < groups.size(); ++g) keep.v[g] = f(groups[g]);
  if (!keepdim) keep.shape = out_shape;
  return keep;
}

// Naive matrix product of 2-D arrays.
inline Ref ref_mm(const Ref& a, const Ref& b) {
  int64_t n = a.shape[0], k = a.shape[1], m = b.shape[1];
  Ref r = Ref::filled({n, m}, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += a.v[static_cast<size_t>(i * k + p)] * b.v[static_cast<size_t>(p * m + j)];
      r.v[static_cast<size_t>(i * m + j)] = s;
    }
  return r;
}

}  // namespace loom::testing
