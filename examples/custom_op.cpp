// Registers a custom operator from user code, with a CPU kernel and a Meta kernel, and calls it
// through loom's dispatcher (unboxed and boxed). Build: part of the default build
// (`custom_op_example`); run it to see the output.
#include <cstdio>
#include <iostream>

#include "loom/dispatch.h"
#include "loom/ops.h"

namespace {

using loom::Tensor;

// out = a + scale * b, elementwise, for float32 tensors of one shape.
Tensor scaled_add_cpu(const Tensor& a, const Tensor& b, double scale) {
  LOOM_CHECK(a.sizes() == b.sizes(), "[myops::scaled_add] shapes differ: ", a.sizes(), " vs ",
             b.sizes());
  LOOM_CHECK_TYPE(a.dtype() == loom::kFloat32 && b.dtype() == loom::kFloat32,
                  "[myops::scaled_add] expects float32 tensors");
  Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = loom::empty(a.sizes());
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + static_cast<float>(scale) * pb[i];
  return out;
}

// The Meta kernel computes only the output's shape and dtype: what a compiler needs to trace.
Tensor scaled_add_meta(const Tensor& a, const Tensor& b, double) {
  LOOM_CHECK(a.sizes() == b.sizes(), "[myops::scaled_add] shapes differ: ", a.sizes(), " vs ",
             b.sizes());
  return loom::empty(a.sizes(), loom::TensorOptions(a.dtype()).with_device(loom::kMeta));
}

}  // namespace

LOOM_LIBRARY(myops, m) {
  m.def("scaled_add(Tensor a, Tensor b, float scale=1.0) -> Tensor");
}
LOOM_LIBRARY_IMPL(myops, CPU, m) {
  m.impl("scaled_add", scaled_add_cpu);
}
LOOM_LIBRARY_IMPL(myops, Meta, m) {
  m.impl("scaled_add", scaled_add_meta);
}

int main() {
  auto& d = loom::Dispatcher::singleton();
  auto op = d.find_typed<Tensor(const Tensor&, const Tensor&, double)>("myops::scaled_add");
  Tensor a = loom::arange(0, 4, 1, loom::kFloat32), b = loom::ones({4});
  Tensor r = op.call(a, b, 10.0);
  std::cout << "scaled_add(a, b, 10) = " << r << "\n";

  // The boxed path: what generic layers (profiler, graph capture, fallbacks) use.
  loom::Stack stack{a, b, 0.5};
  op.call_boxed(stack);
  std::cout << "boxed call            = " << stack.back().to_tensor() << "\n";

  // Meta tensors go to the Meta kernel: shape and dtype only, no data.
  Tensor ma = loom::empty({2, 3}, loom::TensorOptions().with_device(loom::kMeta));
  std::cout << "meta call             = " << op.call(ma, ma, 1.0) << "\n";

  std::cout << "schema: " << op.schema().str() << "\nkernels:";
  for (auto k : op.kernel_keys()) std::cout << " " << loom::dispatch_key_name(k);
  std::cout << "\n";

  // A layer with no kernel for this operator (here the Tracer key, switched on for this thread):
  // the error names the operator, the key and the keys that do have kernels.
  try {
    loom::Stack s{a, b, 1.0};
    loom::IncludeDispatchKeyGuard tracer(loom::DispatchKey::Tracer);
    op.call_boxed(s);
  } catch (const loom::NotImplementedError& e) {
    std::cout << "expected error: " << e.what() << "\n";
  }
  return 0;
}
