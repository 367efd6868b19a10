// CPU kernels of the linalg family (src/ops/linalg.cpp holds the schemas, the shape functions and
// the derivatives): mm, bmm, addmm and dot as batched products on OpenBLAS or loom's sgemm
// (src/ops/blas.h); float16/bfloat16 computed in float32; integer dtypes in a plain loop.
#include <cblas.h>

#include <climits>
#include <vector>

#include "loom/parallel.h"
#include "ops/blas.h"
#include "ops/cpu/linalg_kernels.h"
#include "ops/cuda/gemm.h"
#include "ops/op_call.h"
#include "ops/shapes.h"
#include "ops/structured.h"

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

}  // namespace

// out[b] = alpha * a[b] @ b[b] + beta * out[b] for every batch b. a: [B, n, k], b: [B, k, m], out a
// fresh contiguous [B, n, m] of the same dtype, prefilled when beta != 0. All on the CPU.
void batched_product(const Tensor& out, Tensor a, Tensor b, const Scalar& alpha, const Scalar& beta,
                     const char* op) {
  if (out.is_cuda()) {  // linear's gradient sink on a GPU (cuBLASLt)
    cuda_ops::batched_product(out, a, b, alpha, beta, op);
    return;
  }
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

namespace {

void mm_loop(const Tensor& out, const Tensor& self, const Tensor& mat2) {
  batched_product(out.unsqueeze(0), self.unsqueeze(0), mat2.unsqueeze(0), 1, 0, "mm");
}

void bmm_loop(const Tensor& out, const Tensor& self, const Tensor& mat2) {
  batched_product(out, self, mat2, 1, 0, "bmm");
}

void addmm_loop(const Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                const Scalar& beta, const Scalar& alpha) {
  const int64_t n = out.size(0), m = out.size(1);
  if (!scalar_is_zero(beta)) out.copy_(self.expand({n, m}));
  batched_product(out.unsqueeze(0), mat1.unsqueeze(0), mat2.unsqueeze(0), alpha, beta, "addmm");
}

template <class T>
T loop_dot(int64_t n, const T* x, int64_t sx, const T* y, int64_t sy) {
  opmath_t<T> acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<opmath_t<T>>(x[i * sx]) * y[i * sy];
  return static_cast<T>(acc);
}

void dot_loop(const Tensor& out, const Tensor& self, const Tensor& other) {
  const DType dt = self.dtype();
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
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      *out.data_ptr<T>() =
          loop_dot<T>(n, x.data_ptr<T>(), x.stride(0), y.data_ptr<T>(), y.stride(0));
    }
  };
  LOOM_DISPATCH_ALL_TYPES(dt, "dot", [&] { run(scalar_t{}); });
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&mm_shape, &mm_loop>::register_cpu(m, "mm");
  Structured<&bmm_shape, &bmm_loop>::register_cpu(m, "bmm");
  Structured<&addmm_shape, &addmm_loop>::register_cpu(m, "addmm");
  Structured<&dot_shape, &dot_loop>::register_cpu(m, "dot");
}

}  // namespace loom
