// CUDA kernels of the linalg family: mm, bmm, addmm and _linear (dot is a reduction, in
// reduce_cuda.cpp). Floating products run on cuBLASLt (cublas_lt.cpp), with linear's and addmm's
// vector bias fused as the bias epilogue; integer products and empty inner dimensions run a plain
// loop (linalg_kernels.cu). matmul and linear are composite and reach these. Shapes and errors come
// from the shape functions in linalg.cpp, as on the CPU.
#include <algorithm>

#include "loom/cuda.h"
#include "loom/warning.h"
#include "ops/cuda/cublas_lt.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/linalg_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::GemmOperand;

// The last two dims of t as a BLAS operand (Note [Passing strided operands to gemm] in
// cpu/linalg_kernels.cpp, the same rule); `t` is replaced by a contiguous copy when needed.
struct Layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};
Layout layout_of(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= std::max<int64_t>(1, cols))) {
    return {true, false, rows == 1 ? std::max<int64_t>(1, cols) : s0};
  }
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= std::max<int64_t>(1, rows))) {
    return {true, true, cols == 1 ? std::max<int64_t>(1, rows) : s1};
  }
  return {};
}
GemmOperand operand_of(Tensor& t) {
  Layout l = layout_of(t.size(1), t.size(2), t.stride(1), t.stride(2));
  if (!l.ok || t.stride(0) < 0) {
    t = t.contiguous();
    l = layout_of(t.size(1), t.size(2), t.stride(1), t.stride(2));
  }
  GemmOperand o;
  o.data = t.data_ptr();
  o.trans = l.trans;
  o.ld = l.ld;
  o.batch_stride = t.size(0) > 1 ? t.stride(0) : 0;
  return o;
}

bool is_zero(const Scalar& s) {
  return s.to_double() == 0.0;
}

// The same dtype checks as the CPU's batched_product, with its messages.
void check_product_dtypes(DType dt, const Scalar& alpha, const Scalar& beta, const char* op) {
  LOOM_CHECK_TYPE(dt != kBool, "[", op, "] is not implemented for bool tensors");
  LOOM_CHECK_TYPE(is_floating(dt) || (!alpha.is_floating() && !beta.is_floating()), "[", op,
                  "] for integral input tensors, arguments alpha and beta must not be floating "
                  "point numbers (got ",
                  alpha, " and ", beta, ")");
}

void plain_product(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha,
                   const Scalar& beta, const char* op) {
  cuda_ops::PlainGemmArgs g;
  g.batch = out.size(0);
  g.n = out.size(1);
  g.m = out.size(2);
  g.k = a.size(2);
  g.a = static_cast<const char*>(a.data_ptr());
  g.a_batch = a.stride(0), g.a_row = a.stride(1), g.a_col = a.stride(2);
  g.b = static_cast<const char*>(b.data_ptr());
  g.b_batch = b.stride(0), g.b_row = b.stride(1), g.b_col = b.stride(2);
  g.c = static_cast<char*>(out.data_ptr());
  g.c_batch = out.stride(0), g.c_row = out.stride(1);
  g.dtype = cuda_ops::code_of(out.dtype());
  g.alpha = alpha.to_double();
  g.beta = beta.to_double();
  if (!is_floating(out.dtype())) {
    g.alpha_i = alpha.to<int64_t>();
    g.beta_i = beta.to<int64_t>();
  }
  g.beta_zero = is_zero(beta);
  cuda_ops::check_launch(cuda_ops::launch_plain_gemm(g, cuda_ops::stream_of(out)), op);
}

// Whether `bias` (m elements, out's dtype) can ride in the epilogue as a contiguous, aligned
// vector; float64 products take no epilogue (Note [Row-major products on cuBLASLt]).
bool epilogue_bias(const Tensor& bias, int64_t m, DType dt, Tensor* vec) {
  if (dt == kFloat64 || bias.dtype() != dt || bias.numel() != m) return false;
  if (bias.dim() > 2 || (bias.dim() == 2 && bias.size(0) != 1)) return false;
  if (bias.dim() == 0 && m != 1) return false;
  Tensor v = bias.reshape({m});
  if (!v.is_contiguous() || reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 != 0) v = v.clone();
  *vec = v;
  return true;
}

