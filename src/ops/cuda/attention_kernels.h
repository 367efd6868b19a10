// Launchers of the fused flash-attention kernels on CUDA (attention_kernels.cu, Note [Flash
// attention on tensor cores]); see Note [CUDA kernel files] in iter_args.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/iter_args.h"

namespace loom::cuda_ops {

// One attention problem: q (b, h, tq, d), k and v (b, h, tk, d) with element strides (batch, head,
// row) and a contiguous last dim; out (b, h, tq, d) likewise with its own strides (the forward's
// output, the backward's saved input), grad_out like out, dq, dk and dv like q, k and v; lse
// (b, h, tq) contiguous.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {};
  int64_t o_stride[3] = {}, go_stride[3] = {};                      // out, grad_out
  int64_t dq_stride[3] = {}, dk_stride[3] = {}, dv_stride[3] = {};  // the backward's outputs
  int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0;
  bool causal = false;
  float scale = 1.0f;
};

// Whether the kernels take this problem: bfloat16 / float16, d in {32, 64, 128}, q, k, v 16-byte
// aligned and every stride (out's and the backward's too) a multiple of 8 elements.
bool flash_attention_supported(ScalarCode dt, const AttentionArgs& a);

// Forward: out (dt) and lse (float32).
cudaError_t launch_flash_attention(ScalarCode dt, const AttentionArgs& a, void* out, float* lse,
                                   cudaStream_t stream);

// Bytes of float workspace the backward needs (the dq accumulator and the row deltas).
size_t flash_attention_backward_workspace_bytes(const AttentionArgs& a);
// Backward: writes dq, dk, dv (16-byte aligned) in dt, each at its strides.
cudaError_t launch_flash_attention_backward(ScalarCode dt, const AttentionArgs& a,
                                            const void* grad_out, const void* out, const float* lse,
                                            void* dq, void* dk, void* dv, void* workspace,
                                            cudaStream_t stream);

}  // namespace loom::cuda_ops
