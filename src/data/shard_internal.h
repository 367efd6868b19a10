// Internal to the data layer: constants and helpers shared by the shard writer and the shard
// reader. The layout itself is described in Note [shard layout] and Note [record layout]
// (loom/data/shard.h). Everything here is a pure function or a constant; thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "loom/data/shard.h"

namespace loom::data::detail {

static_assert(std::endian::native == std::endian::little,
              "shard files are little-endian; a big-endian host needs byte swapping here");

constexpr char kShardMagic[8] = {'L', 'O', 'O', 'M', 'S', 'H', 'R', 'D'};
constexpr size_t kHeaderBytes = 64;
constexpr size_t kTableEntryBytes = 16;  // u64 offset, u32 stored_bytes, u32 crc32c
constexpr uint32_t kFlagZstd = 1;
constexpr const char* kIndexName = "index.json";
constexpr const char* kIndexFormat = "loom-shards";

// Byte offsets of the header fields.
constexpr size_t kOffVersion = 8;
constexpr size_t kOffFlags = 12;
constexpr size_t kOffSamples = 16;
constexpr size_t kOffTableOffset = 24;
constexpr size_t kOffDataOffset = 32;
constexpr size_t kOffFileSize = 40;
constexpr size_t kOffSchemaBytes = 48;
constexpr size_t kOffTableCrc = 52;
constexpr size_t kOffHeaderCrc = 56;
constexpr size_t kOffReserved = 60;
static_assert(kOffReserved + 4 == kHeaderBytes);

// Limits that keep a corrupt file from asking for absurd allocations; real datasets stay far below.
constexpr size_t kMaxColumns = 4096;
constexpr size_t kMaxTensorRank = 64;
constexpr uint32_t kMaxSchemaBytes = 16u << 20;

inline uint64_t align_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store_u32(void* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}
inline void store_u64(void* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}

// crc32c_combine lets the writer hash the records as they stream out and prepend the header, which
// is known only at the end (loom/crc32c.h).
using loom::crc32c_combine;
inline std::string crc_hex(uint32_t crc) {
  return crc32c_hex(crc);
}
inline bool parse_crc_hex(const std::string& s, uint32_t* out) {
  return parse_crc32c_hex(s, out);
}

// "shard-00042.lsh".
std::string shard_file_name(int index);

// CRC32C of the 64 header bytes with the header_crc32c field taken as zero, then the schema text.
uint32_t header_crc(const unsigned char* header, const char* schema, size_t schema_bytes);

// Bytes before a record's first payload: the u32 sizes, padded to 8 (Note [record layout]).
inline uint64_t record_prefix_bytes(size_t columns) {
  return align_up(4 * uint64_t(columns), 8);
}

// "[3, -1]", "any".
std::string shape_text(const Column& c);

}  // namespace loom::data::detail
