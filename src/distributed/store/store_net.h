// Socket helpers of the TCP store (distributed layer, internal): address text, non-blocking connect
// with a deadline, and the open-files limit. Thread-safe (no shared state).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>

namespace loom::dist::net {

using Clock = std::chrono::steady_clock;

// "127.0.0.1:29500", "[::1]:29500".
std::string host_port(const std::string& host, int port);
std::string sockaddr_text(const sockaddr_storage& addr);

// Opens a non-blocking TCP connection to host:port, waiting for it until the deadline. Returns the
// fd, or -1 with *error saying why (resolution failure, refused, timed out).
int connect_once(const std::string& host, int port, Clock::time_point deadline, std::string* error);

// Milliseconds left until the deadline, clamped to [0, INT_MAX] (for poll()).
int ms_until(Clock::time_point deadline);

// Raises the soft RLIMIT_NOFILE to the hard limit (servers and tests with many clients).
void raise_fd_limit();

}  // namespace loom::dist::net
