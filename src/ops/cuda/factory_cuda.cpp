// CUDA kernels of the factories that write values (arange, linspace, eye, one_hot), the random
// factories (rand, randn, randint) and dropout (native_dropout and its backward). Shapes and checks
// are the operators' shape functions (shapes.h), as on the CPU; the random kernels reserve the same
// draws from the same Generator as the CPU kernels, so both give the same numbers for one seed
// (Note [Same random numbers on every device], philox.h; Note [Dropout draws], nn_kernels.cpp).
#include <algorithm>

#include "loom/generator.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/factory_kernels.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

using cuda_ops::check_launch;
using cuda_ops::code_of;
using cuda_ops::stream_of;

Generator gen_or_default(const std::optional<Generator>& g) {
  return g ? *g : default_generator();
}

// The output of a factory on `device` (a CUDA device: the dispatcher chose this kernel from it).
Tensor factory_output(const TensorMeta& m, const std::optional<Device>& device) {
  LOOM_INTERNAL_ASSERT(device.has_value() && device->is_cuda(),
                       "[cuda] a CUDA factory kernel called without a CUDA device");
  return allocate_output(m, *device);
}

Tensor arange_cuda(const Scalar& start, const Scalar& end, const Scalar& step,
                   std::optional<DType> dtype, std::optional<Device> device) {
  Tensor t = factory_output(arange_shape(start, end, step, dtype, device), device);
  const bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  cuda_ops::KernelGuard guard(t);
  check_launch(cuda_ops::launch_arange(t.data_ptr(), code_of(t.dtype()), t.numel(), all_int,
                                       all_int ? start.to_int() : 0, all_int ? step.to_int() : 0,
                                       start.to_double(), step.to_double(), stream_of(t)),
               "arange");
  return t;
}

Tensor linspace_cuda(const Scalar& start, const Scalar& end, int64_t steps,
                     std::optional<DType> dtype, std::optional<Device> device) {
  Tensor t = factory_output(linspace_shape(start, end, steps, dtype, device), device);
  if (steps == 0) return t;
  const double a = start.to_double(), b = end.to_double();
  const double step = steps > 1 ? (b - a) / static_cast<double>(steps - 1) : 0.0;
  cuda_ops::KernelGuard guard(t);
  check_launch(
      cuda_ops::launch_linspace(t.data_ptr(), code_of(t.dtype()), steps, a, b, step, stream_of(t)),
      "linspace");
  return t;
}

Tensor eye_cuda(int64_t n, std::optional<int64_t> m, std::optional<DType> dtype,
                std::optional<Device> device) {
  Tensor t = factory_output(eye_shape(n, m, dtype, device), device);
  cuda_ops::KernelGuard guard(t);
  check_launch(
      cuda_ops::launch_eye(t.data_ptr(), code_of(t.dtype()), n, m.value_or(n), stream_of(t)),
      "eye");
  return t;
}

Tensor rand_cuda(IntArrayRef size, const std::optional<Generator>& gen, std::optional<DType> dtype,
                 std::optional<Device> device) {
  Tensor t = factory_output(rand_shape(size, gen, dtype, device), device);
  const int64_t n = t.numel();
  const bool wide = t.dtype() == kFloat64;
  const GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(n) * (wide ? 2 : 1));
  cuda_ops::KernelGuard guard(t);
  check_launch(
      cuda_ops::launch_rand(t.data_ptr(), code_of(t.dtype()), n, st.seed, st.offset, stream_of(t)),
      "rand");
  return t;
}

Tensor randn_cuda(IntArrayRef size, const std::optional<Generator>& gen, std::optional<DType> dtype,
                  std::optional<Device> device) {
  Tensor t = factory_output(randn_shape(size, gen, dtype, device), device);
  const int64_t n = t.numel();
  const int64_t pairs = (n + 1) / 2;
  const GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(pairs) * 4);
  cuda_ops::KernelGuard guard(t);
  check_launch(
      cuda_ops::launch_randn(t.data_ptr(), code_of(t.dtype()), n, st.seed, st.offset, stream_of(t)),
      "randn");
  return t;
}

Tensor randint_cuda(int64_t low, int64_t high, IntArrayRef size,
                    const std::optional<Generator>& gen, std::optional<DType> dtype,
                    std::optional<Device> device) {
  Tensor t = factory_output(randint_shape(low, high, size, gen, dtype, device), device);
  const int64_t n = t.numel();
  const uint64_t range = static_cast<uint64_t>(high - low);
  const GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(n) * 2);
  cuda_ops::KernelGuard guard(t);
  check_launch(cuda_ops::launch_randint(t.data_ptr(), code_of(t.dtype()), n, low, range, st.seed,
                                        st.offset, stream_of(t)),
               "randint");
  return t;
}

