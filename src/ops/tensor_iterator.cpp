#include "tensor_iterator.h"

#include <algorithm>

#include "loom/parallel.h"

namespace loom {

bool can_cast(DType from, DType to) {
  if (is_floating(from) && is_integral(to, /*include_bool=*/true)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

DType result_type(TensorList tensors) {
  detail::SmallVector<TensorMetaRef, 4> refs;
  for (const Tensor& t : tensors) {
    if (t.defined()) refs.push_back(TensorMetaRef(t));
  }
  return result_type(refs.data(), refs.size());
}

TensorIterator::TensorIterator(TensorIteratorConfig cfg) : cfg_(std::move(cfg)) {
  noutputs_ = static_cast<int>(cfg_.outputs.size());
  operands_.reserve(cfg_.outputs.size() + cfg_.inputs.size());
  for (auto& o : cfg_.outputs) operands_.push_back(o);
  for (auto& i : cfg_.inputs) {
    LOOM_CHECK(i.defined(), "[", cfg_.op, "] an input tensor is undefined");
    operands_.push_back(i);
  }
  originals_.resize(cfg_.outputs.size());
  compute_shape();
  compute_dtypes();
  allocate_outputs();
  compute_strides_and_coalesce();
}

// The shape and dtype come from the same pure functions as the operators' shape functions
// (structured.h), so a Meta call and a CPU call agree by construction.
void TensorIterator::compute_shape() {
  const size_t n = cfg_.inputs.size();
  input_refs_.clear();
  for (size_t i = 0; i < n; ++i) input_refs_.push_back(TensorMetaRef(cfg_.inputs[i]));
  device_ = common_device(cfg_.op, input_refs_.data(), n);
  shape_ = broadcast_shapes(cfg_.op, input_refs_.data(), n);
  numel_ = multiply_sizes(shape_);
}

void TensorIterator::compute_dtypes() {
  if (cfg_.compute_dtype) {
    common_dtype_ = *cfg_.compute_dtype;
  } else {
    bool skip[16] = {};
    for (size_t i = 0; i < cfg_.input_skips_promotion.size() && i < 16; ++i) {
      skip[i] = cfg_.input_skips_promotion[i];
    }
    common_dtype_ = result_type(input_refs_.data(), input_refs_.size(), skip);
  }
  if (cfg_.int_to_float && !is_floating(common_dtype_)) common_dtype_ = default_dtype();
  if (!cfg_.promote_inputs) return;
  for (size_t i = 0; i < cfg_.inputs.size(); ++i) {
    if (i < cfg_.input_skips_promotion.size() && cfg_.input_skips_promotion[i]) continue;
    Tensor& t = operands_[static_cast<size_t>(noutputs_) + i];
    if (t.dtype() == common_dtype_) continue;
    if (t.impl()->is_wrapped_number() && t.is_cpu()) {
      // A C++ number already on the host: converted by copy_, not read back through item().
      Tensor c = empty_tensor({}, common_dtype_, kCPU);
      c.copy_(t);
      t = c;
    } else {
      t = t.to(common_dtype_);
    }
  }
}

void TensorIterator::allocate_outputs() {
  const DType out_dtype = cfg_.output_dtype.value_or(common_dtype_);
  for (int i = 0; i < noutputs_; ++i) {
    Tensor& out = operands_[static_cast<size_t>(i)];
    if (!out.defined()) {
      out = empty_tensor(shape_, out_dtype, device_);
      continue;
    }
    LOOM_CHECK(out.device() == device_ || numel_ == 0, "[", cfg_.op, "] the output is on ",
               out.device(), " but the inputs are on ", device_);
    LOOM_CHECK_TYPE(can_cast(out_dtype, out.dtype()), "[", cfg_.op, "] result type ", out_dtype,
                    " can't be cast to the desired output type ", out.dtype());
    if (out.sizes() != shape_.ref()) {
      LOOM_CHECK(!cfg_.is_inplace, "[", cfg_.op, "] output with shape ", out.sizes(),
                 " doesn't match the broadcast shape ", shape_.ref());
      LOOM_CHECK(cfg_.resize_outputs, "[", cfg_.op, "] out has shape ", out.sizes(),
                 " but the result has shape ", shape_.ref());
      // Resize out in place (a new buffer when the old one is too small).
      size_t need = checked_nbytes(shape_, out.dtype(), cfg_.op);
      if (need > out.storage()->nbytes() -
                     static_cast<size_t>(out.storage_offset()) * out.element_size()) {
        out.impl()->set_storage(make_storage(need, out.device()));
        out.impl()->set_sizes_and_strides(shape_, contiguous_strides(shape_), 0);
      } else {
        out.impl()->set_sizes_and_strides(shape_, contiguous_strides(shape_), out.storage_offset());
      }
    }
    if (out.dtype() != out_dtype) {
      // Compute in the result dtype, then cast into the caller's tensor in finish().
      originals_[static_cast<size_t>(i)] = out;
      out = empty_tensor(shape_, out_dtype, device_);
    }
  }
}

void TensorIterator::compute_strides_and_coalesce() {
  const size_t nd = shape_.size();
  const size_t nt = operands_.size();
  // Innermost first; drop size-1 dimensions.
  DimVector shape;
  std::vector<DimVector> strides(nt);
  for (size_t k = 0; k < nd; ++k) {
    size_t d = nd - 1 - k;
    if (shape_[d] == 1) continue;
    shape.push_back(shape_[d]);
    for (size_t t = 0; t < nt; ++t) {
      const Tensor& op = operands_[t];
      int64_t off = static_cast<int64_t>(d) - (static_cast<int64_t>(nd) - op.dim());
      int64_t st = 0;
      if (off >= 0 && op.sizes()[static_cast<size_t>(off)] != 1) {
        st = op.strides()[static_cast<size_t>(off)] * static_cast<int64_t>(op.element_size());
      }
      strides[t].push_back(st);
    }
  }
  // Coalesce: merge dimension j+1 into j when every operand steps through them as one.
  size_t out_dims = 0;
  for (size_t j = 0; j < shape.size(); ++j) {
    if (out_dims == 0) {
      out_dims = 1;
      continue;
    }
    size_t prev = out_dims - 1;
    bool can = true;
    for (size_t t = 0; t < nt && can; ++t) {
      can = strides[t][j] == strides[t][prev] * shape[prev];
    }
    if (can) {
      shape[prev] *= shape[j];
    } else {
      shape[out_dims] = shape[j];
      for (size_t t = 0; t < nt; ++t) strides[t][out_dims] = strides[t][j];
      ++out_dims;
    }
  }
  shape.resize(out_dims);
  for (auto& s : strides) s.resize(out_dims);
  if (out_dims == 0) {  // a scalar: one iteration
    shape.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  loop_shape_ = std::move(shape);
  loop_strides_ = std::move(strides);
}

bool TensorIterator::is_scalar_operand(int i) const {
  for (int64_t s : loop_strides_[static_cast<size_t>(i)]) {
    if (s != 0) return false;
  }
  return true;
}

void TensorIterator::serial_for_each(Loop1d loop, void* ctx, int64_t begin, int64_t end) const {
  const size_t nt = operands_.size();
  const size_t nd = loop_shape_.size();
  char* base[16];
  char* ptrs[16];
  int64_t inner_strides[16];
  LOOM_INTERNAL_ASSERT(nt <= 16, "too many operands: ", nt);
  for (size_t t = 0; t < nt; ++t) {
    base[t] = static_cast<char*>(operands_[t].data_ptr());
    inner_strides[t] = loop_strides_[t][0];
  }
  DimVector coord(nd, 0);
  int64_t rem = begin;
  for (size_t d = 0; d < nd; ++d) {
    coord[d] = rem % loop_shape_[d];
    rem /= loop_shape_[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    for (size_t t = 0; t < nt; ++t) {
      int64_t off = 0;
      for (size_t d = 0; d < nd; ++d) off += coord[d] * loop_strides_[t][d];
      ptrs[t] = base[t] + off;
    }
    int64_t n = std::min(loop_shape_[0] - coord[0], end - pos);
    loop(ctx, ptrs, inner_strides, n);
    pos += n;
    coord[0] += n;
    for (size_t d = 0; d + 1 < nd && coord[d] == loop_shape_[d]; ++d) {
      coord[d] = 0;
      ++coord[d + 1];
    }
  }
}

void TensorIterator::for_each(Loop1d loop, void* ctx, int64_t grain) {
  if (numel_ == 0) return;
  LOOM_INTERNAL_ASSERT(device_.is_cpu(), "[", cfg_.op, "] a CPU loop over tensors on ", device_);
  if (numel_ < 2 * grain || in_parallel_region() || get_num_threads() == 1) {
    serial_for_each(loop, ctx, 0, numel_);
    return;
  }
  parallel_for(0, numel_, grain, [&](int64_t b, int64_t e) { serial_for_each(loop, ctx, b, e); });
}

void TensorIterator::finish() {
  for (int i = 0; i < noutputs_; ++i) {
    const Tensor& orig = originals_[static_cast<size_t>(i)];
    if (orig.defined()) {
      orig.copy_(operands_[static_cast<size_t>(i)]);
      operands_[static_cast<size_t>(i)] = orig;
    } else if (i < static_cast<int>(cfg_.outputs.size()) &&
               cfg_.outputs[static_cast<size_t>(i)].defined()) {
      operands_[static_cast<size_t>(i)].storage()->bump_version();
    }
  }
}

}  // namespace loom
