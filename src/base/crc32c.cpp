// CRC32C (Castagnoli): the SSE4.2 crc32 instruction when the build targets it, a table otherwise;
// and crc32c_combine, which the shard writer uses to hash a file whose header is written last.
#include "loom/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace loom {
namespace {

// The polynomial 0x1EDC6F41, bit-reversed: bit 31 of a CRC register holds x^0 and bit 0 holds x^31.
constexpr uint32_t kPoly = 0x82F63B78u;

#if !defined(__SSE4_2__)
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();
#endif

// Advances the raw (not inverted) register over n bytes.
uint32_t crc_update(uint32_t state, const unsigned char* p, size_t n) {
#if defined(__SSE4_2__)
  uint64_t s = state;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    s = _mm_crc32_u64(s, word);
  }
  state = static_cast<uint32_t>(s);
  for (; n > 0; --n, ++p) state = _mm_crc32_u8(state, *p);
  return state;
#else
  for (; n > 0; --n, ++p) state = kTable[(state ^ *p) & 0xFFu] ^ (state >> 8);
  return state;
#endif
}

// a * b modulo the polynomial, both in the reflected representation.
uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {  // a's terms x^0, x^1, ... in turn
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^(8n) modulo the polynomial: the effect of n zero bytes on a register.
uint32_t x_pow_8n(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = multiply_mod(result, square);
    square = multiply_mod(square, square);
  }
  return result;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  return ~crc_update(~crc, static_cast<const unsigned char*>(data), n);
}

// With the register inverted before and after, crc(A B) = crc(A) * x^(8|B|) + crc(B): the
// inversions of the two halves cancel (the same identity zlib's crc32_combine relies on).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multiply_mod(x_pow_8n(len_b), crc_a) ^ crc_b;
}

std::string crc32c_hex(uint32_t crc) {
  char s[12];
  std::snprintf(s, sizeof(s), "%08x", crc);
  return s;
}

bool parse_crc32c_hex(std::string_view s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    uint32_t d;
    if (c >= '0' && c <= '9')
      d = uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = uint32_t(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = uint32_t(c - 'A' + 10);
    else
      return false;
    v = (v << 4) | d;
  }
  *out = v;
  return true;
}

}  // namespace loom
