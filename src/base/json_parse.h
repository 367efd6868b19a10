// Internal to the base layer: the JSON parser without the throwing wrapper, so that callers such as
// the safetensors reader can report errors with their own prefix and file offsets.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "loom/json.h"

namespace loom::io::detail {

struct JsonParseError {
  size_t offset = 0;   // byte offset into the parsed text
  std::string reason;  // "expected ',' or '}' after an object member", ...
};

// Parses `text` as one JSON document into *out. Returns false and fills *err on bad input.
bool parse_json(std::string_view text, Json* out, JsonParseError* err);

}  // namespace loom::io::detail
