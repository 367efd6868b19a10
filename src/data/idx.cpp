// IDX reader and the Fashion-MNIST loader (see loom/datasets.h).
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/config.h"
#include "loom/datasets.h"
#include "loom/error.h"

namespace loom::data {
namespace {

constexpr const char* kInstallHint =
    "install it with `sudo apt install dataset-fashion-mnist`, or set LOOM_FASHION_MNIST_DIR to a "
    "directory holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]";

std::string hex_byte(unsigned char b) {
  char s[8];
  std::snprintf(s, sizeof(s), "0x%02X", b);
  return s;
}

uint32_t read_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool idx_dtype(unsigned char code, DType* out) {
  switch (code) {
    case 0x08:
      *out = kUInt8;
      return true;
    case 0x09:
      *out = kInt8;
      return true;
    case 0x0B:
      *out = kInt16;
      return true;
    case 0x0C:
      *out = kInt32;
      return true;
    case 0x0D:
      *out = kFloat32;
      return true;
    case 0x0E:
      *out = kFloat64;
      return true;
    default:
      return false;
  }
}

// The whole file, decompressed when it is gzip (zlib's gzread passes other files through as they
// are).
std::string read_whole_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) LOOM_THROW(DataError, "[data] ", path, " does not exist");
  LOOM_CHECK_AS(DataError, !std::filesystem::is_directory(path, ec), "[data] ", path,
                " is a directory, expected an IDX file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) LOOM_THROW(DataError, "[data] cannot open ", path, ": ", std::strerror(errno));
  gzbuffer(f, 1 << 18);
  std::string bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int n = gzread(f, bytes.data() + old, static_cast<unsigned>(kChunk));
    bytes.resize(old + static_cast<size_t>(n > 0 ? n : 0));
    if (n <= 0) break;
  }
  // A truncated or corrupt gzip stream shows up here (zlib says "unexpected end of file").
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  std::string what = msg ? msg : "";
  gzclose(f);
  if (err != Z_OK) {
    LOOM_THROW(DataError, "[data] ", path, ": bad gzip data at decompressed byte offset ",
               bytes.size(), " (", what, "); is the file truncated?");
  }
  return bytes;
}

}  // namespace

