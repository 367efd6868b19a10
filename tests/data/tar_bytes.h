// Test helpers for the tar reader and `pack`: a temporary directory, file I/O, and tar archives
// built byte by byte (so that tests can make the bad ones GNU tar refuses to write).
#pragma once

#include "temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace loom::testing {

inline void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Deterministic bytes (all 256 values appear) of length n, different for each seed.
inline std::string pattern_bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

struct TarHeader {
  TarHeader(std::string n = "", uint64_t s = 0, char t = '0', std::string link = "")
      : name(std::move(n)), size(s), type(t), linkname(std::move(link)) {}
  std::string name;
  uint64_t size = 0;
  char type = '0';
  std::string linkname;
  bool base256_size = false;     // write the size GNU's base-256 way
  bool signed_checksum = false;  // store the signed byte sum (as some old tars did)
};

// One 512-byte ustar header with a valid checksum.
inline std::string tar_header(const TarHeader& h) {
  std::string b(512, '\0');
  std::memcpy(&b[0], h.name.data(), std::min<size_t>(h.name.size(), 100));
  std::snprintf(&b[100], 8, "%07o", 0644);
  std::snprintf(&b[108], 8, "%07o", 1000);
  std::snprintf(&b[116], 8, "%07o", 1000);
  if (h.base256_size) {
    b[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) b[135 - i] = static_cast<char>((h.size >> (8 * i)) & 0xFF);
  } else {
    char size[16];
    std::snprintf(size, sizeof(size), "%011llo", static_cast<unsigned long long>(h.size));
    std::memcpy(&b[124], size, 11);
  }
  std::snprintf(&b[136], 12, "%011o", 1700000000);
  b[156] = h.type;
  std::memcpy(&b[157], h.linkname.data(), std::min<size_t>(h.linkname.size(), 100));
  std::memcpy(&b[257],
              "ustar\0"
              "00",
              8);
  std::memcpy(&b[265], "user", 4);
  std::memcpy(&b[297], "group", 5);
  std::memset(&b[148], ' ', 8);
  long sum = 0;
  for (unsigned char c : b) sum += h.signed_checksum ? static_cast<signed char>(c) : c;
  std::snprintf(&b[148], 8, "%06lo", static_cast<unsigned long>(sum) & 0777777);
  b[155] = ' ';
  return b;
}

inline std::string tar_padding(size_t n) {
  return std::string((512 - n % 512) % 512, '\0');
}

// A regular-file member: header, data, padding.
inline std::string tar_entry(const std::string& name, const std::string& data, char type = '0') {
  TarHeader h;
  h.name = name;
  h.size = data.size();
  h.type = type;
  return tar_header(h) + data + tar_padding(data.size());
}

// The two zero blocks that end an archive (GNU tar pads further to 10240 bytes; so do we).
inline std::string tar_end(size_t archive_bytes_so_far = 0) {
  std::string end(1024, '\0');
  const size_t total = archive_bytes_so_far + end.size();
  end.append((10240 - total % 10240) % 10240, '\0');
  return end;
}

// Runs a shell command; throws when it fails.
inline void sh(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("command failed: " + cmd);
}

}  // namespace loom::testing
