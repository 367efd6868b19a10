// The multi-tensor Adam step (loom::_fused_adam_, like torch's _fused_adamw_): schema, argument
// checks and the public function. The CPU kernel lives with the optimizers (src/optim/
// fused_adam_cpu.cpp, reusing their fused per-parameter loop), the CUDA one in
// cuda/fused_adam_cuda.cpp + fused_adam_kernels.cu.
//
// Note [Multi-tensor Adam]
//   Adam's update is pointwise, but run as operators it costs about ten kernel launches per
//   parameter (mul_, add_, maximum_, sqrt, div, add_, ...), each reading and writing whole tensors;
//   a GPT has ~150 parameter tensors, so the step is launch-bound. _fused_adam_ takes the lists of
//   parameters, gradients and moments of one group and updates them all: on CUDA, tensors are cut
//   into fixed chunks and a launch processes up to a table's worth of (tensor, chunk) pairs passed
//   as a kernel parameter (pointers and per-tensor bias corrections, no device-side table to
//   upload), each block one chunk, each element read and written once. The per-element arithmetic
//   is the CPU fused step's (Note [Optimizer arithmetic] in src/optim/fused_step.cpp): the same
//   operations in the same order with the scalars rounded to float first, explicit fma where that
//   one uses fma, IEEE division and square root; so a CUDA step matches the CPU's to the last bit
//   or within an ulp where the CPU build contracted differently. Each parameter has its own step
//   count (a parameter that had no gradient in some steps lags), passed as a list.
#include "loom/derivatives.h"
#include "ops/fused_shapes.h"
#include "ops/op_call.h"

namespace loom {
namespace {

void check_entry(const char* list, size_t i, const Tensor& t, const Tensor& param) {
  constexpr const char* op = "[_fused_adam_] ";
  LOOM_CHECK(t.defined(), op, list, "[", i, "] is an undefined tensor");
  LOOM_CHECK(t.sizes() == param.sizes(), op, list, "[", i, "] has shape ", t.sizes(),
             " but params[", i, "] has shape ", param.sizes());
  LOOM_CHECK_TYPE(t.dtype() == param.dtype(), op, list, "[", i, "] has dtype ", t.dtype(),
                  " but params[", i, "] has dtype ", param.dtype());
  LOOM_CHECK(t.device() == param.device(), op, list, "[", i, "] is on ", t.device(), " but params[",
             i, "] is on ", param.device());
  LOOM_CHECK(t.is_contiguous(), op, list, "[", i, "] of shape ", t.sizes(),
             " is not contiguous (the fused step needs dense, contiguous tensors)");
}

}  // namespace

void check_fused_adam_lists(TensorList params, TensorList grads, TensorList exp_avgs,
                            TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, bool amsgrad,
                            IntArrayRef steps, bool allow_double) {
  constexpr const char* op = "[_fused_adam_] ";
  const size_t n = params.size();
  LOOM_CHECK(
      grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n, op,
      "expected lists of one length but got ", n, " params, ", grads.size(), " grads, ",
      exp_avgs.size(), " exp_avgs, ", exp_avg_sqs.size(), " exp_avg_sqs and ", steps.size(),
      " steps");
  LOOM_CHECK(max_exp_avg_sqs.size() == (amsgrad ? n : 0), op, "expected ", amsgrad ? n : 0,
             " max_exp_avg_sqs (amsgrad=", amsgrad, ") but got ", max_exp_avg_sqs.size());
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    LOOM_CHECK(p.defined(), op, "params[", i, "] is an undefined tensor");
    LOOM_CHECK_TYPE(p.dtype() == kFloat32 || (allow_double && p.dtype() == kFloat64), op, "params[",
                    i, "] has dtype ", p.dtype(), "; the fused step takes float32",
                    allow_double ? " or float64" : " on this device");
    LOOM_CHECK(p.device() == params[0].device(), op, "params[", i, "] is on ", p.device(),
               " but params[0] is on ", params[0].device(), " (one device per call)");
    check_entry("params", i, p, p);
    check_entry("grads", i, grads[i], p);
    check_entry("exp_avgs", i, exp_avgs[i], p);
    check_entry("exp_avg_sqs", i, exp_avg_sqs[i], p);
    if (amsgrad) check_entry("max_exp_avg_sqs", i, max_exp_avg_sqs[i], p);
    LOOM_CHECK(steps[i] >= 1, op, "steps[", i, "] = ", steps[i],
               " (expected the step count after this step's increment, >= 1)");
  }
}

namespace {

// Meta: the checks only (the op writes its arguments in place).
void fused_adam_meta(TensorList params, TensorList grads, TensorList exp_avgs,
                     TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, double, double, double,
                     double, double, bool amsgrad, bool, bool, IntArrayRef steps) {
  check_fused_adam_lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, amsgrad, steps,
                         /*allow_double=*/true);
}

}  // namespace

LOOM_LIBRARY_FRAGMENT(loom, m) {
  m.def(
      "_fused_adam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, "
      "Tensor(c!)[] exp_avg_sqs, Tensor(d!)[] max_exp_avg_sqs, float lr, float beta1, "
      "float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, bool decoupled, "
      "int[] steps) -> ()");
  m.impl("_fused_adam_", DispatchKey::Meta, fused_adam_meta);
}

void _fused_adam_(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                  TensorList max_exp_avg_sqs, double lr, double beta1, double beta2,
                  double weight_decay, double eps, bool amsgrad, bool maximize, bool decoupled,
                  IntArrayRef steps) {
  using Sig = void(TensorList, TensorList, TensorList, TensorList, TensorList, double, double,
                   double, double, double, bool, bool, bool, IntArrayRef);
  if (params.empty()) return;  // nothing to update (and no tensor to dispatch on)
  LOOM_CALL_OP("loom::_fused_adam_", Sig, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr,
               beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled, steps);
}

LOOM_DERIVATIVES(m) {
  m.nondifferentiable("_fused_adam_");
}

}  // namespace loom
