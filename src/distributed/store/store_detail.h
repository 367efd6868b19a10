// Helpers shared by the store implementations (distributed layer, internal): the wording of timeout
// and value errors, so that every store reports them the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/distributed/store.h"

namespace loom::dist::detail {

// "5.0 s", "0.25 s": seconds with at least one decimal.
std::string format_seconds(Duration d);
// Bytes as text for messages: control and non-ASCII bytes as \xNN, cut after `max` bytes with
// "...". (Exception messages are C strings, so a raw NUL would end them.)
std::string printable(const std::string& bytes, size_t max = 64);
// "'a', 'b'" (printable; at most 8 keys, then "... (N more)").
std::string quote_keys(const std::vector<std::string>& keys);
// The integer an add() finds at `key`; ValueError naming the key and value when it is not one.
int64_t parse_counter(const std::string& key, const std::string& value);
// Throws the TimeoutError of a get/wait that ran out of time. `where` is "server 127.0.0.1:29500",
// "file /tmp/x" or "HashStore".
[[noreturn]] void throw_wait_timeout(const char* op, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& missing, Duration timeout,
                                     const std::string& where);

}  // namespace loom::dist::detail
