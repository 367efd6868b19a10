// Wire format of the TCP store (distributed layer, internal).
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
//   Hello     token                      -> Ok, or Error and close when the token is wrong
//   Set       key value                  -> Ok
//   Get       timeout_ms key             -> Value value, or Timeout key (parked until set)
//   Add       key delta                  -> Int new_value, or Error (value is not an integer)
//   CompareSet key expected desired      -> Value stored
//   Wait      timeout_ms key+            -> Ok, or Timeout missing_key+ (parked)
//   Check     key+                       -> Bool
//   Delete    key                        -> Bool existed
//   NumKeys                              -> Int
//   MultiGet  timeout_ms key+            -> Value value+, or Timeout missing_key+ (parked)
//   MultiSet  (key value)+               -> Ok
//   Ping                                 -> Ok
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
  Hello = 1,
  Set = 2,
  Get = 3,
  Add = 4,
  CompareSet = 5,
  Wait = 6,
  Check = 7,
  Delete = 8,
  NumKeys = 9,
  MultiGet = 10,
  MultiSet = 11,
  Ping = 12,
  // replies
  Ok = 64,
  Value = 65,
  Int = 66,
  Bool = 67,
  Timeout = 68,
  Error = 69,
};

constexpr size_t kLengthBytes = 4;
constexpr size_t kDefaultMaxFrameBytes = 64u << 20;

bool is_request(Op op);
bool is_reply(Op op);
const char* op_name(Op op);  // "set", "get", ... ; "op#N" for unknown values

struct Frame {
  Op op = Op::Ok;
  std::vector<std::string> fields;
};

// Appends one encoded frame to `out`. Throws ValueError when the frame would exceed max_frame_bytes
// (naming `what`, e.g. "set('key')").
void encode(Op op, const std::vector<std::string_view>& fields, std::string& out,
            size_t max_frame_bytes = kDefaultMaxFrameBytes, std::string_view what = {});

enum class DecodeStatus { NeedMore, Frame, Error };

// Decodes the frame at the start of buf[0, size). NeedMore: not all of it has arrived (a length
// header above max_frame_bytes is already an error). Frame: *frame is filled and *consumed is its
// encoded size. Error: *error says why (opcode, field index, lengths); the stream cannot be
// resynced.
DecodeStatus decode(const char* buf, size_t size, size_t max_frame_bytes, Frame* frame,
                    size_t* consumed, std::string* error);

std::string encode_int(int64_t v);
// False when the field is not exactly 8 bytes.
bool decode_int(std::string_view field, int64_t* v);

}  // namespace loom::dist::proto
