// Wire format of the TCP store (dist layer, internal).
//
// Note [TCP store frames]
// Every message is one frame:
//
//   u32 length            bytes that follow (opcode + fields), little-endian, 1 .. max_frame_bytes
//   u8  opcode            an Op below
//   field*                each: u32 length (little-endian) + that many bytes
//
// A frame carries a list of byte strings; integers travel as 8-byte little-endian fields. The
// number of fields each opcode takes is fixed (or, for key lists, at least some minimum) and is
// checked by the server after decoding. Decoding validates every length against the frame before
// touching the bytes, so a malformed frame is reported as an error string and never read out of
// bounds.
//
// Requests (client -> server) and their replies:
//   kHello     token                      -> kOk, or kError and close when the token is wrong
//   kSet       key value                  -> kOk
//   kGet       timeout_ms key             -> kValue value, or kTimeout key (parked until set)
//   kAdd       key delta                  -> kInt new_value, or kError (value is not an integer)
//   kCompareSet key expected desired      -> kValue stored
//   kWait      timeout_ms key+            -> kOk, or kTimeout missing_key+ (parked)
//   kCheck     key+                       -> kBool
//   kDelete    key                        -> kBool existed
//   kNumKeys                              -> kInt
//   kMultiGet  timeout_ms key+            -> kValue value+, or kTimeout missing_key+ (parked)
//   kMultiSet  (key value)+               -> kOk
//   kPing                                 -> kOk
// A client sends one request at a time; the server answers a client's requests in order (it stops
// reading a client's frames while one of its requests is parked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::dist::proto {

enum class Op : uint8_t {
  // requests
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kCheck = 7,
  kDelete = 8,
  kNumKeys = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kPing = 12,
  // replies
  kOk = 64,
  kValue = 65,
  kInt = 66,
  kBool = 67,
  kTimeout = 68,
  kError = 69,
};

constexpr size_t kLengthBytes = 4;
constexpr size_t kDefaultMaxFrameBytes = 64u << 20;

bool is_request(Op op);
bool is_reply(Op op);
const char* op_name(Op op);  // "set", "get", ... ; "op#N" for unknown values

struct Frame {
  Op op = Op::kOk;
  std::vector<std::string> fields;
};

// Appends one encoded frame to `out`. Throws ValueError when the frame would exceed max_frame_bytes
// (naming `what`, e.g. "set('key')").
void encode(Op op, const std::vector<std::string_view>& fields, std::string& out,
            size_t max_frame_bytes = kDefaultMaxFrameBytes, std::string_view what = {});

enum class DecodeStatus { kNeedMore, kFrame, kError };

// Decodes the frame at the start of buf[0, size). kNeedMore: not all of it has arrived (a length
// header above max_frame_bytes is already an error). kFrame: *frame is filled and *consumed is its
// encoded size. kError: *error says why (opcode, field index, lengths); the stream cannot be
// resynced.
DecodeStatus decode(const char* buf, size_t size, size_t max_frame_bytes, Frame* frame,
                    size_t* consumed, std::string* error);

std::string encode_int(int64_t v);
// False when the field is not exactly 8 bytes.
bool decode_int(std::string_view field, int64_t* v);

}  // namespace loom::dist::proto