// out[b] = alpha * a[b] @ b[b] + beta * out[b] (+ bias, a vector of m elements, when defined; then
// beta is 0). a: [B, n, k], b: [B, k, m], out: contiguous [B, n, m], on one device.
void product(const Tensor& out, Tensor a, Tensor b, const Scalar& alpha, const Scalar& beta,
             const char* op, const Tensor& bias = Tensor()) {
  const int64_t B = out.size(0), n = out.size(1), m = out.size(2), k = a.size(2);
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  check_product_dtypes(dt, alpha, beta, op);
  cuda_ops::KernelGuard guard(out);
  Tensor bias_vec;
  const bool fused =
      bias.defined() && cuda_ops::lt_supports(dt) && k > 0 && epilogue_bias(bias, m, dt, &bias_vec);
  Scalar beta_eff = beta;
  auto prefill_bias = [&] {
    out.copy_(bias.expand({B, n, m}));
    beta_eff = Scalar(1);
  };
  if (bias.defined() && !fused) prefill_bias();
  if (k == 0 || !cuda_ops::lt_supports(dt)) {
    plain_product(out, a, b, alpha, beta_eff, op);
    return;
  }
  cuda_ops::GemmArgs g;
  g.batch = B, g.n = n, g.m = m, g.k = k;
  g.a = operand_of(a);
  g.b = operand_of(b);
  g.c = out.data_ptr();
  g.ldc = m;
  g.c_batch_stride = n * m;
  g.dtype = dt;
  g.alpha = alpha.to_double();
  if (fused) {
    g.epilogue = cuda_ops::GemmEpilogue::Bias;
    g.bias = bias_vec.data_ptr();
    g.beta = 0.0;
    if (cuda_ops::gemm(g, out.device(), op)) return;
    // No algorithm has the epilogue for this problem: add the bias as C instead.
    warn_once(std::string("cuda.gemm.no_bias_epilogue:") + dtype_name(dt),
              std::string("[") + op + "] cuBLASLt has no algorithm with the bias epilogue for " +
                  dtype_name(dt) +
                  " operands of this layout; the bias is copied into the "
                  "output and added as C (one more pass over the output)");
    prefill_bias();
    g.epilogue = cuda_ops::GemmEpilogue::None;
    g.bias = nullptr;
  }
  g.beta = beta_eff.to_double();
  if (cuda_ops::gemm(g, out.device(), op)) return;
  // Note [When cuBLASLt has no algorithm]
  // The heuristic may find nothing for operands it cannot read (say, a float16 column slice that
  // starts 2 bytes past an alignment boundary, with an odd leading dimension). The plain loop then
  // computes the same product (float32 accumulation for 16-bit floats), slower but never wrong,
  // and says so once.
  warn_once(std::string("cuda.gemm.no_algorithm:") + dtype_name(dt),
            std::string("[") + op + "] cuBLASLt has no algorithm for " + dtype_name(dt) +
                " operands of this layout (an unaligned slice or an odd leading dimension); "
                "loom's plain CUDA GEMM loop computes it instead, much slower (make the operands "
                "contiguous to avoid it)");
  plain_product(out, a, b, alpha, beta_eff, op);
}

Tensor mm_cuda(const Tensor& self, const Tensor& mat2) {
  Tensor out = allocate_output(mm_shape(self, mat2), self.device());
  product(out.unsqueeze(0), self.unsqueeze(0), mat2.unsqueeze(0), 1, 0, "mm");
  return out;
}

Tensor bmm_cuda(const Tensor& self, const Tensor& mat2) {
  Tensor out = allocate_output(bmm_shape(self, mat2), self.device());
  product(out, self, mat2, 1, 0, "bmm");
  return out;
}

Tensor addmm_cuda(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const Scalar& beta,
                  const Scalar& alpha) {
  Tensor out = allocate_output(addmm_shape(self, mat1, mat2, beta, alpha), mat1.device());
  const int64_t n = out.size(0), m = out.size(1);
  if (out.numel() > 0) check_product_dtypes(out.dtype(), alpha, beta, "addmm");
  if (beta == Scalar(1) && !(self.dim() == 2 && self.size(0) != 1 && n != 1)) {
    // A row vector (the bias of a layer): fused into the product when cuBLASLt can.
    product(out.unsqueeze(0), mat1.unsqueeze(0), mat2.unsqueeze(0), alpha, 0, "addmm",
            self.dim() == 0 ? self.expand({m}) : self);
    return out;
  }
  if (!is_zero(beta) && out.numel() > 0) {
    cuda_ops::KernelGuard guard(out);
    out.copy_(self.expand({n, m}));
  }
  product(out.unsqueeze(0), mat1.unsqueeze(0), mat2.unsqueeze(0), alpha, beta, "addmm");
  return out;
}

// _linear: input [n, in] @ weight [out, in]^T + bias; weight.t() is read transposed, not copied.
Tensor linear_cuda(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias) {
  const Tensor wt = weight.t();
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) return addmm_cuda(*bias, input, wt, 1, 1);
  return mm_cuda(input, wt);
}

}  // namespace

namespace cuda_ops {

void batched_product(const Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha,
                     const Scalar& beta, const char* op) {
  LOOM_CHECK(out.is_cuda() && a.device() == out.device() && b.device() == out.device(), "[", op,
             "] a CUDA product needs its operands on one CUDA device, got out on ", out.device(),
             ", a on ", a.device(), " and b on ", b.device());
  LOOM_CHECK_TYPE(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "[", op,
                  "] expected one dtype, got out ", out.dtype(), ", a ", a.dtype(), " and b ",
                  b.dtype());
  if (out.is_contiguous()) {
    product(out, a, b, alpha, beta, op);
    return;
  }
  Tensor tmp =
      is_zero(beta) ? empty_tensor(out.sizes(), out.dtype(), out.device()) : out.contiguous();
  product(tmp, a, b, alpha, beta, op);
  out.copy_(tmp);
}

}  // namespace cuda_ops

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("mm", mm_cuda);
  m.impl("bmm", bmm_cuda);
  m.impl("addmm", addmm_cuda);
  m.impl("_linear", linear_cuda);
}

}  // namespace loom
