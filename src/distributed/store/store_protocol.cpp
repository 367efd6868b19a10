// See Note [TCP store frames] in store_protocol.h.
#include "distributed/store/store_protocol.h"

#include <cstdio>

#include "loom/error.h"

namespace loom::dist::proto {
namespace {

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, 4);
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

bool is_request(Op op) {
  auto v = static_cast<uint8_t>(op);
  return v >= static_cast<uint8_t>(Op::Hello) && v <= static_cast<uint8_t>(Op::Ping);
}

bool is_reply(Op op) {
  auto v = static_cast<uint8_t>(op);
  return v >= static_cast<uint8_t>(Op::Ok) && v <= static_cast<uint8_t>(Op::Error);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Hello:
      return "hello";
    case Op::Set:
      return "set";
    case Op::Get:
      return "get";
    case Op::Add:
      return "add";
    case Op::CompareSet:
      return "compare_set";
    case Op::Wait:
      return "wait";
    case Op::Check:
      return "check";
    case Op::Delete:
      return "delete_key";
    case Op::NumKeys:
      return "num_keys";
    case Op::MultiGet:
      return "multi_get";
    case Op::MultiSet:
      return "multi_set";
    case Op::Ping:
      return "ping";
    case Op::Ok:
      return "ok";
    case Op::Value:
      return "value";
    case Op::Int:
      return "int";
    case Op::Bool:
      return "bool";
    case Op::Timeout:
      return "timeout";
    case Op::Error:
      return "error";
  }
  static thread_local char buf[16];
  std::snprintf(buf, sizeof(buf), "op#%u", static_cast<unsigned>(op));
  return buf;
}

void encode(Op op, const std::vector<std::string_view>& fields, std::string& out,
            size_t max_frame_bytes, std::string_view what) {
  size_t body = 1;
  for (const auto& f : fields) body += kLengthBytes + f.size();
  LOOM_CHECK(body <= max_frame_bytes && body <= UINT32_MAX, "[store] ",
             what.empty() ? op_name(op) : what, ": request of ", body,
             " bytes exceeds the frame limit of ", max_frame_bytes, " bytes");
  out.reserve(out.size() + kLengthBytes + body);
  put_u32(out, static_cast<uint32_t>(body));
  out.push_back(static_cast<char>(op));
  for (const auto& f : fields) {
    put_u32(out, static_cast<uint32_t>(f.size()));
    out.append(f.data(), f.size());
  }
}

DecodeStatus decode(const char* buf, size_t size, size_t max_frame_bytes, Frame* frame,
                    size_t* consumed, std::string* error) {
  if (size < kLengthBytes) return DecodeStatus::NeedMore;
  const uint32_t body = get_u32(buf);
  if (body == 0) {
    *error = "empty frame (length 0, no opcode)";
    return DecodeStatus::Error;
  }
  if (body > max_frame_bytes) {
    *error = "frame of " + std::to_string(body) + " bytes exceeds the limit of " +
             std::to_string(max_frame_bytes) + " bytes";
    return DecodeStatus::Error;
  }
  // The opcode is checked as soon as it arrives, so garbage is rejected without waiting for a
  // frame's worth of bytes.
  if (size < kLengthBytes + 1) return DecodeStatus::NeedMore;
  const auto op = static_cast<Op>(static_cast<uint8_t>(buf[kLengthBytes]));
  if (!is_request(op) && !is_reply(op)) {
    *error = "unknown opcode " + std::to_string(static_cast<unsigned>(static_cast<uint8_t>(op)));
    return DecodeStatus::Error;
  }
  if (size - kLengthBytes < body) return DecodeStatus::NeedMore;

  frame->op = op;
  frame->fields.clear();
  const char* p = buf + kLengthBytes + 1;
  size_t left = body - 1;
  while (left > 0) {
    const size_t index = frame->fields.size();
    if (left < kLengthBytes) {
      *error = std::string(op_name(op)) + " frame: field " + std::to_string(index) +
               " has a truncated length (" + std::to_string(left) +
               " of 4 bytes left in the frame)";
      return DecodeStatus::Error;
    }
    const uint32_t n = get_u32(p);
    p += kLengthBytes;
    left -= kLengthBytes;
    if (n > left) {
      *error = std::string(op_name(op)) + " frame: field " + std::to_string(index) + " claims " +
               std::to_string(n) + " bytes but only " + std::to_string(left) +
               " remain in the frame";
      return DecodeStatus::Error;
    }
    frame->fields.emplace_back(p, n);
    p += n;
    left -= n;
  }
  *consumed = kLengthBytes + body;
  return DecodeStatus::Frame;
}

std::string encode_int(int64_t v) {
  std::string s(8, '\0');
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  return s;
}

bool decode_int(std::string_view field, int64_t* v) {
  if (field.size() != 8) return false;
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i)
    u |= static_cast<uint64_t>(static_cast<unsigned char>(field[i])) << (8 * i);
  *v = static_cast<int64_t>(u);
  return true;
}

}  // namespace loom::dist::proto