Tensor parse_idx(const void* data, size_t nbytes, const std::string& source) {
  const auto* p = static_cast<const unsigned char*>(data);
  LOOM_CHECK_AS(DataError, nbytes >= 4, "[data] ", source, ": truncated IDX header: ", nbytes,
                " byte(s) but the magic number needs 4 at byte offset 0");
  LOOM_CHECK_AS(DataError, p[0] == 0 && p[1] == 0, "[data] ", source, ": bad IDX magic ",
                hex_byte(p[0]), " ", hex_byte(p[1]), " at byte offset 0 (expected 0x00 0x00)");
  DType dtype;
  LOOM_CHECK_AS(DataError, idx_dtype(p[2], &dtype), "[data] ", source,
                ": unknown IDX element type ", hex_byte(p[2]),
                " at byte offset 2 (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  const size_t ndims = p[3];
  const size_t header = 4 + 4 * ndims;
  LOOM_CHECK_AS(DataError, nbytes >= header, "[data] ", source, ": truncated IDX header: ", ndims,
                " dimension(s) need bytes up to offset ", header,
                " but the data ends at byte offset ", nbytes);
  std::vector<int64_t> sizes(ndims);
  const size_t esize = element_size(dtype);
  size_t numel = 1;
  bool overflow = false;
  for (size_t d = 0; d < ndims; ++d) {
    sizes[d] = read_be32(p + 4 + 4 * d);
    overflow |= __builtin_mul_overflow(numel, static_cast<size_t>(sizes[d]), &numel);
  }
  size_t want = 0;
  overflow |= __builtin_mul_overflow(numel, esize, &want);
  if (overflow) {
    std::string shape;
    for (size_t d = 0; d < ndims; ++d) shape += (d ? ", " : "") + std::to_string(sizes[d]);
    LOOM_THROW(DataError, "[data] ", source, ": IDX shape [", shape,
               "] (header at byte offset 4) is too ", "large to address; the file is corrupt");
  }
  LOOM_CHECK_AS(DataError, nbytes - header >= want, "[data] ", source,
                ": truncated IDX data: ", want, " byte(s) expected from byte offset ", header,
                " but the data ends at byte offset ", nbytes);
  LOOM_CHECK_AS(DataError, nbytes - header == want, "[data] ", source, ": ", nbytes - header - want,
                " unexpected byte(s) after the IDX data, from byte offset ", header + want);
  Tensor t = empty_tensor(sizes, dtype);
  auto* out = static_cast<unsigned char*>(t.data_ptr());
  const unsigned char* in = p + header;
  if (esize == 1) {
    if (want) std::memcpy(out, in, want);
  } else {
    // IDX stores elements big-endian; loom's CPU tensors are little-endian (x86, arm64).
    for (size_t i = 0; i < numel; ++i) {
      for (size_t b = 0; b < esize; ++b) out[i * esize + b] = in[i * esize + esize - 1 - b];
    }
  }
  return t;
}

Tensor read_idx(const std::string& path) {
  std::string bytes = read_whole_file(path);
  return parse_idx(bytes.data(), bytes.size(), path);
}

const config::PathSetting kFashionMnistDir(
    "LOOM_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist",
    "where `loom train` finds the Fashion-MNIST IDX files (the "
    "default is the Debian package's directory)");

std::string default_fashion_mnist_dir() {
  return kFashionMnistDir.get();
}

namespace {

// root/stem.gz if present, else root/stem.
std::string find_split_file(const std::string& root, const std::string& stem) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path gz = fs::path(root) / (stem + ".gz");
  const fs::path plain = fs::path(root) / stem;
  if (fs::exists(gz, ec)) return gz.string();
  if (fs::exists(plain, ec)) return plain.string();
  LOOM_THROW(DataError, "[data] Fashion-MNIST file not found: neither ", gz.string(), " nor ",
             plain.string(), " exists; ", kInstallHint);
}

}  // namespace

MnistSplit load_fashion_mnist(const std::string& root, bool train) {
  std::error_code ec;
  LOOM_CHECK_AS(DataError, std::filesystem::is_directory(root, ec),
                "[data] Fashion-MNIST directory ", root, " does not exist; ", kInstallHint);
  const std::string prefix = train ? "train" : "t10k";
  const std::string image_path = find_split_file(root, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_split_file(root, prefix + "-labels-idx1-ubyte");

  Tensor images = read_idx(image_path);
  LOOM_CHECK_AS(
      DataError,
      images.dtype() == kUInt8 && images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28,
      "[data] ", image_path,
      ": expected uint8 images [N, 28, 28] but the header (byte offset 0) says ",
      dtype_name(images.dtype()), " ", images.shape_str());
  Tensor raw_labels = read_idx(label_path);
  LOOM_CHECK_AS(DataError, raw_labels.dtype() == kUInt8 && raw_labels.dim() == 1, "[data] ",
                label_path, ": expected uint8 labels [N] but the header (byte offset 0) says ",
                dtype_name(raw_labels.dtype()), " ", raw_labels.shape_str());
  // Both counts are the first dimension, the 32-bit field at byte offset 4.
  LOOM_CHECK_AS(DataError, images.size(0) == raw_labels.size(0),
                "[data] Fashion-MNIST count mismatch: ", image_path, " holds ", images.size(0),
                " images but ", label_path, " holds ", raw_labels.size(0),
                " labels (the counts at byte offset 4 of each file differ)");

  const int64_t n = raw_labels.size(0);
  Tensor labels = empty_tensor({n}, kInt64);
  const auto* in = static_cast<const uint8_t*>(raw_labels.data_ptr());
  auto* out = static_cast<int64_t*>(labels.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    LOOM_CHECK_AS(DataError, in[i] <= 9, "[data] ", label_path, ": label ", int{in[i]},
                  " out of range 0..9 at byte offset ", 8 + i);
    out[i] = in[i];
  }
  return MnistSplit{std::move(images), std::move(labels)};
}

}  // namespace loom::data
