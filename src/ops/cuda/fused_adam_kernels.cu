// The multi-tensor Adam kernel (Note [Multi-tensor Adam] in fused_adam.cpp). Each block updates one
// chunk of one tensor; the element arithmetic is the CPU fused step's, written with the
// round-to-nearest intrinsics so that nvcc contracts nothing the CPU loop does not (explicit fmaf
// where it calls fma).
#include "ops/cuda/fused_adam_kernels.h"

namespace loom::cuda_ops {
namespace {

constexpr int kAdamThreads = 512;

__global__ void __launch_bounds__(kAdamThreads)
    adam_chunks_kernel(const AdamTable table, const AdamScalarsF s) {
  const AdamTensor& t = table.tensors[table.tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(table.chunk[blockIdx.x]) * kAdamChunk;
  const int64_t end = begin + kAdamChunk < t.n ? begin + kAdamChunk : t.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float pi = __fmul_rn(t.p[i], s.decay);
    float gi = __fmul_rn(t.g[i], s.grad_sign);
    if (s.coupled_weight_decay) gi = fmaf(s.wd, pi, gi);
    const float mi = fmaf(s.one_minus_b1, gi, __fmul_rn(t.m[i], s.b1));
    const float vi = fmaf(__fmul_rn(s.one_minus_b2, gi), gi, __fmul_rn(t.v[i], s.b2));
    t.m[i] = mi;
    t.v[i] = vi;
    float vhat = vi;
    if (s.amsgrad) {
      const float old = t.vmax[i];
      vhat = (old < vi || vi != vi) ? vi : old;  // torch.maximum: NaN wins
      t.vmax[i] = vhat;
    }
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vhat), t.bc2_sqrt), s.eps);
    t.p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(t.neg_step_size, mi), denom));
  }
}

}  // namespace

cudaError_t launch_fused_adam(const AdamTable& table, int chunks, const AdamScalarsF& s,
                              cudaStream_t stream) {
  adam_chunks_kernel<<<static_cast<unsigned>(chunks), kAdamThreads, 0, stream>>>(table, s);
  return cudaGetLastError();
}

}  // namespace loom::cuda_ops
