// CUDA kernels of _flash_attention and _flash_attention_backward for bfloat16 and float16.
//
// Note [Flash attention on tensor cores]
// Both passes run on mma.sync.m16n8k16 (bf16/f16 inputs, float accumulators), four warps a block,
// and never hold more than a tile of scores.
// Forward: a block owns 64 query rows of one (batch, head); each warp 16 of them, its q fragments
// in registers for the whole pass. It walks 64-key tiles of k and v (double-buffered in shared
// memory with cp.async, so the next tile loads while this one computes; under the causal mask only
// the tiles up to the diagonal). Per tile a warp computes its 16 x 64 scores S = q k^T, scales them
// into base 2, masks, and updates its rows' running max m and sum l (online softmax: the output
// accumulators are rescaled by 2^(m_old - m_new)); the probabilities, rounded to bf16/f16, are
// reused straight from the accumulator registers as the A operand of O += P v (the accumulator
// layout of two adjacent n8 tiles is the A layout of one k16 step). k fragments come from shared
// memory by ldmatrix, v fragments by ldmatrix.trans. Out = O / l, lse = ln 2 (m + log2 l).
// Causal blocks are scheduled heaviest first.
// Backward (FlashAttention-2's order): a prologue computes delta_i = sum_d dO_id O_id and zeroes a
// float dq accumulator. A block owns 64 keys (16 per warp) and keeps their dk and dv accumulators
// in registers while it walks the query tiles that see them. Per tile each warp computes the
// transposed scores S^T = k q^T of its keys, P^T = 2^(S^T - lse), dv += P^T dO, dP^T = v dO^T,
// dS^T = P^T (dP^T - delta), dk += dS^T q (the C -> A register reuse again), then writes dS^T to
// shared memory so that the four warps together add dq += dS k for the tile into the float
// accumulator with atomics. An epilogue converts dq. Rows past the end, keys past the end and
// masked pairs get probability 0. The order of the dq atomics varies between runs, so dq may differ
// in the last bits from run to run; dk and dv do not.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/attention_kernels.h"

