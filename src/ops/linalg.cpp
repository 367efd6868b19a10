// Linear algebra: mm, bmm, addmm and dot are CPU and Meta kernels; matmul and linear are
// CompositeImplicit (they decompose into those and views, which is what autograd and the compiler
// see). float32/float64 go to OpenBLAS; float16/bfloat16 are computed in float32; integer dtypes
// use a plain loop (bool is rejected, as in PyTorch).
#include <cblas.h>

#include <climits>
#include <vector>

#include "blas.h"
#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "op_call.h"

namespace loom {
namespace {

// Note [Passing strided operands to gemm]
// BLAS reads a matrix through one leading dimension: either rows are unit-stride (NoTrans, ld = row
// stride) or columns are (Trans, ld = column stride), and ld must be at least the length of the
// unit-stride run. Transposed views (`w.t()` in linear), column slices of a wider matrix and
// contiguous matrices all qualify and go to gemm without a copy; anything else (both strides > 1,
// expanded rows) is made contiguous first. The stride of a size-1 dimension is meaningless, so it
// never disqualifies a matrix. Products are split across loom's pool by blas::gemm (Note [One pool
// for BLAS] in blas.h); batches are looped serially and each product is split.
struct BlasLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= std::max<int64_t>(1, cols))) {
    return {true, false, rows == 1 ? std::max<int64_t>(1, cols) : s0};
  }
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= std::max<int64_t>(1, rows))) {
    return {true, true, cols == 1 ? std::max<int64_t>(1, rows) : s1};
  }
  return {};
}

// The last two dims of t as a BLAS operand; `t` is replaced by a contiguous copy when needed.
BlasLayout blas_operand(Tensor& t) {
  const int64_t d = t.dim();
  BlasLayout l = blas_layout(t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1));
  if (l.ok) return l;
  t = t.contiguous();
  return blas_layout(t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1));
}

void check_blas_int(const char* op, std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    LOOM_CHECK(v <= INT_MAX, "[", op, "] matrix dimension or stride ", v,
               " exceeds what 32-bit BLAS accepts (", INT_MAX, ")");
  }
}

// c[n, m] (row-major, leading dimension ldc) = alpha * a @ b + beta * c; beta == 0 never reads c.
template <class T>
void blas_gemm(int64_t n, int64_t m, int64_t k, T alpha, const T* a, BlasLayout la, const T* b,
               BlasLayout lb, T beta, T* c, int64_t ldc) {
  blas::gemm(la.trans, lb.trans, n, m, k, alpha, a, la.ld, b, lb.ld, beta, c, ldc);
}

// The same product with a plain loop over any strides (integer dtypes), rows [i0, i1) only.
template <class T>
void loop_gemm(int64_t i0, int64_t i1, int64_t m, int64_t k, T alpha, const T* a, int64_t sa0,
               int64_t sa1, const T* b, int64_t sb0, int64_t sb1, T beta, T* c, int64_t ldc) {
  std::vector<T> acc(static_cast<size_t>(m));
  for (int64_t i = i0; i < i1; ++i) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t p = 0; p < k; ++p) {
      const T x = a[i * sa0 + p * sa1];
      const T* brow = b + p * sb0;
      for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] += x * brow[j * sb1];
    }
    T* crow = c + i * ldc;
    for (int64_t j = 0; j < m; ++j) {
      const T v = static_cast<T>(alpha * acc[static_cast<size_t>(j)]);
      crow[j] = beta == T(0) ? v : static_cast<T>(v + beta * crow[j]);
    }
  }
}

bool scalar_is_zero(const Scalar& s) {
  return s.to_double() == 0.0;
}

