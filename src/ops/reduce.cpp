// Reductions: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin, var/std,
// logsumexp, norm, all/any: schemas and shape functions (the reduced dims dropped, or kept as 1
// with keepdim). The CPU kernels, reducers run by the reduction engine (reduce_engine.h), are in
// cpu/reduce_kernels.cpp; the derivatives in reduce_derivatives.cpp.
#include <cmath>
#include <limits>

#include "op_call.h"
#include "reduce_engine.h"
#include "shapes.h"

namespace loom {
namespace {

// ---- shape functions ----

// Reductions without an identity (max, argmax, ...) reject reduced dims of size 0.
void check_nonempty(const char* op, TensorMetaRef t, const std::vector<bool>& mask) {
  for (size_t d = 0; d < mask.size(); ++d) {
    LOOM_CHECK_INDEX(!mask[d] || t.sizes[d] != 0, "[", op, "] expected reduction dim ", d,
                     " to have non-zero size (input shape ", t.sizes, ")");
  }
}

void check_floating(const char* op, DType dt, const char* what) {
  LOOM_CHECK_TYPE(is_floating(dt), "[", op, "] ", what, " but got ", dt);
}

TensorMeta reduced_meta(TensorMetaRef self, const std::vector<bool>& mask, bool keepdim, DType dt) {
  return TensorMeta(reduce::reduced_shape(self.sizes, mask, keepdim), dt);
}

TensorMeta sum_like_shape(const char* op, TensorMetaRef self, std::optional<IntArrayRef> dim,
                          bool keepdim, std::optional<DType> dtype) {
  auto mask = reduce::make_mask(op, self, dim);
  return reduced_meta(self, mask, keepdim, dtype.value_or(reduce::sum_acc_dtype(self.dtype)));
}

template <bool kMax>
TensorMeta extreme_meta(const char* op, TensorMetaRef self, std::optional<IntArrayRef> dim,
                        bool keepdim) {
  auto mask = reduce::make_mask(op, self, dim);
  check_nonempty(op, self, mask);
  return reduced_meta(self, mask, keepdim, self.dtype);
}

}  // namespace

TensorMeta sum_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                     std::optional<DType> dtype) {
  return sum_like_shape("sum", self, dim, keepdim, dtype);
}
TensorMeta prod_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                      std::optional<DType> dtype) {
  return sum_like_shape("prod", self, dim, keepdim, dtype);
}
TensorMeta mean_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim,
                      std::optional<DType> dtype) {
  if (dtype) {
    check_floating("mean", *dtype,
                   "could not infer output dtype: the optional dtype must be a "
                   "floating point dtype");
  } else {
    check_floating("mean", self.dtype,
                   "could not infer output dtype: the input dtype must be a "
                   "floating point dtype (or pass dtype=)");
  }
  return sum_like_shape("mean", self, dim, keepdim, dtype);
}
TensorMeta amax_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim) {
  return extreme_meta<true>("amax", self, dim, keepdim);
}
TensorMeta amin_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim) {
  return extreme_meta<false>("amin", self, dim, keepdim);
}
template <bool kMax>
TensorMeta extreme_all_shape(TensorMetaRef self) {
  const char* op = kMax ? "max" : "min";
  LOOM_CHECK(self.numel() > 0, "[", op,
             "] expected reduction dim to be specified for an input "
             "with no elements (input shape ",
             self.sizes, "); pass dim=");
  return extreme_meta<kMax>(op, self, std::nullopt, false);
}
template <bool kMax>
std::array<TensorMeta, 2> extreme_dim_shape(TensorMetaRef self, int64_t dim, bool keepdim) {
  const char* op = kMax ? "max" : "min";
  auto mask = reduce::make_mask_one(op, self, dim);
  check_nonempty(op, self, mask);
  return {reduced_meta(self, mask, keepdim, self.dtype), reduced_meta(self, mask, keepdim, kInt64)};
}
template <bool kMax>
TensorMeta arg_extreme_shape(TensorMetaRef self, std::optional<int64_t> dim, bool keepdim) {
  const char* op = kMax ? "argmax" : "argmin";
  std::vector<bool> mask;
  if (dim) {
    mask = reduce::make_mask_one(op, self, *dim);
    check_nonempty(op, self, mask);
  } else {
    LOOM_CHECK_INDEX(self.numel() > 0, "[", op,
                     "] expected reduction dim to be specified for an "
                     "input with no elements (input shape ",
                     self.sizes, ")");
    mask = reduce::make_mask(op, self, std::nullopt);
  }
  return reduced_meta(self, mask, keepdim, kInt64);
}
template <bool kStd>
TensorMeta var_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, int64_t correction,
                     bool keepdim) {
  const char* op = kStd ? "std" : "var";
  check_floating(op, self.dtype, "std and var only support floating point dtypes");
  auto mask = reduce::make_mask(op, self, dim);
  return reduced_meta(self, mask, keepdim, self.dtype);
}
TensorMeta logsumexp_shape(TensorMetaRef self, IntArrayRef dim, bool keepdim) {
  auto mask = reduce::make_mask("logsumexp", self, dim);
  return reduced_meta(self, mask, keepdim, is_floating(self.dtype) ? self.dtype : default_dtype());
}
TensorMeta norm_shape(TensorMetaRef self, const Scalar& p, std::optional<IntArrayRef> dim,
                      bool keepdim) {
  check_floating("norm", self.dtype, "expected a floating point input");
  auto mask = reduce::make_mask("norm", self, dim);
  const double pv = p.to<double>();
  LOOM_CHECK(pv == pv, "[norm] p must not be nan");
  return reduced_meta(self, mask, keepdim, self.dtype);
}
template <bool kAll>
TensorMeta all_any_shape(TensorMetaRef self, std::optional<IntArrayRef> dim, bool keepdim) {
  const char* op = kAll ? "all" : "any";
  auto mask = reduce::make_mask(op, self, dim);
  // As in PyTorch, uint8 inputs give uint8 results; everything else gives bool.
  return reduced_meta(self, mask, keepdim, self.dtype == kUInt8 ? kUInt8 : kBool);
}
template TensorMeta extreme_all_shape<true>(TensorMetaRef);
template TensorMeta extreme_all_shape<false>(TensorMetaRef);
template std::array<TensorMeta, 2> extreme_dim_shape<true>(TensorMetaRef, int64_t, bool);
template std::array<TensorMeta, 2> extreme_dim_shape<false>(TensorMetaRef, int64_t, bool);
template TensorMeta arg_extreme_shape<true>(TensorMetaRef, std::optional<int64_t>, bool);
template TensorMeta arg_extreme_shape<false>(TensorMetaRef, std::optional<int64_t>, bool);
template TensorMeta var_shape<true>(TensorMetaRef, std::optional<IntArrayRef>, int64_t, bool);
template TensorMeta var_shape<false>(TensorMetaRef, std::optional<IntArrayRef>, int64_t, bool);
template TensorMeta all_any_shape<true>(TensorMetaRef, std::optional<IntArrayRef>, bool);
template TensorMeta all_any_shape<false>(TensorMetaRef, std::optional<IntArrayRef>, bool);

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "sum(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  m.def(
      "mean(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  m.def(
      "prod(Tensor self, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  m.def("amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  m.def("amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor");
  m.def("max(Tensor self) -> Tensor");
  m.def("min(Tensor self) -> Tensor");
  m.def("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  m.def("argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor");
  m.def("var(Tensor self, int[]? dim=None, *, int correction=1, bool keepdim=False) -> Tensor");
  m.def("std(Tensor self, int[]? dim=None, *, int correction=1, bool keepdim=False) -> Tensor");
  m.def("logsumexp(Tensor self, int[] dim, bool keepdim=False) -> Tensor");
  m.def("norm(Tensor self, Scalar p=2, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("all(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor");
  m.def("any(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor");
  MetaKernel<&sum_shape>::register_meta(m, "sum");
  MetaKernel<&mean_shape>::register_meta(m, "mean");
  MetaKernel<&prod_shape>::register_meta(m, "prod");
  MetaKernel<&amax_shape>::register_meta(m, "amax");
  MetaKernel<&amin_shape>::register_meta(m, "amin");
  MetaKernel<&extreme_all_shape<true>>::register_meta(m, "max");
  MetaKernel<&extreme_all_shape<false>>::register_meta(m, "min");
  MetaKernel<&extreme_dim_shape<true>>::register_meta(m, "max.dim");
  MetaKernel<&extreme_dim_shape<false>>::register_meta(m, "min.dim");
  MetaKernel<&arg_extreme_shape<true>>::register_meta(m, "argmax");
  MetaKernel<&arg_extreme_shape<false>>::register_meta(m, "argmin");
  MetaKernel<&var_shape<false>>::register_meta(m, "var");
  MetaKernel<&var_shape<true>>::register_meta(m, "std");
  MetaKernel<&logsumexp_shape>::register_meta(m, "logsumexp");
  MetaKernel<&norm_shape>::register_meta(m, "norm");
  MetaKernel<&all_any_shape<true>>::register_meta(m, "all");
  MetaKernel<&all_any_shape<false>>::register_meta(m, "any");
}

using SumSig = Tensor(const Tensor&, std::optional<IntArrayRef>, bool, std::optional<DType>);
using DimListSig = Tensor(const Tensor&, IntArrayRef, bool);
using OptDimListSig = Tensor(const Tensor&, std::optional<IntArrayRef>, bool);
using ArgSig = Tensor(const Tensor&, std::optional<int64_t>, bool);
using DimSig = std::tuple<Tensor, Tensor>(const Tensor&, int64_t, bool);
using VarSig = Tensor(const Tensor&, std::optional<IntArrayRef>, int64_t, bool);

Tensor sum(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim,
           std::optional<DType> dtype) {
  LOOM_CALL_OP("loom::sum", SumSig, self, dim, keepdim, dtype);
}
Tensor mean(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim,
            std::optional<DType> dtype) {
  LOOM_CALL_OP("loom::mean", SumSig, self, dim, keepdim, dtype);
}
Tensor prod(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim,
            std::optional<DType> dtype) {
  LOOM_CALL_OP("loom::prod", SumSig, self, dim, keepdim, dtype);
}
Tensor amax(const Tensor& self, IntArrayRef dim, bool keepdim) {
  LOOM_CALL_OP("loom::amax", DimListSig, self, dim, keepdim);
}
Tensor amin(const Tensor& self, IntArrayRef dim, bool keepdim) {
  LOOM_CALL_OP("loom::amin", DimListSig, self, dim, keepdim);
}
Tensor max(const Tensor& self) {
  LOOM_CALL_OP("loom::max", Tensor(const Tensor&), self);
}
Tensor min(const Tensor& self) {
  LOOM_CALL_OP("loom::min", Tensor(const Tensor&), self);
}
std::tuple<Tensor, Tensor> max(const Tensor& self, int64_t dim, bool keepdim) {
  LOOM_CALL_OP("loom::max.dim", DimSig, self, dim, keepdim);
}
std::tuple<Tensor, Tensor> min(const Tensor& self, int64_t dim, bool keepdim) {
  LOOM_CALL_OP("loom::min.dim", DimSig, self, dim, keepdim);
}
Tensor argmax(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  LOOM_CALL_OP("loom::argmax", ArgSig, self, dim, keepdim);
}
Tensor argmin(const Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  LOOM_CALL_OP("loom::argmin", ArgSig, self, dim, keepdim);
}
Tensor var(const Tensor& self, std::optional<IntArrayRef> dim, int64_t correction, bool keepdim) {
  LOOM_CALL_OP("loom::var", VarSig, self, dim, correction, keepdim);
}
Tensor std(const Tensor& self, std::optional<IntArrayRef> dim, int64_t correction, bool keepdim) {
  LOOM_CALL_OP("loom::std", VarSig, self, dim, correction, keepdim);
}
Tensor logsumexp(const Tensor& self, IntArrayRef dim, bool keepdim) {
  LOOM_CALL_OP("loom::logsumexp", DimListSig, self, dim, keepdim);
}
Tensor norm(const Tensor& self, const Scalar& p, std::optional<IntArrayRef> dim, bool keepdim) {
  LOOM_CALL_OP("loom::norm", Tensor(const Tensor&, const Scalar&, std::optional<IntArrayRef>, bool),
               self, p, dim, keepdim);
}
Tensor all(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim) {
  LOOM_CALL_OP("loom::all", OptDimListSig, self, dim, keepdim);
}
Tensor any(const Tensor& self, std::optional<IntArrayRef> dim, bool keepdim) {
  LOOM_CALL_OP("loom::any", OptDimListSig, self, dim, keepdim);
}

}  // namespace loom