// one_hot reads its indices on the host for num_classes=-1 and the range check (the CPU kernel's
// errors), then writes the ones on the device from the device copy of the indices.
Tensor one_hot_cuda(const Tensor& self, int64_t num_classes) {
  one_hot_check(self, num_classes);
  const Tensor host = self.to(kCPU).contiguous();
  const int64_t n = host.numel();
  const int64_t* v = host.data_ptr<int64_t>();
  if (num_classes == -1) {
    LOOM_CHECK(n > 0,
               "[one_hot] cannot infer the number of classes from an empty tensor; "
               "pass num_classes explicitly");
    num_classes = *std::max_element(v, v + n) + 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    LOOM_CHECK_INDEX(v[i] >= 0 && v[i] < num_classes, "[one_hot] class value ", v[i],
                     " is out of range for num_classes ", num_classes,
                     " (values must be in [0, num_classes))");
  }
  DimVector shape(self.sizes());
  shape.push_back(num_classes);
  Tensor out = empty_tensor(shape, kInt64, self.device());
  if (out.numel() == 0) return out;
  cuda_ops::KernelGuard guard(out);
  cudaStream_t stream = stream_of(out);
  LOOM_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream), "loom::one_hot");
  const Tensor idx = self.contiguous();
  check_launch(cuda_ops::launch_one_hot(out.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), n,
                                        num_classes, stream),
               "one_hot");
  return out;
}

// ---- dropout (the CPU loop: cpu/nn_kernels.cpp) ----

std::tuple<Tensor, Tensor> native_dropout_cuda(const Tensor& input, double p, bool train,
                                               const std::optional<Generator>& gen) {
  const std::array<TensorMeta, 2> ms = native_dropout_shape(input, p, train, gen);
  Tensor out = allocate_output(ms[0], input.device());
  Tensor mask = allocate_output(ms[1], input.device());
  const int64_t n = input.numel();
  if (n == 0) return {out, mask};
  cuda_ops::KernelGuard guard(input);
  cudaStream_t stream = stream_of(input);
  if (!train || p == 0.0) {
    copy_(out, input);
    LOOM_CUDA_CHECK(cudaMemsetAsync(mask.data_ptr(), 1, mask.nbytes(), stream),
                    "loom::native_dropout");
    return {out, mask};
  }
  const GeneratorState st = gen_or_default(gen).reserve(static_cast<uint64_t>(n));
  if (p == 1.0) {
    fill_(out, 0);
    LOOM_CUDA_CHECK(cudaMemsetAsync(mask.data_ptr(), 0, mask.nbytes(), stream),
                    "loom::native_dropout");
    return {out, mask};
  }
  const Tensor x = input.contiguous();
  check_launch(cuda_ops::launch_dropout(out.data_ptr(), mask.data_ptr<bool>(), x.data_ptr(),
                                        code_of(input.dtype()), n, static_cast<float>(1.0 - p),
                                        1.0 / (1.0 - p), st.seed, st.offset, stream),
               "native_dropout");
  return {out, mask};
}

Tensor native_dropout_backward_cuda(const Tensor& grad_output, const Tensor& mask, double scale) {
  constexpr const char* op = "native_dropout_backward";
  native_dropout_backward_shape(grad_output, mask, scale);
  TensorIteratorConfig cfg;
  cfg.op = op;
  cfg.outputs = {Tensor()};
  cfg.inputs = {grad_output, mask};
  cfg.input_skips_promotion = {false, true};
  TensorIterator it(std::move(cfg));
  cuda_ops::launch_iter(it, op, [scale](cuda_ops::IterArgs& a, cudaStream_t s) {
    return cuda_ops::launch_dropout_backward(a, scale, s);
  });
  it.finish();
  return it.output(0);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("arange", arange_cuda);
  m.impl("linspace", linspace_cuda);
  m.impl("eye", eye_cuda);
  m.impl("rand", rand_cuda);
  m.impl("randn", randn_cuda);
  m.impl("randint", randint_cuda);
  m.impl("one_hot", one_hot_cuda);
  m.impl("native_dropout", native_dropout_cuda);
  m.impl("native_dropout_backward", native_dropout_backward_cuda);
}

}  // namespace loom
