// TensorIterator: the strided-loop engine behind pointwise kernels (internal to the ops layer).
//
// Given outputs and inputs it broadcasts the shapes, computes the common dtype by PyTorch's
// promotion rules (dimensioned tensors > 0-dim tensors > wrapped numbers), casts inputs to it,
// allocates or checks the outputs, coalesces dimensions that are contiguous in every operand, and
// runs a 1-D inner loop over the result, split across the intra-op pool. Kernels only write the
// inner loop: `loop(char** data, const int64_t* byte_strides, int64_t n)` with data[0..noutputs)
// the outputs. TensorIterator runs kernels: a Meta call goes to the operator's shape function
// instead, which broadcasts and promotes with the same functions (structured.h).
#pragma once

#include <optional>
#include <vector>

#include "loom/detail/small_vector.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "loom/tensor.h"
#include "structured.h"

namespace loom {

using Loop1d = void (*)(void* ctx, char** data, const int64_t* strides, int64_t n);

struct TensorIteratorConfig {
  const char* op = "op";
  std::vector<Tensor> outputs;  // undefined entries are allocated
  std::vector<Tensor> inputs;
  // Inputs are converted to the common dtype (else each keeps its own dtype).
  bool promote_inputs = true;
  // Integer and bool inputs promote to the default float dtype (div, exp, sqrt, ...).
  bool int_to_float = false;
  // The computation dtype is fixed (e.g. where's condition is not part of promotion).
  std::optional<DType> compute_dtype;
  // Outputs have this dtype (comparisons: bool); else the common dtype.
  std::optional<DType> output_dtype;
  // Inputs that do not take part in dtype promotion (e.g. where's condition).
  std::vector<bool> input_skips_promotion;
  // Whether a provided output may have a different shape than the broadcast (it is resized).
  bool resize_outputs = true;
  // In-place: output 0 is input 0; its shape must equal the broadcast shape.
  bool is_inplace = false;
};

class TensorIterator {
 public:
  explicit TensorIterator(TensorIteratorConfig cfg);

  DType common_dtype() const { return common_dtype_; }
  const Tensor& output(int i = 0) const { return operands_[static_cast<size_t>(i)]; }
  const Tensor& operand(int i) const { return operands_[static_cast<size_t>(i)]; }
  int noutputs() const { return noutputs_; }
  int ntensors() const { return static_cast<int>(operands_.size()); }
  int64_t numel() const { return numel_; }
  Device device() const { return device_; }
  IntArrayRef shape() const { return shape_.ref(); }
  // The operand is a 0-stride broadcast in every dimension (a scalar for the loop).
  bool is_scalar_operand(int i) const;
  // The coalesced loop: sizes innermost first, and each operand's byte strides in the same order
  // (what a device backend turns into its own loop; src/ops/cuda/cuda_ops.h).
  IntArrayRef loop_shape() const { return loop_shape_.ref(); }
  IntArrayRef loop_strides(int i) const { return loop_strides_[static_cast<size_t>(i)].ref(); }

  // Runs `loop` over every element, in parallel chunks of at least `grain` elements. CPU only:
  // InternalError when the operands are on another device (a device kernel runs its own loop).
  void for_each(Loop1d loop, void* ctx, int64_t grain = 32768);
  template <class F>
  void for_each(const F& f, int64_t grain = 32768) {
    for_each([](void* ctx, char** data, const int64_t* strides,
                int64_t n) { (*static_cast<const F*>(ctx))(data, strides, n); },
             const_cast<void*>(static_cast<const void*>(&f)), grain);
  }

  // Copies the temporary outputs back into the caller's outputs when they differ in dtype or
  // layout. Kernels call this after for_each (the op wrappers below do it for you).
  void finish();

 private:
  void compute_shape();
  void compute_dtypes();
  void allocate_outputs();
  void compute_strides_and_coalesce();
  void serial_for_each(Loop1d loop, void* ctx, int64_t begin, int64_t end) const;

  TensorIteratorConfig cfg_;
  std::vector<Tensor> operands_;   // outputs then inputs, as the loop sees them
  std::vector<Tensor> originals_;  // caller's outputs when a temporary is used (else undefined)
  detail::SmallVector<TensorMetaRef, 4>
      input_refs_;  // the inputs' metadata, for the pure shape functions
  int noutputs_ = 0;
  DType common_dtype_ = kFloat32;
  Device device_ = kCPU;
  DimVector shape_;                      // broadcast shape
  DimVector loop_shape_;                 // after coalescing, innermost first
  std::vector<DimVector> loop_strides_;  // per operand, bytes, innermost first
  int64_t numel_ = 0;
};

// Whether `from` can be written into a tensor of dtype `to` by an in-place or out= op, as
// PyTorch's can_cast: no float -> integer, no non-bool -> bool.
bool can_cast(DType from, DType to);

// Result dtype of pointwise promotion of these tensors and wrapped numbers.
DType result_type(TensorList tensors);

}  // namespace loom