namespace loom::cuda_ops {
namespace {

constexpr int kThreads = 128;  // four warps
constexpr int kTile = 64;      // keys per tile (forward), keys per block (backward)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: fill with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

template <bool kBf16>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <bool kBf16>
__device__ __forceinline__ float to_float(uint16_t bits) {
  if constexpr (kBf16) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}

template <bool kBf16>
__device__ __forceinline__ uint16_t from_float(float x) {
  if constexpr (kBf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

// C fragments of two adjacent n8 tiles (16 rows x 16 columns) as the A fragment of one k16 step.
template <bool kBf16>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4],
                                       const float (&hi)[4]) {
  a[0] = pack2<kBf16>(lo[0], lo[1]);
  a[1] = pack2<kBf16>(lo[2], lo[3]);
  a[2] = pack2<kBf16>(hi[0], hi[1]);
  a[3] = pack2<kBf16>(hi[2], hi[3]);
}

// Copies rows [row0, row0 + kRows) of a matrix (row stride `stride` elements, kD contiguous
// columns) into shared memory rows of pitch kD + 8 (the padding keeps ldmatrix free of bank
// conflicts); rows >= nrows are zero-filled.
template <int kRows, int kD>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t stride,
                                          int64_t row0, int64_t nrows) {
  constexpr int kChunks = kD / 8;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int64_t row = row0 + r;
    const bool valid = row < nrows;
    cp_async16(dst + r * (kD + 8) + col, src + (valid ? row * stride + col : 0), valid);
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- forward ----

// Forward tiling per head_dim: kM query tiles of 16 rows per warp (a block owns 64 kM rows; the
// k and v fragments a warp loads serve all its tiles), kBk keys per tile, and whether the q
// fragments stay in registers for the whole pass (head_dim 128 reloads them from shared memory
// each tile, to stay within the register file).
template <int kD>
struct FwdTraits {
  static constexpr int kM = 2;
  static constexpr int kBk = kD == 128 ? 32 : 64;
  static constexpr bool kQInRegs = kD != 128;
  static constexpr int kRows = 64 * kM;  // query rows per block
  static constexpr size_t smem_bytes() {
    return static_cast<size_t>(kRows + 4 * kBk) * (kD + 8) * sizeof(uint16_t);
  }
};

template <bool kBf16, int kD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_fwd_kernel(AttentionArgs a, uint16_t* out, float* lse, int num_qblocks) {
  using Tr = FwdTraits<kD>;
  constexpr int kM = Tr::kM, kBk = Tr::kBk, kRows = Tr::kRows, kP = kD + 8;
  constexpr int kQf = Tr::kQInRegs ? kD / 16 : 1;  // q fragments kept per m tile
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sq = smem;               // kRows x kP
  uint16_t* sk = sq + kRows * kP;    // 2 x kBk x kP
  uint16_t* sv = sk + 2 * kBk * kP;  // 2 x kBk x kP
  const int qblock = kCausal ? num_qblocks - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
  const int64_t bh = blockIdx.y, bi = bh / a.h, hi = bh % a.h;
  const uint16_t* q = static_cast<const uint16_t*>(a.q) + bi * a.q_stride[0] + hi * a.q_stride[1];
  const uint16_t* k = static_cast<const uint16_t*>(a.k) + bi * a.k_stride[0] + hi * a.k_stride[1];
  const uint16_t* v = static_cast<const uint16_t*>(a.v) + bi * a.v_stride[0] + hi * a.v_stride[1];
  const int64_t q0 = static_cast<int64_t>(qblock) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t key_end = kCausal ? min(a.tk, q0 + kRows) : a.tk;
  const int ntiles = static_cast<int>((key_end + kBk - 1) / kBk);
  const int wrow = warp * 16 * kM;  // the warp's first row within the block

  load_tile<kRows, kD>(sq, q, a.q_stride[2], q0, a.tq);
  if (ntiles > 0) {
    load_tile<kBk, kD>(sk, k, a.k_stride[2], 0, a.tk);
    load_tile<kBk, kD>(sv, v, a.v_stride[2], 0, a.tk);
  }
  cp_async_commit();

  float o[kM][kD / 8][4];
  float m[kM][2], l[kM][2];
  uint32_t qf[kM][kQf][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
    m[mi][0] = m[mi][1] = -INFINITY;
    l[mi][0] = l[mi][1] = 0.0f;
  }
  const float scale2 = a.scale * kLog2e;

  for (int n = 0; n < ntiles; ++n) {
    if (n + 1 < ntiles) {
      const int nb = (n + 1) & 1;
      const int64_t r0 = static_cast<int64_t>(n + 1) * kBk;
      load_tile<kBk, kD>(sk + nb * kBk * kP, k, a.k_stride[2], r0, a.tk);
      load_tile<kBk, kD>(sv + nb * kBk * kP, v, a.v_stride[2], r0, a.tk);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (Tr::kQInRegs && n == 0) {
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int kk = 0; kk < kQf; ++kk)
          ldsm_x4(qf[mi][kk], sq + (wrow + mi * 16 + lane % 16) * kP + kk * 16 + (lane / 16) * 8);
    }
    const uint16_t* ck = sk + (n & 1) * kBk * kP;
    const uint16_t* cv = sv + (n & 1) * kBk * kP;

    float s[kM][kBk / 8][4];
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int i = 0; i < kBk / 8; ++i)
        s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t qa[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        if constexpr (Tr::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mi][e] = qf[mi][kk][e];
        } else {
          ldsm_x4(qa[mi], sq + (wrow + mi * 16 + lane % 16) * kP + kk * 16 + (lane / 16) * 8);
        }
      }
#pragma unroll
      for (int np = 0; np < kBk / 16; ++np) {
        uint32_t r[4];
        ldsm_x4(r,
                ck + (np * 16 + lane % 8 + (lane / 16) * 8) * kP + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          mma<kBf16>(s[mi][2 * np], qa[mi], r[0], r[1]);
          mma<kBf16>(s[mi][2 * np + 1], qa[mi], r[2], r[3]);
        }
      }
    }
    const int64_t k0 = static_cast<int64_t>(n) * kBk;
    // Only the tiles on the diagonal and the last, partial one need the mask.
    const bool need_mask = k0 + kBk > a.tk || (kCausal && k0 + kBk - 1 > q0);
    const int key_rel0 = static_cast<int>(k0 - q0) + 2 * t;  // keys relative to q0
    const int tk_rel = static_cast<int>(a.tk - q0);
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
      const int ra = wrow + mi * 16 + g, rb = ra + 8;  // rows relative to q0
      float mx0 = m[mi][0], mx1 = m[mi][1];
#pragma unroll
      for (int nt = 0; nt < kBk / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nt][e] *= scale2;
        if (need_mask) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key_rel0 + nt * 8 + (e & 1), row = e < 2 ? ra : rb;
            if (key >= tk_rel || (kCausal && key > row)) s[mi][nt][e] = -INFINITY;
          }
        }
        mx0 = fmaxf(mx0, fmaxf(s[mi][nt][0], s[mi][nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[mi][nt][2], s[mi][nt][3]));
      }
      mx0 = quad_max(mx0);
      mx1 = quad_max(mx1);
      // A row with nothing visible yet keeps m = -inf; subtract 0 then so that exp2 gives 0.
      const float mu0 = mx0 == -INFINITY ? 0.0f : mx0, mu1 = mx1 == -INFINITY ? 0.0f : mx1;
      const float c0 = exp2f(m[mi][0] - mu0), c1 = exp2f(m[mi][1] - mu1);
      m[mi][0] = mx0;
      m[mi][1] = mx1;
      l[mi][0] *= c0;
      l[mi][1] *= c1;
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {
        o[mi][i][0] *= c0;
        o[mi][i][1] *= c0;
        o[mi][i][2] *= c1;
        o[mi][i][3] *= c1;
      }