// out[b] = alpha * a[b] @ b[b] + beta * out[b] for every batch b. a: [B, n, k], b: [B, k, m], out a
// fresh contiguous [B, n, m] of the same dtype, prefilled when beta != 0. All on the CPU.
void batched_product(const Tensor& out, Tensor a, Tensor b, const Scalar& alpha, const Scalar& beta,
                     const char* op) {
  const int64_t B = out.size(0), n = out.size(1), m = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[", op, "] is not implemented for bool tensors");
  LOOM_CHECK_TYPE(is_floating(dt) || (!alpha.is_floating() && !beta.is_floating()), "[", op,
                  "] for integral input tensors, arguments alpha and beta must not be floating "
                  "point numbers (got ",
                  alpha, " and ", beta, ")");
  if (k == 0) {  // an empty sum: the product part is zero
    if (scalar_is_zero(beta))
      out.zero_();
    else if (!(beta == Scalar(1)))
      mul_(out, beta);
    return;
  }
  if (is_reduced_float(dt)) {
    Tensor out_f = scalar_is_zero(beta) ? empty_tensor(out.sizes(), kFloat32) : out.to(kFloat32);
    batched_product(out_f, a.to(kFloat32), b.to(kFloat32), alpha, beta, op);
    out.copy_(out_f);
    return;
  }
  if (dt == kFloat32 || dt == kFloat64) {
    const BlasLayout la = blas_operand(a), lb = blas_operand(b);
    check_blas_int(op, {n, m, k, la.ld, lb.ld});
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* pa = static_cast<const T*>(a.data_ptr());
      const T* pb = static_cast<const T*>(b.data_ptr());
      T* pc = static_cast<T*>(out.data_ptr());
      const T al = alpha.to<T>(), be = beta.to<T>();
      for (int64_t i = 0; i < B; ++i) {
        blas_gemm<T>(n, m, k, al, pa + i * a.stride(0), la, pb + i * b.stride(0), lb, be,
                     pc + i * n * m, m);
      }
    };
    if (dt == kFloat32)
      run(float{});
    else
      run(double{});
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* pa = static_cast<const T*>(a.data_ptr());
      const T* pb = static_cast<const T*>(b.data_ptr());
      T* pc = static_cast<T*>(out.data_ptr());
      const T al = alpha.to<T>(), be = beta.to<T>();
      // No BLAS here, so the rows of all batches can share the pool.
      const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, m * k));
      parallel_for(0, B * n, grain, [&](int64_t r0, int64_t r1) {
        while (r0 < r1) {
          const int64_t bi = r0 / n, i0 = r0 % n, i1 = std::min(n, i0 + (r1 - r0));
          loop_gemm<T>(i0, i1, m, k, al, pa + bi * a.stride(0), a.stride(1), a.stride(2),
                       pb + bi * b.stride(0), b.stride(1), b.stride(2), be, pc + bi * n * m, m);
          r0 += i1 - i0;
        }
      });
    }
  };
  LOOM_DISPATCH_ALL_TYPES(dt, op, [&] { run(scalar_t{}); });
}

void check_same_dtype(const char* op, const Tensor& a, const char* an, const Tensor& b,
                      const char* bn) {
  LOOM_CHECK_TYPE(a.dtype() == b.dtype(), "[", op, "] expected ", an, " and ", bn,
                  " to have the same dtype, but got ", an, ": ", a.dtype(), " and ", bn, ": ",
                  b.dtype());
  LOOM_CHECK(a.device() == b.device(), "[", op, "] expected ", an, " and ", bn,
             " to be on the same device, but got ", an, " on ", a.device(), " and ", bn, " on ",
             b.device());
}

void check_matrix(const char* op, const Tensor& t, const char* name, int64_t want_dim) {
  check_defined(t, op, name);
  LOOM_CHECK(t.dim() == want_dim, "[", op, "] expected ", name, " to be a ", want_dim,
             "-D tensor but got shape ", t.sizes(), " (", t.dim(), "-D)");
}

