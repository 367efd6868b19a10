// The math of generated kernels (compiler layer; internal): each target's lm_* prelude, host
// constants as exact literals, and per operator its pointwise expression and its derivative's
// statements (Note [Kernel math], Note [Fused backward] in compiler/kernel_math.cpp). Used by the
// fusion pass (compiler/fusion.cpp) and its source generators (compiler/fusion_codegen.cpp).
#pragma once

#include <string>
#include <vector>

#include "compiler/graph.h"

namespace loom::compiler {

// "double" for float64, else "float".
const char* ctype(DType d);

// The lm_* functions of the CPU and CUDA targets, for float and double.
extern const char kCpuMath[];
extern const char kCudaMath[];

// A host constant as an exact literal of the kernel's type (LM_INF and LM_NAN for the rest).
std::string literal(double v, DType d);

// The expression of a pointwise node over its tensor operands' expressions `t` (argument order),
// or "" when the fusion cannot write it.
std::string pointwise_expr(const Node& n, const std::vector<std::string>& t, DType d);

// Note [Fused backward]: the statements that add the node's contribution to its operands'
// gradient accumulators `gt` ("" where none is needed), given its result `y` and the result's
// gradient `g`; false when the operator has no fused derivative.
bool derivative_code(const Node& n, const std::vector<std::string>& t,
                     const std::vector<std::string>& gt, const std::string& y, const std::string& g,
                     DType d, std::string* code);

}  // namespace loom::compiler
