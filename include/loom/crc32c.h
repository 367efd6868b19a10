// CRC32C (Castagnoli) checksums (base layer): shards, checkpoints and anything else that must
// notice a flipped bit. Hardware-accelerated where the build targets SSE4.2. Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/export.h"

namespace loom {

// crc32c(b, n, crc32c(a, m)) is the CRC32C of a followed by b.
LOOM_API uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The CRC32C of A followed by B, from crc32c(A), crc32c(B) and B's length (without reading A or B).
LOOM_API uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// "0000abcd" and back; parse returns false unless `s` is exactly 8 hex digits.
LOOM_API std::string crc32c_hex(uint32_t crc);
LOOM_API bool parse_crc32c_hex(std::string_view s, uint32_t* out);

}  // namespace loom