Tensor mm_kernel(const Tensor& self, const Tensor& mat2) {
  check_matrix("mm", self, "self", 2);
  check_matrix("mm", mat2, "mat2", 2);
  LOOM_CHECK(self.size(1) == mat2.size(0), "[mm] mat1 and mat2 shapes cannot be multiplied (",
             self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype("mm", self, "mat1", mat2, "mat2");
  Tensor out = empty_tensor({self.size(0), mat2.size(1)}, self.dtype(), self.device());
  if (out.is_meta()) return out;
  batched_product(out.unsqueeze(0), self.unsqueeze(0), mat2.unsqueeze(0), 1, 0, "mm");
  return out;
}

Tensor bmm_kernel(const Tensor& self, const Tensor& mat2) {
  check_matrix("bmm", self, "self", 3);
  check_matrix("bmm", mat2, "mat2", 3);
  LOOM_CHECK(self.size(0) == mat2.size(0),
             "[bmm] expected batch1 and batch2 to have the same "
             "batch size, but got shapes ",
             self.sizes(), " and ", mat2.sizes());
  LOOM_CHECK(self.size(2) == mat2.size(1), "[bmm] batch1 and batch2 shapes cannot be multiplied (",
             self.sizes(), " and ", mat2.sizes(), ")");
  check_same_dtype("bmm", self, "batch1", mat2, "batch2");
  Tensor out =
      empty_tensor({self.size(0), self.size(1), mat2.size(2)}, self.dtype(), self.device());
  if (out.is_meta()) return out;
  batched_product(out, self, mat2, 1, 0, "bmm");
  return out;
}

Tensor addmm_kernel(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta,
                    const Scalar& alpha) {
  check_defined(self, "addmm", "self");
  check_matrix("addmm", mat1, "mat1", 2);
  check_matrix("addmm", mat2, "mat2", 2);
  LOOM_CHECK(mat1.size(1) == mat2.size(0), "[addmm] mat1 and mat2 shapes cannot be multiplied (",
             mat1.size(0), "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype("addmm", mat1, "mat1", mat2, "mat2");
  check_same_dtype("addmm", self, "self", mat1, "mat1");
  const int64_t n = mat1.size(0), m = mat2.size(1);
  bool broadcastable = self.dim() <= 2;
  for (int64_t d = 0; broadcastable && d < self.dim(); ++d) {
    const int64_t want = d == self.dim() - 1 ? m : n;
    broadcastable = self.size(d) == want || self.size(d) == 1;
  }
  LOOM_CHECK(broadcastable, "[addmm] self of shape ", self.sizes(),
             " cannot be broadcast to the result shape [", n, ", ", m, "] of mat1 ", mat1.sizes(),
             " @ mat2 ", mat2.sizes());
  Tensor out = empty_tensor({n, m}, mat1.dtype(), mat1.device());
  if (out.is_meta()) return out;
  if (!scalar_is_zero(beta)) out.copy_(self.expand({n, m}));
  batched_product(out.unsqueeze(0), mat1.unsqueeze(0), mat2.unsqueeze(0), alpha, beta, "addmm");
  return out;
}

template <class T>
T loop_dot(int64_t n, const T* x, int64_t sx, const T* y, int64_t sy) {
  opmath_t<T> acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<opmath_t<T>>(x[i * sx]) * y[i * sy];
  return static_cast<T>(acc);
}

Tensor dot_kernel(const Tensor& self, const Tensor& other) {
  check_defined(self, "dot", "self");
  check_defined(other, "dot", "other");
  LOOM_CHECK(self.dim() == 1 && other.dim() == 1, "[dot] 1-D tensors expected, but got shapes ",
             self.sizes(), " and ", other.sizes());
  LOOM_CHECK(self.numel() == other.numel(),
             "[dot] expected both vectors to have the same number "
             "of elements, but got shapes ",
             self.sizes(), " and ", other.sizes());
  check_same_dtype("dot", self, "self", other, "other");
  const DType dt = self.dtype();
  LOOM_CHECK_TYPE(dt != kBool, "[dot] is not implemented for bool tensors");
  Tensor out = empty_tensor({}, dt, self.device());
  if (out.is_meta()) return out;
  Tensor x = self.stride(0) >= 1 ? self : self.contiguous();
  Tensor y = other.stride(0) >= 1 ? other : other.contiguous();
  const int64_t n = x.numel();
  if (dt == kFloat32 || dt == kFloat64) {
    check_blas_int("dot", {n, x.stride(0), y.stride(0)});
    if (dt == kFloat32) {
      *out.data_ptr<float>() =
          cblas_sdot(static_cast<int>(n), x.data_ptr<float>(), static_cast<int>(x.stride(0)),
                     y.data_ptr<float>(), static_cast<int>(y.stride(0)));
    } else {
      *out.data_ptr<double>() =
          cblas_ddot(static_cast<int>(n), x.data_ptr<double>(), static_cast<int>(x.stride(0)),
                     y.data_ptr<double>(), static_cast<int>(y.stride(0)));
    }
    return out;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      *out.data_ptr<T>() =
          loop_dot<T>(n, x.data_ptr<T>(), x.stride(0), y.data_ptr<T>(), y.stride(0));
    }
  };
  LOOM_DISPATCH_ALL_TYPES(dt, "dot", [&] { run(scalar_t{}); });
  return out;
}

std::vector<int64_t> matmul_batch_shape(IntArrayRef a, IntArrayRef b, const Tensor& self,
                                        const Tensor& other) {
  const size_t nd = std::max(a.size(), b.size());
  std::vector<int64_t> out(nd, 1);
  for (size_t i = 0; i < nd; ++i) {
    const int64_t x = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const int64_t y = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    LOOM_CHECK(x == y || x == 1 || y == 1, "[matmul] batch dimensions of shapes ", self.sizes(),
               " and ", other.sizes(), " cannot be broadcast (", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// torch.matmul: 1-D x 1-D is a dot product; a 1-D argument is a row (left) or column (right) vector
// that is removed from the result; leading batch dimensions broadcast.
Tensor matmul_composite(const Tensor& self, const Tensor& other) {
  check_defined(self, "matmul", "self");
  check_defined(other, "matmul", "other");
  const int64_t d1 = self.dim(), d2 = other.dim();
  LOOM_CHECK(d1 >= 1 && d2 >= 1, "[matmul] both arguments need to be at least 1-D, but got shapes ",
             self.sizes(), " (", d1, "-D) and ", other.sizes(), " (", d2, "-D)");
  const int64_t k1 = self.size(-1), k2 = other.size(d2 >= 2 ? -2 : -1);
  LOOM_CHECK(k1 == k2, "[matmul] shapes ", self.sizes(), " and ", other.sizes(),
             " cannot be multiplied (", k1, " != ", k2, ")");
  if (d1 == 1 && d2 == 1) return dot(self, other);
  if (d1 == 2 && d2 == 1) return mm(self, other.unsqueeze(1)).squeeze(1);
  if (d1 == 1 && d2 == 2) return mm(self.unsqueeze(0), other).squeeze(0);
  if (d1 == 2 && d2 == 2) return mm(self, other);
  if (d1 >= 3 && d2 <= 2) {
    // Fold the batch into the rows: one mm instead of a bmm over a broadcast matrix.
    std::vector<int64_t> out_shape(self.sizes().begin(), self.sizes().end() - 1);
    Tensor rhs = d2 == 1 ? other.unsqueeze(1) : other;
    int64_t rows = 1;
    for (int64_t s : out_shape) rows *= s;
    if (d2 == 2) out_shape.push_back(other.size(1));
    return mm(self.reshape({rows, k1}), rhs).view(out_shape);
  }
  Tensor a = d1 == 1 ? self.unsqueeze(0) : self;
  Tensor b = d2 == 1 ? other.unsqueeze(1) : other;
  const int64_t n = a.size(-2), m = b.size(-1);
  const IntArrayRef batch_a = a.sizes().slice(0, static_cast<size_t>(a.dim() - 2));
  const IntArrayRef batch_b = b.sizes().slice(0, static_cast<size_t>(b.dim() - 2));
  std::vector<int64_t> batch = matmul_batch_shape(batch_a, batch_b, self, other);
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  std::vector<int64_t> ea = batch, eb = batch, out_shape = batch;
  ea.insert(ea.end(), {n, k1});
  eb.insert(eb.end(), {k1, m});
  if (d1 > 1) out_shape.push_back(n);
  if (d2 > 1) out_shape.push_back(m);
  Tensor r = bmm(a.expand(ea).reshape({nb, n, k1}), b.expand(eb).reshape({nb, k1, m}));
  return r.view(out_shape);
}

// _linear: input [n, in] @ weight [out, in]^T + bias, below autograd (linear checked the shapes).
Tensor linear_2d_kernel(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  return bias.has_value() && bias->defined() ? addmm(*bias, input, weight.t()) : mm(input, weight.t());
}

Tensor linear_2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  LOOM_CALL_OP("loom::_linear", Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&),
               input, weight, bias);
}

// input [..., in] @ weight[out, in]^T + bias.
Tensor linear_composite(const Tensor& input, const Tensor& weight,
                        const std::optional<Tensor>& bias_opt) {
  check_defined(input, "linear", "input");
  check_defined(weight, "linear", "weight");
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  LOOM_CHECK(input.dim() >= 1,
             "[linear] expected input to have at least 1 dimension but got a "
             "0-D tensor");
  LOOM_CHECK(weight.dim() == 1 || weight.dim() == 2,
             "[linear] expected weight to be 1-D or 2-D "
             "([out_features, in_features]) but got shape ",
             weight.sizes());
  LOOM_CHECK(input.size(-1) == weight.size(-1), "[linear] input of shape ", input.sizes(),
             " and weight of shape ", weight.sizes(), " are incompatible: in_features is ",
             weight.size(-1), " but the input's last dimension is ", input.size(-1));
  if (weight.dim() == 1) {
    Tensor out = matmul(input, weight);
    return has_bias ? add(out, *bias_opt) : out;
  }
  // A 2-D weight goes through _linear on a 2-D input (one node with its own derivative, which can
  // add the weight's gradient straight into weight.grad(): Note [Accumulating into .grad]).
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().end() - 1);
  out_shape.push_back(weight.size(0));
  const Tensor rows = input.dim() == 2 ? input : input.reshape({-1, input.size(-1)});
  Tensor out = linear_2d(rows, weight, has_bias ? bias_opt : std::nullopt);
  return input.dim() == 2 ? out : out.view(out_shape);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def("mm(Tensor self, Tensor mat2) -> Tensor");
  m.def("bmm(Tensor self, Tensor mat2) -> Tensor");
  m.def("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor");
  m.def("dot(Tensor self, Tensor tensor) -> Tensor");
  for (DispatchKey k : {DispatchKey::CPU, DispatchKey::Meta}) {
    m.impl("mm", k, mm_kernel);
    m.impl("bmm", k, bmm_kernel);
    m.impl("addmm", k, addmm_kernel);
    m.impl("dot", k, dot_kernel);
  }
  m.def("matmul(Tensor self, Tensor other) -> Tensor", matmul_composite);
  m.def("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", linear_composite);
  m.def("_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.impl("_linear", DispatchKey::CompositeExplicit, linear_2d_kernel);
}

using MatSig = Tensor(const Tensor&, const Tensor&);

Tensor mm(const Tensor& self, const Tensor& mat2) {
  LOOM_CALL_OP("loom::mm", MatSig, self, mat2);
}
Tensor bmm(const Tensor& self, const Tensor& mat2) {
  LOOM_CALL_OP("loom::bmm", MatSig, self, mat2);
}
Tensor matmul(const Tensor& self, const Tensor& other) {
  LOOM_CALL_OP("loom::matmul", MatSig, self, other);
}
Tensor addmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta,
             const Scalar& alpha) {
  LOOM_CALL_OP("loom::addmm",
               Tensor(const Tensor&, const Tensor&, const Tensor&, const Scalar&, const Scalar&),
               self, mat1, mat2, beta, alpha);
}
Tensor linear(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  LOOM_CALL_OP("loom::linear", Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&),
               input, weight, bias);
}
Tensor dot(const Tensor& self, const Tensor& other) {
  LOOM_CALL_OP("loom::dot", MatSig, self, other);
}