#pragma unroll
      for (int nt = 0; nt < kBk / 8; ++nt) {
        s[mi][nt][0] = exp2f(s[mi][nt][0] - mu0);
        s[mi][nt][1] = exp2f(s[mi][nt][1] - mu0);
        s[mi][nt][2] = exp2f(s[mi][nt][2] - mu1);
        s[mi][nt][3] = exp2f(s[mi][nt][3] - mu1);
        l[mi][0] += s[mi][nt][0] + s[mi][nt][1];
        l[mi][1] += s[mi][nt][2] + s[mi][nt][3];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t pa[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) c_to_a<kBf16>(pa[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        uint32_t r[4];
        ldsm_x4_t(
            r, cv + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + dp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          mma<kBf16>(o[mi][2 * dp], pa[mi], r[0], r[1]);
          mma<kBf16>(o[mi][2 * dp + 1], pa[mi], r[2], r[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

  uint16_t* ob = out + bi * a.o_stride[0] + hi * a.o_stride[1];
  const int64_t os = a.o_stride[2];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
    const float l0 = quad_sum(l[mi][0]), l1 = quad_sum(l[mi][1]);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    const int64_t row_a = q0 + wrow + mi * 16 + g, row_b = row_a + 8;
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      const int col = i * 8 + 2 * t;
      if (row_a < a.tq)
        *reinterpret_cast<uint32_t*>(ob + row_a * os + col) =
            pack2<kBf16>(o[mi][i][0] * inv0, o[mi][i][1] * inv0);
      if (row_b < a.tq)
        *reinterpret_cast<uint32_t*>(ob + row_b * os + col) =
            pack2<kBf16>(o[mi][i][2] * inv1, o[mi][i][3] * inv1);
    }
    if (t == 0) {
      if (row_a < a.tq)
        lse[bh * a.tq + row_a] = l0 > 0.0f ? (m[mi][0] + log2f(l0)) * kLn2 : -INFINITY;
      if (row_b < a.tq)
        lse[bh * a.tq + row_b] = l1 > 0.0f ? (m[mi][1] + log2f(l1)) * kLn2 : -INFINITY;
    }
  }
}

// ---- backward ----

// Query rows per tile: 64, or 32 for head_dim 128 (to keep dk and dv in registers).
template <int kD>
constexpr int bwd_rows() {
  return kD == 128 ? 32 : 64;
}

template <int kD>
constexpr size_t bwd_smem_bytes() {
  constexpr int kBq = bwd_rows<kD>();
  return static_cast<size_t>(2 * kTile + 2 * kBq) * (kD + 8) * sizeof(uint16_t) +
         static_cast<size_t>(kTile) * (kBq + 8) * sizeof(uint16_t) + 2 * kBq * sizeof(float);
}

// The element offset of row `row` (a flat index over (batch, head, row)) at strides s.
__device__ __forceinline__ int64_t row_offset(const AttentionArgs& a, const int64_t* s, int64_t row,
                                              int64_t len) {
  const int64_t bh = row / len, i = row - bh * len, bi = bh / a.h, hi = bh - bi * a.h;
  return bi * s[0] + hi * s[1] + i * s[2];
}

// delta_i = sum_d dO_id O_id per row, and dq_acc zeroed; one warp per row.
template <bool kBf16>
__global__ void flash_bwd_prologue(AttentionArgs a, const uint16_t* go, const uint16_t* o,
                                   float* delta, float* dq_acc, int64_t rows, int d) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const uint16_t* gr = go + row_offset(a, a.go_stride, row, a.tq);
  const uint16_t* orow = o + row_offset(a, a.o_stride, row, a.tq);
  float s = 0.0f;
  for (int c = lane; c < d; c += 32) {
    s += to_float<kBf16>(gr[c]) * to_float<kBf16>(orow[c]);
    dq_acc[row * d + c] = 0.0f;
  }
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) delta[row] = s;
}

// dq from its float accumulator (rows x kD, contiguous) at dq's strides, eight columns a thread.
template <bool kBf16, int kD>
__global__ void flash_bwd_epilogue(AttentionArgs a, const float* dq_acc, uint16_t* dq,
                                   int64_t rows) {
  constexpr int kPer = kD / 8;
  const int64_t n = rows * kPer;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / kPer;
    const int c = static_cast<int>(i - row * kPer) * 8;
    const float4 x0 = *reinterpret_cast<const float4*>(dq_acc + row * kD + c);
    const float4 x1 = *reinterpret_cast<const float4*>(dq_acc + row * kD + c + 4);
    uint4 o;
    o.x = pack2<kBf16>(x0.x, x0.y);
    o.y = pack2<kBf16>(x0.z, x0.w);
    o.z = pack2<kBf16>(x1.x, x1.y);
    o.w = pack2<kBf16>(x1.z, x1.w);
    *reinterpret_cast<uint4*>(dq + row_offset(a, a.dq_stride, row, a.tq) + c) = o;
  }
}

