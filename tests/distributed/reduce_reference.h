// Test helper for reductions: each rank's input is a deterministic function of (rank, index), and
// the expected result is computed here with plain loops, independently of the library's kernels.
// Integers wrap (computed in uint64), floats are compared with a tolerance for reordering (SUM,
// PROD) or exactly (MIN, MAX), bool reduces as or/and.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config.h"
#include "loom/distributed/reduce_op.h"
#include "loom/dtype.h"

namespace loom::testing {

inline const char* op_label(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::Sum:
      return "sum";
    case dist::ReduceOp::Prod:
      return "prod";
    case dist::ReduceOp::Min:
      return "min";
    case dist::ReduceOp::Max:
      return "max";
    case dist::ReduceOp::Avg:
      return "avg";
  }
  return "?";
}

inline uint64_t mix_bits(int rank, size_t i) {
  uint64_t x = static_cast<uint64_t>(rank + 1) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(i + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return x;
}

template <class T>
T input_value(int rank, size_t i, dist::ReduceOp op) {
  uint64_t x = mix_bits(rank, i);
  if constexpr (std::is_same_v<T, bool>) {
    // Mostly true, so that and-reductions are not all false.
    return x % 8 != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(x);  // full range: sums and products wrap
  } else {
    double u = static_cast<double>(x % 2001) / 1000.0 - 1.0;  // [-1, 1]
    return T(static_cast<float>(op == dist::ReduceOp::Prod ? 1.0 + u / 16 : u));
  }
}

inline std::vector<char> make_input(DType dt, int rank, size_t count, dist::ReduceOp op) {
  std::vector<char> buf(count * element_size(dt));
  LOOM_DISPATCH_ALL_TYPES(dt, "test", [&] {
    auto* p = reinterpret_cast<scalar_t*>(buf.data());
    for (size_t i = 0; i < count; ++i) p[i] = input_value<scalar_t>(rank, i, op);
  });
  return buf;
}

// First element of `got` (count elements of T, standing for input elements first..first+count)
// that is not the reduction over ranks 0..size-1 of their inputs; "" when all match.
template <class T>
std::string check_reduced(const char* got_bytes, int size, size_t count, dist::ReduceOp op,
                          size_t first) {
  using dist::ReduceOp;
  const T* got = reinterpret_cast<const T*>(got_bytes);
  for (size_t k = 0; k < count; ++k) {
    const size_t i = first + k;
    std::string bad;
    if constexpr (std::is_same_v<T, bool>) {
      bool any = false, all = true;
      for (int r = 0; r < size; ++r) {
        bool v = input_value<bool>(r, i, op);
        any |= v;
        all &= v;
      }
      bool want = (op == ReduceOp::Sum || op == ReduceOp::Max) ? any : all;
      if (got[k] != want) bad = std::to_string(got[k]) + " != " + std::to_string(want);
    } else if constexpr (std::is_integral_v<T>) {
      uint64_t acc = op == ReduceOp::Prod ? 1 : 0;
      T ext = input_value<T>(0, i, op);
      for (int r = 0; r < size; ++r) {
        T v = input_value<T>(r, i, op);
        if (op == ReduceOp::Sum) acc += static_cast<uint64_t>(v);
        if (op == ReduceOp::Prod) acc *= static_cast<uint64_t>(v);
        if (op == ReduceOp::Min && v < ext) ext = v;
        if (op == ReduceOp::Max && v > ext) ext = v;
      }
      T want = (op == ReduceOp::Sum || op == ReduceOp::Prod) ? static_cast<T>(acc) : ext;
      if (got[k] != want) bad = std::to_string(+got[k]) + " != " + std::to_string(+want);
    } else {
      // Floats (and f16/bf16 through float).
      double acc = op == ReduceOp::Prod ? 1 : 0, mag = 0;
      float ext = input_value<T>(0, i, op);
      for (int r = 0; r < size; ++r) {
        float v = input_value<T>(r, i, op);
        if (op == ReduceOp::Sum) acc += v;
        if (op == ReduceOp::Prod) acc *= v;
        mag += std::fabs(v);
        if (op == ReduceOp::Min && v < ext) ext = v;
        if (op == ReduceOp::Max && v > ext) ext = v;
      }
      double g = static_cast<double>(got[k]);
      if (op == ReduceOp::Sum || op == ReduceOp::Prod) {
        double eps = std::is_same_v<T, double> ? 2.3e-16 : std::is_same_v<T, float> ? 1.2e-7 : 8e-3;
        double tol = 2 * size * eps * (op == ReduceOp::Sum ? mag : std::fabs(acc)) + 1e-300;
        if (!(std::fabs(g - acc) <= tol)) bad = std::to_string(g) + " != " + std::to_string(acc);
      } else if (g != static_cast<double>(ext)) {
        bad = std::to_string(g) + " != " + std::to_string(ext);
      }
    }
    if (!bad.empty()) return "element " + std::to_string(i) + ": " + bad;
  }
  return "";
}

inline std::string check_reduced(DType dt, const char* got, int size, size_t count,
                                 dist::ReduceOp op, size_t first = 0) {
  std::string out;
  LOOM_DISPATCH_ALL_TYPES(dt, "test",
                          [&] { out = check_reduced<scalar_t>(got, size, count, op, first); });
  return out;
}

// Sets LOOM_DIST_CHUNK_BYTES for a scope (the API override; "" restores the default).
struct ChunkBytes {
  explicit ChunkBytes(size_t bytes) { config::set("LOOM_DIST_CHUNK_BYTES", std::to_string(bytes)); }
  ~ChunkBytes() { config::set("LOOM_DIST_CHUNK_BYTES", ""); }
  ChunkBytes(const ChunkBytes&) = delete;
  ChunkBytes& operator=(const ChunkBytes&) = delete;
};

}  // namespace loom::testing