// ---- derivatives ----

namespace {
using autograd::BackwardContext;
using autograd::GradList;

// Whether a 2-D input was laid out transposed (column-major), like `weight.t()` in linear. Its
// gradient is then computed transposed too, so that it comes out in the input's layout: the
// gradient of the weight behind the view is then contiguous, and accumulating it into .grad() is a
// plain streaming add rather than a strided transpose (PyTorch's mm_mat*_backward do the same).
bool transposed_layout(const BackwardContext& c, size_t slot) {
  IntArrayRef sz = c.input_sizes(slot), st = c.input_strides(slot);
  return sz.size() == 2 && sz[0] > 1 && sz[1] > 1 && st[0] == 1 && st[1] == sz[0];
}

// d(A B)/dA = G B^T, as [n, k], laid out like A.
Tensor mm_mat1_backward(const BackwardContext& c, const Tensor& g, const Tensor& mat2, size_t slot) {
  return transposed_layout(c, slot) ? mm(mat2, g.t()).t() : mm(g, mat2.t());
}
// d(A B)/dB = A^T G, as [k, m], laid out like B.
Tensor mm_mat2_backward(const BackwardContext& c, const Tensor& g, const Tensor& mat1, size_t slot) {
  return transposed_layout(c, slot) ? mm(g.t(), mat1).t() : mm(mat1.t(), g);
}
}  // namespace

