// Derivative declarations (ops layer): each operator file declares its operators' derivatives here,
// next to their schemas; the autograd layer above looks them up (find_derivative) when it records.
// The namespace stays loom::autograd, the vocabulary derivatives are written in.
//
// A derivative is a plain function from a BackwardContext (gradients of the forward outputs, the
// saved inputs and outputs, the non-tensor arguments) to the gradients of the forward's tensor
// inputs. It is written with ordinary operators, so when backward runs with create_graph the
// derivative itself is recorded and can be differentiated again.
//
// Tensor inputs are numbered by "slot": every Tensor / Tensor? argument of the schema is one slot,
// in order, and every element of a Tensor[] argument is one slot. Arguments are numbered by their
// schema position. A derivative returns one tensor per slot (undefined = no gradient); gradients
// may have the broadcast (larger) shape, the engine sums them down to the input's shape.
//
//   LOOM_DERIVATIVES(m) {
//     m.def("mul", saves({0, 1}), [](const BackwardContext& c) -> GradList {
//       Tensor g = c.grad(0);
//       return {c.needs(0) ? mul(g, c.input(1)) : Tensor(), c.needs(1) ? mul(g, c.input(0)) :
//       Tensor()};
//     });
//     m.nondifferentiable("eq");
//   }
//
// In-place variants ("mul_") and out variants use the derivative of the operator without the
// trailing underscore unless they have their own. Registration happens at static-initialisation
// time; the registry is read-only afterwards (lookups are lock-free).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "loom/export.h"
#include "loom/ivalue.h"
#include "loom/tensor.h"

namespace loom::autograd {

using GradList = std::vector<Tensor>;

class LOOM_API BackwardContext {
 public:
  virtual ~BackwardContext() = default;
  // Gradient of forward output i (undefined if that output got none).
  virtual const Tensor& grad(size_t i) const = 0;
  virtual size_t num_grads() const = 0;
  // Whether slot i needs a gradient; derivatives skip work for slots that do not.
  virtual bool needs(size_t slot) const = 0;
  // A saved tensor input (by slot) or output; throws InternalError if it was not declared saved,
  // Error if it was modified in place since it was saved or the graph was freed.
  virtual Tensor input(size_t slot) const = 0;
  virtual Tensor output(size_t i) const = 0;
  // Metadata of every tensor input, saved or not.
  virtual IntArrayRef input_sizes(size_t slot) const = 0;
  virtual DType input_dtype(size_t slot) const = 0;
  virtual bool input_defined(size_t slot) const = 0;
  // Strides and storage offset of a tensor input (as_strided's derivative reads its geometry).
  virtual IntArrayRef input_strides(size_t slot) const = 0;
  virtual int64_t input_storage_offset(size_t slot) const = 0;
  virtual size_t num_slots() const = 0;
  // Non-tensor arguments by schema position.
  virtual const IValue& arg(size_t pos) const = 0;
  int64_t int_arg(size_t pos) const { return arg(pos).to_int(); }
  double double_arg(size_t pos) const { return arg(pos).to_double(); }
  bool bool_arg(size_t pos) const { return arg(pos).to_bool(); }
  Scalar scalar_arg(size_t pos) const { return arg(pos).to_scalar(); }
  IntArrayRef int_list_arg(size_t pos) const { return arg(pos).to_int_list(); }
  // The number of slots a Tensor[] argument at schema position pos expanded to.
  virtual size_t list_size(size_t pos) const = 0;
  // Forward outputs count and whether create_graph is on (derivatives then avoid fused kernels
  // that have no derivative of their own).
  virtual bool create_graph() const = 0;
  // The leaf .grad() that slot's gradient is headed for, when the engine lets this derivative add
  // into it directly instead of returning a fresh gradient to be added (Note [Accumulating into
  // .grad] in engine.cpp); undefined otherwise, and always for derivatives whose spec did not ask.
  // A derivative that adds its gradient into the sink returns the sink itself for that slot.
  virtual Tensor grad_sink(size_t /*slot*/) const { return Tensor(); }
};

using DerivativeFn = GradList (*)(const BackwardContext& ctx);

struct DerivativeSpec {
  std::vector<int> save_inputs;   // slots
  std::vector<int> save_outputs;  // output indices
  bool grad_sinks = false;        // may add into a leaf's .grad() (BackwardContext::grad_sink)
};
// saves({0, 1}) saves inputs 0 and 1; saves({}, {0}) saves output 0.
inline DerivativeSpec saves(std::vector<int> inputs, std::vector<int> outputs = {}) {
  return DerivativeSpec{std::move(inputs), std::move(outputs)};
}
// with_grad_sinks(saves({0, 1})): the derivative uses BackwardContext::grad_sink.
inline DerivativeSpec with_grad_sinks(DerivativeSpec spec) {
  spec.grad_sinks = true;
  return spec;
}

class LOOM_API DerivativeRegistrar {
 public:
  // `op` is the operator name without namespace, with overload: "add", "pow.Tensor_Scalar".
  DerivativeRegistrar& def(const char* op, DerivativeSpec spec, DerivativeFn fn);
  // Operators whose outputs never require grad (comparisons, argmax, integer results).
  DerivativeRegistrar& nondifferentiable(const char* op);
  // `op` uses the derivative of `same_as` (e.g. "pow_.Scalar" of "pow.Tensor_Scalar").
  DerivativeRegistrar& alias(const char* op, const char* same_as);
};

struct Derivative {
  std::string op;
  DerivativeSpec spec;
  DerivativeFn fn = nullptr;
  bool differentiable = true;
  const char* file = "";
};

// nullptr when none is registered.
LOOM_API const Derivative* find_derivative(const std::string& op_name);
LOOM_API std::vector<const Derivative*> all_derivatives();

namespace detail {
struct LOOM_API DerivativesInit {
  DerivativesInit(void (*init)(DerivativeRegistrar&), const char* file);
};
}  // namespace detail

// Sums a (broadcast) gradient down to `sizes`.
LOOM_API Tensor sum_to(const Tensor& grad, IntArrayRef sizes);

// Gradient of as_strided(input, sizes, strides, offset) with respect to `input`, given by its
// geometry: grad's elements are summed into the storage positions they view, which are then read
// back with the input's geometry (divided by how many input elements share a position, when the
// input overlaps itself). Written with dispatched operators, so it is itself differentiable.
LOOM_API Tensor as_strided_backward(const Tensor& grad, IntArrayRef input_sizes,
                                    IntArrayRef input_strides, int64_t input_offset,
                                    IntArrayRef sizes, IntArrayRef strides, int64_t offset);

}  // namespace loom::autograd

#define LOOM_DERIVATIVES_BODY_(m, uid)                                                           \
  static void LOOM_DCONCAT(loom_derivatives_init_, uid)(::loom::autograd::DerivativeRegistrar&); \
  static const ::loom::autograd::detail::DerivativesInit LOOM_DCONCAT(                           \
      loom_derivatives_static_, uid)(&LOOM_DCONCAT(loom_derivatives_init_, uid), __FILE__);      \
  void LOOM_DCONCAT(loom_derivatives_init_, uid)(::loom::autograd::DerivativeRegistrar & m)
#define LOOM_DCONCAT_(a, b) a##b
#define LOOM_DCONCAT(a, b) LOOM_DCONCAT_(a, b)
// Declares derivatives in a .cpp file, next to the operators they belong to.
#define LOOM_DERIVATIVES(m) LOOM_DERIVATIVES_BODY_(m, __COUNTER__)
