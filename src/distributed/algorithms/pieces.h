// Splitting buffers into blocks and pipeline pieces (distributed algorithms, internal). Every rank
// computes the same split from the same numbers, so a sender's pieces match its receiver's exactly.
#pragma once

#include <algorithm>
#include <cstddef>

namespace loom::dist {

struct Span {
  size_t begin = 0;  // first element
  size_t len = 0;    // elements
};

// Part i of n elements cut into `parts` near-equal parts; the first n % parts parts are one longer.
inline Span split_part(size_t n, size_t parts, size_t i) {
  size_t base = n / parts, rem = n % parts;
  return Span{i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

// How many pieces of at most `chunk_bytes` hold n elements of `elem_bytes` (0 for n == 0).
inline size_t piece_count(size_t n, size_t elem_bytes, size_t chunk_bytes) {
  size_t per = std::max<size_t>(1, chunk_bytes / elem_bytes);
  return (n + per - 1) / per;
}

// x mod m in [0, m) for negative x too.
inline int wrap_rank(long x, int m) {
  return static_cast<int>(((x % m) + m) % m);
}

}  // namespace loom::dist
