// The CUDA kernel of loom::_fused_adam_ (Note [Multi-tensor Adam] in fused_adam.cpp): fills
// tables of (tensor, chunk) pairs and launches one kernel per table on the current stream.
#include <cmath>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/fused_adam_kernels.h"
#include "ops/fused_shapes.h"

namespace loom {
namespace {

void fused_adam_cuda(TensorList params, TensorList grads, TensorList exp_avgs,
                     TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, double lr, double beta1,
                     double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                     bool decoupled, IntArrayRef steps) {
  constexpr const char* name = "loom::_fused_adam_";
  check_fused_adam_lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, amsgrad, steps,
                         /*allow_double=*/false);
  if (params.empty()) return;
  LOOM_CHECK(params[0].is_cuda(), "[_fused_adam_] expected CUDA tensors but got ",
             params[0].device());
  const DeviceGuard guard(params[0].device());
  cudaStream_t stream = cuda_ops::stream_of(params[0]);
  cuda_ops::AdamScalarsF s{};
  s.grad_sign = maximize ? -1.0f : 1.0f;
  s.b1 = static_cast<float>(beta1);
  s.b2 = static_cast<float>(beta2);
  s.one_minus_b1 = static_cast<float>(1.0 - beta1);
  s.one_minus_b2 = static_cast<float>(1.0 - beta2);
  s.wd = static_cast<float>(weight_decay);
  s.decay = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  s.eps = static_cast<float>(eps);
  s.coupled_weight_decay = !decoupled && weight_decay != 0.0;
  s.amsgrad = amsgrad;

  cuda_ops::AdamTable table{};
  int nt = 0, nc = 0;
  auto launch = [&] {
    cuda_ops::check_launch(cuda_ops::launch_fused_adam(table, nc, s, stream), name);
    nc = 0;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    const auto t = static_cast<double>(steps[i]);
    cuda_ops::AdamTensor& e = table.tensors[nt];
    e.p = static_cast<float*>(params[i].data_ptr());
    e.g = static_cast<const float*>(grads[i].data_ptr());
    e.m = static_cast<float*>(exp_avgs[i].data_ptr());
    e.v = static_cast<float*>(exp_avg_sqs[i].data_ptr());
    e.vmax = amsgrad ? static_cast<float*>(max_exp_avg_sqs[i].data_ptr()) : nullptr;
    e.n = n;
    e.neg_step_size = static_cast<float>(-(lr / (1.0 - std::pow(beta1, t))));
    e.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t)));
    const int64_t chunks = (n + cuda_ops::kAdamChunk - 1) / cuda_ops::kAdamChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      table.tensor[nc] = static_cast<uint8_t>(nt);
      table.chunk[nc] = static_cast<int32_t>(c);
      ++nc;
      if (nc == cuda_ops::kAdamMaxChunks) {
        launch();
        if (c + 1 < chunks) {  // the tensor goes on in the next table, as its slot 0
          table.tensors[0] = table.tensors[nt];
          nt = 0;
        } else {
          nt = -1;
        }
      }
    }
    if (++nt == cuda_ops::kAdamMaxTensors) {
      if (nc > 0) launch();
      nt = 0;
    }
  }
  if (nc > 0) launch();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].storage()->bump_version();
    exp_avgs[i].storage()->bump_version();
    exp_avg_sqs[i].storage()->bump_version();
    if (amsgrad) max_exp_avg_sqs[i].storage()->bump_version();
  }
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("_fused_adam_", fused_adam_cuda);
}

}  // namespace loom