LOOM_DERIVATIVES(m) {
  // C = A B: dA = dC B^T, dB = A^T dC.
  m.def("mm", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (c.needs(0)) r[0] = mm_mat1_backward(c, g, c.input(1), 0);
    if (c.needs(1)) r[1] = mm_mat2_backward(c, g, c.input(0), 1);
    return r;
  });
  m.def("bmm", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (c.needs(0)) r[0] = bmm(g, c.input(1).transpose(1, 2));
    if (c.needs(1)) r[1] = bmm(c.input(0).transpose(1, 2), g);
    return r;
  });
  // out = beta * self + alpha * (mat1 @ mat2)
  m.def("addmm", autograd::saves({1, 2}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    const double beta = c.scalar_arg(3).to<double>(), alpha = c.scalar_arg(4).to<double>();
    GradList r(3);
    if (c.needs(0)) r[0] = beta == 1.0 ? g : mul(g, beta);
    if (c.needs(1)) {
      r[1] = mm_mat1_backward(c, g, c.input(2), 1);
      if (alpha != 1.0) r[1] = mul(r[1], alpha);
    }
    if (c.needs(2)) {
      r[2] = mm_mat2_backward(c, g, c.input(1), 2);
      if (alpha != 1.0) r[2] = mul(r[2], alpha);
    }
    return r;
  });
  // _linear (2-D input): d input = G W, d weight = G^T input, d bias = G summed to the bias. The
  // weight's gradient may be added straight into weight.grad() (Note [Accumulating into .grad]).
  m.def("_linear", autograd::with_grad_sinks(autograd::saves({0, 1})), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(3);
    if (c.needs(0)) r[0] = mm(g, c.input(1));
    if (c.needs(1)) {
      const Tensor sink = c.grad_sink(1);
      if (sink.defined()) {
        batched_product(sink.unsqueeze(0), g.t().unsqueeze(0), c.input(0).unsqueeze(0), 1, 1, "linear");
        sink.storage()->bump_version();
        r[1] = sink;
      } else {
        r[1] = mm(g.t(), c.input(0));
      }
    }
    if (c.needs(2)) r[2] = autograd::sum_to(g, c.input_sizes(2));
    return r;
  });
  m.def("dot", autograd::saves({0, 1}), [](const BackwardContext& c) -> GradList {
    const Tensor& g = c.grad(0);
    GradList r(2);
    if (c.needs(0)) r[0] = mul(g, c.input(1));
    if (c.needs(1)) r[1] = mul(g, c.input(0));
    return r;
  });
}

}  // namespace loom