template <bool kBf16, int kD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_kernel(AttentionArgs a, const uint16_t* grad_out, const float* lse,
                     const float* delta, float* dq_acc, uint16_t* dk_out, uint16_t* dv_out) {
  constexpr int kP = kD + 8;
  constexpr int kBq = bwd_rows<kD>();
  constexpr int kPs = kBq + 8;
  constexpr int kRowGroups = kBq / 16;     // warps along the tile's query rows for dq
  constexpr int kDParts = 4 / kRowGroups;  // and along head_dim
  constexpr int kDq = kD / kDParts;        // dq columns per warp
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sk = smem;                                        // kTile x kP
  uint16_t* sv = sk + kTile * kP;                             // kTile x kP
  uint16_t* sq = sv + kTile * kP;                             // kBq x kP
  uint16_t* sdo = sq + kBq * kP;                              // kBq x kP
  uint16_t* sds = sdo + kBq * kP;                             // kTile x kPs: dS^T, keys x queries
  float* slse = reinterpret_cast<float*>(sds + kTile * kPs);  // kBq, base 2
  float* sdelta = slse + kBq;                                 // kBq

  const int64_t bh = blockIdx.y, bi = bh / a.h, hi = bh % a.h;
  const uint16_t* q = static_cast<const uint16_t*>(a.q) + bi * a.q_stride[0] + hi * a.q_stride[1];
  const uint16_t* k = static_cast<const uint16_t*>(a.k) + bi * a.k_stride[0] + hi * a.k_stride[1];
  const uint16_t* v = static_cast<const uint16_t*>(a.v) + bi * a.v_stride[0] + hi * a.v_stride[1];
  const uint16_t* go = grad_out + bi * a.go_stride[0] + hi * a.go_stride[1];
  const float* lse_b = lse + bh * a.tq;
  const float* delta_b = delta + bh * a.tq;
  float* dqa_b = dq_acc + bh * a.tq * kD;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t key_a = k0 + warp * 16 + g, key_b = key_a + 8;
  const float scale2 = a.scale * kLog2e;

  load_tile<kTile, kD>(sk, k, a.k_stride[2], k0, a.tk);
  load_tile<kTile, kD>(sv, v, a.v_stride[2], k0, a.tk);

  float dk[kD / 8][4], dv[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;

  const int rg = warp % kRowGroups, dpart = warp / kRowGroups;
  for (int64_t i0 = kCausal ? (k0 / kBq) * kBq : 0; i0 < a.tq; i0 += kBq) {
    load_tile<kBq, kD>(sq, q, a.q_stride[2], i0, a.tq);
    load_tile<kBq, kD>(sdo, go, a.go_stride[2], i0, a.tq);
    cp_async_commit();
    for (int r = threadIdx.x; r < kBq; r += kThreads) {
      const int64_t i = i0 + r;
      slse[r] = i < a.tq ? lse_b[i] * kLog2e : INFINITY;
      sdelta[r] = i < a.tq ? delta_b[i] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();

    // S^T = k q^T for this warp's 16 keys, then P^T.
    float st[kBq / 8][4];
#pragma unroll
    for (int i = 0; i < kBq / 8; ++i) st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t ka[4];
      ldsm_x4(ka, sk + (warp * 16 + lane % 16) * kP + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < kBq / 16; ++np) {
        uint32_t r[4];
        ldsm_x4(r,
                sq + (np * 16 + lane % 8 + (lane / 16) * 8) * kP + kk * 16 + ((lane / 8) % 2) * 8);
        mma<kBf16>(st[2 * np], ka, r[0], r[1]);
        mma<kBf16>(st[2 * np + 1], ka, r[2], r[3]);
      }
    }
    // Only tiles that cross the diagonal or hold the last keys need the mask (rows past the end
    // have lse = +inf, so their probabilities are 0 anyway).
    const bool need_mask = k0 + kTile > a.tk || (kCausal && i0 < k0 + kTile - 1);
    const int tk_rel = static_cast<int>(a.tk - i0);
    const int ka = static_cast<int>(key_a - i0), kb = ka + 8;  // keys relative to i0
#pragma unroll
    for (int nt = 0; nt < kBq / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * t + (e & 1);
        float p = exp2f(st[nt][e] * scale2 - slse[ql]);
        if (need_mask) {
          const int key = e < 2 ? ka : kb;
          if (key >= tk_rel || (kCausal && ql < key)) p = 0.0f;
        }
        st[nt][e] = p;
      }
    }
    // dv += P^T dO.
#pragma unroll
    for (int kk = 0; kk < kBq / 16; ++kk) {
      uint32_t pa[4];
      c_to_a<kBf16>(pa, st[2 * kk], st[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        uint32_t r[4];
        ldsm_x4_t(
            r, sdo + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + dp * 16 + (lane / 16) * 8);
        mma<kBf16>(dv[2 * dp], pa, r[0], r[1]);
        mma<kBf16>(dv[2 * dp + 1], pa, r[2], r[3]);
      }
    }
    // dP^T = v dO^T, then dS^T = P^T (dP^T - delta).
    float dpt[kBq / 8][4];
#pragma unroll
    for (int i = 0; i < kBq / 8; ++i) dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t va[4];
      ldsm_x4(va, sv + (warp * 16 + lane % 16) * kP + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int np = 0; np < kBq / 16; ++np) {
        uint32_t r[4];
        ldsm_x4(r,
                sdo + (np * 16 + lane % 8 + (lane / 16) * 8) * kP + kk * 16 + ((lane / 8) % 2) * 8);
        mma<kBf16>(dpt[2 * np], va, r[0], r[1]);
        mma<kBf16>(dpt[2 * np + 1], va, r[2], r[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kBq / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dpt[nt][e] = st[nt][e] * (dpt[nt][e] - sdelta[nt * 8 + 2 * t + (e & 1)]);
    }
    // dk += dS^T q, and dS^T to shared memory for dq.
#pragma unroll
    for (int kk = 0; kk < kBq / 16; ++kk) {
      uint32_t da[4];
      c_to_a<kBf16>(da, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dp = 0; dp < kD / 16; ++dp) {
        uint32_t r[4];
        ldsm_x4_t(
            r, sq + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + dp * 16 + (lane / 16) * 8);
        mma<kBf16>(dk[2 * dp], da, r[0], r[1]);
        mma<kBf16>(dk[2 * dp + 1], da, r[2], r[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kBq / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(sds + (warp * 16 + g) * kPs + col) =
          pack2<kBf16>(dpt[nt][0], dpt[nt][1]);
      *reinterpret_cast<uint32_t*>(sds + (warp * 16 + g + 8) * kPs + col) =
          pack2<kBf16>(dpt[nt][2], dpt[nt][3]);
    }
    __syncthreads();
    // dq (this warp's 16 rows x kDq columns of the tile) += dS k, into the float accumulator.
    float dq[kDq / 8][4];
#pragma unroll
    for (int i = 0; i < kDq / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t sa[4];
      ldsm_x4_t(
          sa, sds + (kk * 16 + lane % 8 + (lane / 16) * 8) * kPs + rg * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int dp = 0; dp < kDq / 16; ++dp) {
        uint32_t r[4];
        ldsm_x4_t(r, sk + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + dpart * kDq + dp * 16 +
                         (lane / 16) * 8);
        mma<kBf16>(dq[2 * dp], sa, r[0], r[1]);
        mma<kBf16>(dq[2 * dp + 1], sa, r[2], r[3]);
      }
    }
    const int64_t qa = i0 + rg * 16 + g, qb = qa + 8;
#pragma unroll
    for (int i = 0; i < kDq / 8; ++i) {
      const int col = dpart * kDq + i * 8 + 2 * t;
      if (qa < a.tq) {
        atomicAdd(dqa_b + qa * kD + col, dq[i][0] * a.scale);
        atomicAdd(dqa_b + qa * kD + col + 1, dq[i][1] * a.scale);
      }
      if (qb < a.tq) {
        atomicAdd(dqa_b + qb * kD + col, dq[i][2] * a.scale);
        atomicAdd(dqa_b + qb * kD + col + 1, dq[i][3] * a.scale);
      }
    }
    __syncthreads();  // the next tile overwrites sq, sdo and sds
  }
  uint16_t* dkb = dk_out + bi * a.dk_stride[0] + hi * a.dk_stride[1];
  uint16_t* dvb = dv_out + bi * a.dv_stride[0] + hi * a.dv_stride[1];
  const int64_t dks = a.dk_stride[2], dvs = a.dv_stride[2];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    const int col = i * 8 + 2 * t;
    if (key_a < a.tk) {
      *reinterpret_cast<uint32_t*>(dkb + key_a * dks + col) =
          pack2<kBf16>(dk[i][0] * a.scale, dk[i][1] * a.scale);
      *reinterpret_cast<uint32_t*>(dvb + key_a * dvs + col) = pack2<kBf16>(dv[i][0], dv[i][1]);
    }
    if (key_b < a.tk) {
      *reinterpret_cast<uint32_t*>(dkb + key_b * dks + col) =
          pack2<kBf16>(dk[i][2] * a.scale, dk[i][3] * a.scale);
      *reinterpret_cast<uint32_t*>(dvb + key_b * dvs + col) = pack2<kBf16>(dv[i][2], dv[i][3]);
    }
  }
}

// ---- launchers ----

template <bool kBf16, int kD, bool kCausal>
cudaError_t run_fwd(const AttentionArgs& a, void* out, float* lse, cudaStream_t stream) {
  constexpr size_t bytes = FwdTraits<kD>::smem_bytes();
  constexpr int kRows = FwdTraits<kD>::kRows;
  static const cudaError_t attr =
      cudaFuncSetAttribute(flash_fwd_kernel<kBf16, kD, kCausal>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (attr != cudaSuccess) return attr;
  const int nq = static_cast<int>((a.tq + kRows - 1) / kRows);
  flash_fwd_kernel<kBf16, kD, kCausal>
      <<<dim3(nq, static_cast<unsigned>(a.b * a.h)), kThreads, bytes, stream>>>(
          a, static_cast<uint16_t*>(out), lse, nq);
  return cudaGetLastError();
}

template <bool kBf16, int kD, bool kCausal>
cudaError_t run_bwd(const AttentionArgs& a, const void* grad_out, const void* out, const float* lse,
                    void* dq, void* dk, void* dv, void* workspace, cudaStream_t stream) {
  const int64_t rows = a.b * a.h * a.tq;
  float* dq_acc = static_cast<float*>(workspace);
  float* delta = dq_acc + rows * kD;
  if (rows > 0) {
    flash_bwd_prologue<kBf16><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        a, static_cast<const uint16_t*>(grad_out), static_cast<const uint16_t*>(out), delta, dq_acc,
        rows, kD);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (a.tk > 0) {
    constexpr size_t bytes = bwd_smem_bytes<kD>();
    static const cudaError_t attr =
        cudaFuncSetAttribute(flash_bwd_kernel<kBf16, kD, kCausal>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (attr != cudaSuccess) return attr;
    const unsigned nk = static_cast<unsigned>((a.tk + kTile - 1) / kTile);
    flash_bwd_kernel<kBf16, kD, kCausal>
        <<<dim3(nk, static_cast<unsigned>(a.b * a.h)), kThreads, bytes, stream>>>(
            a, static_cast<const uint16_t*>(grad_out), lse, delta, dq_acc,
            static_cast<uint16_t*>(dk), static_cast<uint16_t*>(dv));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (rows > 0) {
    const int64_t n = rows * (kD / 8);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
    flash_bwd_epilogue<kBf16, kD>
        <<<blocks, 256, 0, stream>>>(a, dq_acc, static_cast<uint16_t*>(dq), rows);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

template <bool kBf16, bool kCausal>
cudaError_t fwd_by_d(const AttentionArgs& a, void* out, float* lse, cudaStream_t stream) {
  switch (a.d) {
    case 32:
      return run_fwd<kBf16, 32, kCausal>(a, out, lse, stream);
    case 64:
      return run_fwd<kBf16, 64, kCausal>(a, out, lse, stream);
    case 128:
      return run_fwd<kBf16, 128, kCausal>(a, out, lse, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <bool kBf16, bool kCausal>
cudaError_t bwd_by_d(const AttentionArgs& a, const void* grad_out, const void* out,
                     const float* lse, void* dq, void* dk, void* dv, void* workspace,
                     cudaStream_t stream) {
  switch (a.d) {
    case 32:
      return run_bwd<kBf16, 32, kCausal>(a, grad_out, out, lse, dq, dk, dv, workspace, stream);
    case 64:
      return run_bwd<kBf16, 64, kCausal>(a, grad_out, out, lse, dq, dk, dv, workspace, stream);
    case 128:
      return run_bwd<kBf16, 128, kCausal>(a, grad_out, out, lse, dq, dk, dv, workspace, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

bool flash_attention_supported(ScalarCode dt, const AttentionArgs& a) {
  if (dt != ScalarCode::BFloat16 && dt != ScalarCode::Float16) return false;
  if (a.d != 32 && a.d != 64 && a.d != 128) return false;
  for (const void* p : {a.q, a.k, a.v})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (int i = 0; i < 3; ++i)
    for (const int64_t* st : {a.q_stride, a.k_stride, a.v_stride, a.o_stride, a.go_stride,
                              a.dq_stride, a.dk_stride, a.dv_stride})
      if (st[i] % 8 != 0) return false;
  return a.b * a.h <= 65535;
}

cudaError_t launch_flash_attention(ScalarCode dt, const AttentionArgs& a, void* out, float* lse,
                                   cudaStream_t stream) {
  if (a.b * a.h * a.tq == 0) return cudaSuccess;
  if (dt == ScalarCode::BFloat16) {
    return a.causal ? fwd_by_d<true, true>(a, out, lse, stream)
                    : fwd_by_d<true, false>(a, out, lse, stream);
  }
  return a.causal ? fwd_by_d<false, true>(a, out, lse, stream)
                  : fwd_by_d<false, false>(a, out, lse, stream);
}

size_t flash_attention_backward_workspace_bytes(const AttentionArgs& a) {
  return static_cast<size_t>(a.b * a.h * a.tq) * static_cast<size_t>(a.d + 1) * sizeof(float);
}

cudaError_t launch_flash_attention_backward(ScalarCode dt, const AttentionArgs& a,
                                            const void* grad_out, const void* out, const float* lse,
                                            void* dq, void* dk, void* dv, void* workspace,
                                            cudaStream_t stream) {
  if (a.b * a.h == 0) return cudaSuccess;
  if (dt == ScalarCode::BFloat16) {
    return a.causal ? bwd_by_d<true, true>(a, grad_out, out, lse, dq, dk, dv, workspace, stream)
                    : bwd_by_d<true, false>(a, grad_out, out, lse, dq, dk, dv, workspace, stream);
  }
  return a.causal ? bwd_by_d<false, true>(a, grad_out, out, lse, dq, dk, dv, workspace, stream)
                  : bwd_by_d<false, false>(a, grad_out, out, lse, dq, dk, dv, workspace, stream);
}

}  // namespace loom::cuda_ops
