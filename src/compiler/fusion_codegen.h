// The source generators of the fusion pass (compiler layer; internal): the C++ and CUDA text of a
// fused group's kernel, from what the pass (compiler/fusion.cpp) built of the group. Implemented
// by compiler/fusion_codegen.cpp.
#pragma once

#include <string>
#include <vector>

#include "compiler/graph.h"

namespace loom::compiler::fusion_detail {

// What the generators read of a group (Note [Pointwise fusion]); for a backward kernel, the
// backward's operands and body (Note [Fused backward]).
struct GroupCode {
  DType dtype;
  size_t num_inputs;                      // tensor operands: in<j> read through p<j>
  size_t num_scalars;                     // 0-dim operands: s<i>
  const std::vector<bool>& column_steps;  // per tensor operand: read along the columns
  const std::string& body;                // one line `const T v7 = expr;` per node
  int reduce;                             // Note [Reduction fusion]: 0, or 1 sum, 2 mean, 3 amax
  ValueId reduce_in, reduce_out;          // the value reduced and the reduction's result
  const std::string& epilogue;            // the epilogue's lines, once a row
};

// The CPU kernel "loom_kernel" of `f`: elements [begin, end) of its iteration space.
std::string cpu_source(const FusedKernel& f, const GroupCode& g);
// Note [Reduction fusion]: the CPU kernel of a group that ends in a reduction.
std::string cpu_reduce_source(const FusedKernel& f, const GroupCode& g);
// The CUDA kernels "loom_kernel" (and "loom_kernel_vec4" for float32) of `f`.
std::string cuda_source(const FusedKernel& f, const GroupCode& g);
// Note [Reduction fusion]: the CUDA kernel of a group that ends in a reduction.
std::string cuda_reduce_source(const FusedKernel& f, const GroupCode& g);

}  // namespace loom::compiler::fusion_detail
