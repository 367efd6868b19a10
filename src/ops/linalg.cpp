// Linear algebra: schemas and shape functions of mm, bmm, addmm and dot (their CPU kernels are in
// cpu/linalg_kernels.cpp); matmul and linear are CompositeImplicit (they decompose into those and
// views, which is what autograd and the compiler see).
#include <climits>
#include <vector>

#include "cpu/linalg_kernels.h"
#include "loom/derivatives.h"
#include "loom/parallel.h"
#include "op_call.h"
#include "shapes.h"
#include "structured.h"

namespace loom {
namespace {

void check_same_dtype(const char* op, TensorMetaRef a, const char* an, TensorMetaRef b,
                      const char* bn) {
  LOOM_CHECK_TYPE(a.dtype == b.dtype, "[", op, "] expected ", an, " and ", bn,
                  " to have the same dtype, but got ", an, ": ", a.dtype, " and ", bn, ": ",
                  b.dtype);
  LOOM_CHECK(a.device == b.device, "[", op, "] expected ", an, " and ", bn,
             " to be on the same device, but got ", an, " on ", a.device, " and ", bn, " on ",
             b.device);
}

void check_matrix(const char* op, TensorMetaRef t, const char* name, int64_t want_dim) {
  LOOM_CHECK(t.dim() == want_dim, "[", op, "] expected ", name, " to be a ", want_dim,
             "-D tensor but got shape ", t.sizes, " (", t.dim(), "-D)");
}

}  // namespace

// ---- shape functions ----

TensorMeta mm_shape(TensorMetaRef self, TensorMetaRef mat2) {
  check_matrix("mm", self, "self", 2);
  check_matrix("mm", mat2, "mat2", 2);
  LOOM_CHECK(self.size(1) == mat2.size(0), "[mm] mat1 and mat2 shapes cannot be multiplied (",
             self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype("mm", self, "mat1", mat2, "mat2");
  return TensorMeta({self.size(0), mat2.size(1)}, self.dtype);
}

TensorMeta bmm_shape(TensorMetaRef self, TensorMetaRef mat2) {
  check_matrix("bmm", self, "self", 3);
  check_matrix("bmm", mat2, "mat2", 3);
  LOOM_CHECK(self.size(0) == mat2.size(0),
             "[bmm] expected batch1 and batch2 to have the same "
             "batch size, but got shapes ",
             self.sizes, " and ", mat2.sizes);
  LOOM_CHECK(self.size(2) == mat2.size(1), "[bmm] batch1 and batch2 shapes cannot be multiplied (",
             self.sizes, " and ", mat2.sizes, ")");
  check_same_dtype("bmm", self, "batch1", mat2, "batch2");
  return TensorMeta({self.size(0), self.size(1), mat2.size(2)}, self.dtype);
}

TensorMeta addmm_shape(TensorMetaRef self, TensorMetaRef mat1, TensorMetaRef mat2,
                       const Scalar& beta, const Scalar& alpha) {
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
  LOOM_CHECK(broadcastable, "[addmm] self of shape ", self.sizes,
             " cannot be broadcast to the result shape [", n, ", ", m, "] of mat1 ", mat1.sizes,
             " @ mat2 ", mat2.sizes);
  return TensorMeta({n, m}, mat1.dtype);
}

TensorMeta dot_shape(TensorMetaRef self, TensorMetaRef other) {
  LOOM_CHECK(self.dim() == 1 && other.dim() == 1, "[dot] 1-D tensors expected, but got shapes ",
             self.sizes, " and ", other.sizes);
  LOOM_CHECK(self.numel() == other.numel(),
             "[dot] expected both vectors to have the same number "
             "of elements, but got shapes ",
             self.sizes, " and ", other.sizes);
  check_same_dtype("dot", self, "self", other, "other");
  LOOM_CHECK_TYPE(self.dtype != kBool, "[dot] is not implemented for bool tensors");
  return TensorMeta(IntArrayRef(), self.dtype);
}

namespace {

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
Tensor linear_2d_kernel(const Tensor& input, const Tensor& weight,
                        const std::optional<Tensor>& bias) {
  return bias.has_value() && bias->defined() ? addmm(*bias, input, weight.t())
                                             : mm(input, weight.t());
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
  MetaKernel<&mm_shape>::register_meta(m, "mm");
  MetaKernel<&bmm_shape>::register_meta(m, "bmm");
  MetaKernel<&addmm_shape>::register_meta(m, "addmm");
  MetaKernel<&dot_shape>::register_meta(m, "dot");
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
Tensor mm_mat1_backward(const BackwardContext& c, const Tensor& g, const Tensor& mat2,
                        size_t slot) {
  return transposed_layout(c, slot) ? mm(mat2, g.t()).t() : mm(g, mat2.t());
}
// d(A B)/dB = A^T G, as [k, m], laid out like B.
Tensor mm_mat2_backward(const BackwardContext& c, const Tensor& g, const Tensor& mat1,
                        size_t slot) {
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
  m.def("_linear", autograd::with_grad_sinks(autograd::saves({0, 1})),
        [](const BackwardContext& c) -> GradList {
          const Tensor& g = c.grad(0);
          GradList r(3);
          if (c.needs(0)) r[0] = mm(g, c.input(1));
          if (c.needs(1)) {
            const Tensor sink = c.grad_sink(1);
            if (sink.defined()) {
              batched_product(sink.unsqueeze(0), g.t().unsqueeze(0), c.input(0).unsqueeze(0), 1, 1,
                              "linear");
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
