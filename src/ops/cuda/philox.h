// The CPU generator's counter -> number mapping (include/loom/generator.h, src/core/generator.cpp)
// for device code (ops layer, CUDA backend; internal). C++17 and free of loom's headers so that
// nvcc compiles it into the random kernels; also compiled by the host compiler, so a CPU-only test
// checks it against loom::philox4x32 and the CPU factories value by value.
//
// Note [Same random numbers on every device]
//   A random kernel reserves its draws from the same Generator (seed, offset) as the CPU kernel and
//   maps them to values with the functions below, which repeat the CPU's arithmetic exactly:
//   - rand:    float types: element i <- draw i (24 bits); float64: draws 2i, 2i+1 (53 bits);
//   - randn:   elements 2k, 2k+1 <- the 4 draws of block k (Box-Muller in double);
//   - randint: element i <- draws 2i, 2i+1 (64 bits modulo the range);
//   - dropout: element i kept when draw i, as a unit float, is below 1 - p.
//   Draw j of a reservation at `offset` is lane j % 4 of Philox(counter = offset + j / 4, key =
//   seed). So rand(n, cuda) equals rand(n) for the same generator state, bit for bit, and both
//   advance the generator alike. randn alone goes through log, sin and cos in double, whose device
//   versions may differ from glibc's in the last bit of a double (float results round alike).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LOOM_HOST_DEVICE inline
#endif

namespace loom::cuda_ops::philox {

struct Block {
  uint32_t v[4];
};

// Philox4x32-10 with a 128-bit counter (lo, hi) and a 64-bit key: the constants and round
// structure of loom::philox4x32.
LOOM_HOST_DEVICE Block philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Block{{c0, c1, c2, c3}};
}

// Block k of a reservation at (seed, offset): draws 4k .. 4k+3.
LOOM_HOST_DEVICE Block block(uint64_t seed, uint64_t offset, uint64_t k) {
  return philox4x32(offset + k, 0, seed);
}

// Uniform float in [0, 1) from 24 bits of a draw; double from 53 bits of two (loom::
// uint32_to_unit_float / uint64_to_unit_double).
LOOM_HOST_DEVICE float unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
LOOM_HOST_DEVICE double unit_double(uint64_t x) {
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}
LOOM_HOST_DEVICE uint64_t join(uint32_t hi, uint32_t lo) {
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// The float64 rand value of element i from its block (block i / 2, lanes 2 (i % 2) and next).
LOOM_HOST_DEVICE double rand_double(const Block& b, uint64_t i) {
  const int l = static_cast<int>((2 * i) % 4);
  return unit_double(join(b.v[l], b.v[l + 1]));
}
// randint's element i from its block (block i / 2): low + 64 random bits modulo the range.
LOOM_HOST_DEVICE int64_t randint_value(const Block& b, uint64_t i, int64_t low, uint64_t range) {
  const int l = static_cast<int>((2 * i) % 4);
  return low + static_cast<int64_t>(join(b.v[l], b.v[l + 1]) % range);
}

// randn's elements 2k and 2k+1 from block k: Box-Muller in double, the CPU's operations in order
// (no sum that a compiler could fuse into a multiply-add).
LOOM_HOST_DEVICE void randn_pair(const Block& b, double* z0, double* z1) {
  const double u1 = unit_double(join(b.v[0], b.v[1]));
  const double u2 = unit_double(join(b.v[2], b.v[3]));
  const double r = ::sqrt(-2.0 * ::log(1.0 - u1));  // 1 - u1 is in (0, 1]
  const double theta = 2.0 * 3.14159265358979323846 * u2;
  *z0 = r * ::cos(theta);
  *z1 = r * ::sin(theta);
}

}  // namespace loom::cuda_ops::philox
