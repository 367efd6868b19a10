// What a CUDA pointwise kernel needs of a TensorIterator (ops layer, CUDA backend; internal).
//
// Note [CUDA kernel files]
//   CUDA code is split in two so that nvcc compiles only loops and never loom's C++20 headers:
//   - <family>_cuda.cpp (g++): registers the family's CUDA kernels with the dispatcher, builds the
//     TensorIterator (or checks shapes through the shape function), turns it into IterArgs
//     (make_iter_args in cuda_ops.h) and calls a launcher;
//   - <family>_kernels.cu (nvcc): the launchers, plain functions over IterArgs, raw pointers and a
//     stream, declared in <family>_kernels.h. Templates are instantiated there, once.
//   This header is shared by both sides, so it is C++17 and includes nothing of loom.
#pragma once

#include <cstdint>

namespace loom::cuda_ops {

constexpr int kMaxIterDims = 12;     // after coalescing; more is an error naming the op
constexpr int kMaxIterOperands = 6;  // outputs + inputs

// loom::DType's values (dtype.h), for the .cu side.
enum class ScalarCode : int8_t {
  Bool = 0,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};

// A pointwise loop over `numel` elements: dims innermost first, strides in bytes per operand;
// outputs come first. An operand in cpu_scalar_mask is a CPU 0-dim tensor (a C++ number or a host
// scalar): its value travels in `scalar[i]` (in the operand's own dtype) and data[i] is null.
struct IterArgs {
  int ndim = 0;
  int ntensors = 0;
  int noutputs = 1;
  int64_t numel = 0;
  int64_t sizes[kMaxIterDims] = {};
  int64_t strides[kMaxIterOperands][kMaxIterDims] = {};
  char* data[kMaxIterOperands] = {};
  ScalarCode dtype[kMaxIterOperands] = {};
  uint32_t cpu_scalar_mask = 0;
  alignas(8) unsigned char scalar[kMaxIterOperands][8] = {};

  // Every operand steps through memory contiguously with its element size (or is a CPU scalar).
  bool is_contiguous() const;
  // Every byte offset and the element count fit 32-bit indexing.
  bool can_use_32bit_indexing() const;
  // Keeps the first n operands: the others took part in the iterator's dtype promotion only (pow's
  // exponent, clamp's bounds) and the loop does not read them.
  void keep_operands(int n) {
    ntensors = n;
    cpu_scalar_mask &= (1u << n) - 1u;
  }
};

inline int scalar_size(ScalarCode c) {
  switch (c) {
    case ScalarCode::Bool:
    case ScalarCode::UInt8:
    case ScalarCode::Int8:
      return 1;
    case ScalarCode::Int16:
    case ScalarCode::Float16:
    case ScalarCode::BFloat16:
      return 2;
    case ScalarCode::Int32:
    case ScalarCode::Float32:
      return 4;
    default:
      return 8;
  }
}

inline bool IterArgs::is_contiguous() const {
  if (ndim > 1) return false;
  for (int t = 0; t < ntensors; ++t) {
    if (cpu_scalar_mask & (1u << t)) continue;
    if (ndim == 1 && strides[t][0] != scalar_size(dtype[t])) return false;
  }
  return true;
}

inline bool IterArgs::can_use_32bit_indexing() const {
  const int64_t max32 = (int64_t{1} << 31) - 1;
  if (numel > max32) return false;
  for (int t = 0; t < ntensors; ++t) {
    int64_t hi = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t s = strides[t][d] < 0 ? -strides[t][d] : strides[t][d];
      hi += (sizes[d] - 1) * s;
    }
    if (hi > max32) return false;
  }
  return true;
}

}  // namespace loom::cuda_ops
